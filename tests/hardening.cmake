# Issue 17, requests that must not hurt the server: bounded JSON parsing, the remembered-
# generation lookup on huge conversations, create/delete/turn races on one session id, and the
# request fuzz table + seeded mutator against an in-process server (tiny model, seconds).
cedar_add_test(server_hardening_test unit cedar_server
  ${CMAKE_CURRENT_SOURCE_DIR}/json_limits_test.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/generation_memory_test.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/server_session_race_test.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/server_fuzz_test.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/server_fixture.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/test_models.cpp)
