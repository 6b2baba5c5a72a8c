# Session memory budgets (session/session_budget.cpp), partial cache inserts and exact repeats,
# on the tiny model: seconds on a CPU.
cedar_add_test(session_memory_test unit cedar_session ${CMAKE_CURRENT_SOURCE_DIR}/session_memory_test.cpp ${CMAKE_CURRENT_SOURCE_DIR}/test_models.cpp)
