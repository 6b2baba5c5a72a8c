cedar_add_test(session_test model cedar_session ${CMAKE_CURRENT_SOURCE_DIR}/session_test.cpp ${CMAKE_CURRENT_SOURCE_DIR}/test_models.cpp)
