# The BPE tokenizer (tools_bridge/lib/bpe_tokenizer.h). bridge_bpe_test: unit tests on small
# hand-written tokenizer.json files, plus the released DeepSeek files when npm installed them.
# bridge_bpe_parity_test: ids identical to @huggingface/tokenizers (JS) and to `tokenizers` (HF's Rust
# crate, its Node binding) on a corpus; exits 77
# (skipped) without node or tests/tokenizer_js/node_modules. Both run in seconds.
add_library(cedar_tokenizer_testlib STATIC ${CMAKE_CURRENT_SOURCE_DIR}/bpe_corpus.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/tokenizer_fixtures.cpp)
target_link_libraries(cedar_tokenizer_testlib PUBLIC cedar_bridge)
target_compile_definitions(cedar_tokenizer_testlib PUBLIC CEDAR_SOURCE_DIR="${CMAKE_SOURCE_DIR}"
  CEDAR_BINARY_DIR="${CMAKE_BINARY_DIR}")

cedar_add_test(bridge_bpe_test unit cedar_tokenizer_testlib ${CMAKE_CURRENT_SOURCE_DIR}/bridge_bpe_test.cpp)
set_tests_properties(bridge_bpe_test PROPERTIES TIMEOUT 120)

add_executable(bridge_bpe_parity_test ${CMAKE_CURRENT_SOURCE_DIR}/bridge_bpe_parity_test.cpp)
target_link_libraries(bridge_bpe_parity_test PRIVATE cedar_tokenizer_testlib)
add_test(NAME bridge_bpe_parity_test COMMAND bridge_bpe_parity_test)
set_tests_properties(bridge_bpe_parity_test PROPERTIES LABELS unit TIMEOUT 300 SKIP_RETURN_CODE 77)

# Serving a model directory that carries the released tokenizer.json (skips its body without it).
cedar_add_test(server_bpe_test unit cedar_server ${CMAKE_CURRENT_SOURCE_DIR}/server_bpe_test.cpp)
target_link_libraries(server_bpe_test PRIVATE cedar_tokenizer_testlib)

# Serving a deepseek_v41 model (released tokenizer + V4.1 encoding): prompts equal the encoder's
# text tokenized, and a 20-turn agent loop replays the model's own turns as their exact ids.
cedar_add_test(server_dsml_test unit cedar_server ${CMAKE_CURRENT_SOURCE_DIR}/server_dsml_test.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/test_models.cpp)
target_link_libraries(server_dsml_test PRIVATE cedar_tokenizer_testlib)
