# The shared remote cache tier (cache/remote_store.h) against a private redis-server each test
# starts on a Unix socket in a temp dir; exit 77 (skipped) when redis-server is not installed.
cedar_add_test(cache_remote_test unit cedar_cache
  ${CMAKE_CURRENT_SOURCE_DIR}/cache_remote_test.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/redis_fixture.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/test_models.cpp)
# Two session managers (two servers) sharing one Redis: alternating turns, faults, isolation.
cedar_add_test(remote_session_test model cedar_session
  ${CMAKE_CURRENT_SOURCE_DIR}/remote_session_test.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/redis_fixture.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/test_models.cpp)
foreach(t cache_remote_test remote_session_test)
  target_link_libraries(${t} PRIVATE ${HIREDIS_LIB})
  set_tests_properties(${t} PROPERTIES SKIP_RETURN_CODE 77)
endforeach()
