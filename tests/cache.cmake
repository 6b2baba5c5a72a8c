# Prefix cache (cache/): host logic, LMDB in temporary directories; runs in seconds on a CPU.
cedar_add_test(cache_test unit cedar_cache
  ${CMAKE_CURRENT_SOURCE_DIR}/cache_test.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/cache_disk_test.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/cache_files_test.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/cache_model_test.cpp)
# The disk tier's files under the session manager (tiny model, CPU, about a second).
cedar_add_test(cache_files_session_test unit cedar_session
  ${CMAKE_CURRENT_SOURCE_DIR}/cache_files_session_test.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/test_models.cpp)
# KV as released (tiny-kvq): the forward's rounding, the stored byte forms and bit-exact restores.
cedar_add_test(kv_released_test model cedar_cache
  ${CMAKE_CURRENT_SOURCE_DIR}/kv_released_test.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/test_models.cpp)
