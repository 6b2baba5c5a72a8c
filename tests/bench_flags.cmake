# The bench programs' command lines: --help exits 0 without running, a bad value exits 2 naming
# the flag (bench/bench_flags.h; a shell script that spawns each program, a second or two).
add_test(NAME bench_flags_test COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/bench/flags_test.sh ${CMAKE_BINARY_DIR}/bench)
set_tests_properties(bench_flags_test PROPERTIES LABELS unit TIMEOUT 120)
