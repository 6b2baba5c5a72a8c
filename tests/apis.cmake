# The Responses and Anthropic Messages APIs (server/api_responses.cpp, server/api_messages.cpp)
# as a pure handler and over a socket, on the tiny model. Their end-to-end tests with the real
# npm clients are in tests/e2e/apis_e2e.sh.
cedar_add_test(server_apis_test unit cedar_server
  ${CMAKE_CURRENT_SOURCE_DIR}/server_apis_test.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/server_fixture.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/grammar_util.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/test_models.cpp)

# End to end with @anthropic-ai/sdk, openai (responses) and the Vercel AI SDK (skipped, 77,
# without node or examples/agent_apis/node_modules, which scripts/setup.sh installs).
add_test(NAME server_apis_e2e
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/e2e/apis_e2e.sh $<TARGET_FILE:cedar> ${CMAKE_SOURCE_DIR})
set_tests_properties(server_apis_e2e PROPERTIES LABELS unit TIMEOUT 600 SKIP_RETURN_CODE 77
  ENVIRONMENT "OPENBLAS_NUM_THREADS=2")

# The same APIs on a deepseek_v41 model: tool calls replay byte for byte through their shapes.
cedar_add_test(server_apis_dsml_test unit cedar_server ${CMAKE_CURRENT_SOURCE_DIR}/server_apis_dsml_test.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/test_models.cpp)
target_link_libraries(server_apis_dsml_test PRIVATE cedar_tokenizer_testlib)
