cedar_add_test(kernels_test kernels cedar_kernels ${CMAKE_CURRENT_SOURCE_DIR}/kernels_test.cpp)
