# The mixed scheduler (issue 14): the engine's bit-exact pieces, the session manager's step loop.
cedar_add_test(scheduler_engine_test model cedar_engine
  ${CMAKE_CURRENT_SOURCE_DIR}/scheduler_engine_test.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/test_models.cpp)
cedar_add_test(scheduler_session_test model cedar_session
  ${CMAKE_CURRENT_SOURCE_DIR}/scheduler_session_test.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/test_models.cpp)
cedar_add_test(scheduler_server_test unit cedar_server
  ${CMAKE_CURRENT_SOURCE_DIR}/scheduler_server_test.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/server_fixture.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/test_models.cpp)
cedar_add_test(scheduler_batch_test model cedar_engine
  ${CMAKE_CURRENT_SOURCE_DIR}/scheduler_batch_test.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/test_models.cpp)
cedar_add_test(scheduler_batch_session_test model cedar_session
  ${CMAKE_CURRENT_SOURCE_DIR}/scheduler_batch_session_test.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/test_models.cpp)
cedar_add_test(chunk_plan_test unit cedar_session
  ${CMAKE_CURRENT_SOURCE_DIR}/chunk_plan_test.cpp)
