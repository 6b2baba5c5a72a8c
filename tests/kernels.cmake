cedar_add_test(kernels_test kernels cedar_kernels ${CMAKE_CURRENT_SOURCE_DIR}/kernels_test.cpp)
# The released KV row formats (FP8 window, FP4 + E4M3 main entries, MXFP4 index K/Q), bit-exact.
cedar_add_test(kv_quant_test kernels "cedar_kernels;nlohmann_json::nlohmann_json" ${CMAKE_CURRENT_SOURCE_DIR}/kv_quant_test.cpp)
