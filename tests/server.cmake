# The HTTP server (server/): the API as a pure handler, the transport over real
# sockets (tiny model, seconds on a CPU), and the end-to-end test with the openai npm client.
cedar_add_test(server_test unit cedar_server
  ${CMAKE_CURRENT_SOURCE_DIR}/server_handler_test.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/server_socket_test.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/server_isolation_test.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/server_fixture.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/test_models.cpp)

# End to end with the official openai npm client (skipped, 77, without node/npm/openai).
add_test(NAME server_agent_e2e
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/e2e/agent_e2e.sh $<TARGET_FILE:cedar> ${CMAKE_SOURCE_DIR})
set_tests_properties(server_agent_e2e PROPERTIES LABELS unit TIMEOUT 600 SKIP_RETURN_CODE 77
  ENVIRONMENT "OPENBLAS_NUM_THREADS=2")

# Issue 19's sampling fields (logprobs, logit_bias, penalties, return_token_ids, refused fields)
# against the engine's own logits.
cedar_add_test(server_sampling_test unit cedar_server
  ${CMAKE_CURRENT_SOURCE_DIR}/server_sampling_test.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/server_fixture.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/test_models.cpp)

# Issue 19's utility endpoints (tokenize, detokenize, apply-template, cache flush, version) and
# operational details (x-should-retry, metrics, access log, SSE keep-alives).
cedar_add_test(server_admin_test unit cedar_server
  ${CMAKE_CURRENT_SOURCE_DIR}/server_admin_test.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/server_fixture.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/test_models.cpp)
