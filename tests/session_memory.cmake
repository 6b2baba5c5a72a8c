# Session memory budgets (session/session_budget.cpp), partial cache inserts and exact repeats,
# on the tiny model: seconds on a CPU.
cedar_add_test(session_memory_test unit cedar_session ${CMAKE_CURRENT_SOURCE_DIR}/session_memory_test.cpp ${CMAKE_CURRENT_SOURCE_DIR}/test_models.cpp)
# ... and what the server reports of it (429, paged list, /v1/cache, /metrics).
cedar_add_test(server_memory_test unit cedar_server
  ${CMAKE_CURRENT_SOURCE_DIR}/server_memory_test.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/server_fixture.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/test_models.cpp)
