# Sampling (engine/sampling.h): the selection Sample uses against the full stable sort it
# replaced, token for token (seconds on a CPU).
cedar_add_test(sampling_test unit cedar_engine ${CMAKE_CURRENT_SOURCE_DIR}/sampling_test.cpp)
