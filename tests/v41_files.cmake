# The released DeepSeek-V4.1 checkpoint layout end to end: `cedar init --arch v41` writes it,
# Model::LoadReleased reads it (engine/v41_init.*, engine/v41_load.*; docs/v41-contract.md §8).
cedar_add_test(v41_load_test model cedar_engine ${CMAKE_CURRENT_SOURCE_DIR}/v41_load_test.cpp)
add_test(NAME v41_init_cli_test COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/cli/v41_init_test.sh $<TARGET_FILE:cedar>)
set_tests_properties(v41_init_cli_test PROPERTIES LABELS model TIMEOUT 120)
