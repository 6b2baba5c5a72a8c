# Speculative decoding in the server (--spec-tokens, issue 21): the session manager's decode loop
# on v41-tiny (greedy = plain, cache and live state exact; sampled = cedar generate's rule).
cedar_add_test(session_speculative_test model cedar_session
  ${CMAKE_CURRENT_SOURCE_DIR}/session_speculative_test.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/test_models.cpp)
# The same through the HTTP server (TCP, session chat turns, a streamed turn with a stop string, /metrics).
cedar_add_test(server_speculative_test model cedar_server
  ${CMAKE_CURRENT_SOURCE_DIR}/server_speculative_test.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/server_fixture.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/test_models.cpp)
