# The `cedar` binary's command line: every numeric flag refuses bad values with a message
# naming the flag, the value and the range, and the activation flags reach the kernels (a shell
# script that spawns the binary; a few seconds).
add_test(NAME cli_flags_test COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/cli/flags_test.sh $<TARGET_FILE:cedar>)
set_tests_properties(cli_flags_test PROPERTIES LABELS unit TIMEOUT 120)
