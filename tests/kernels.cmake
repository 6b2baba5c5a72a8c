# cedar_kernels_test(<name> <links> <sources...>): a kernel test against cedar_kernels, and again
# as <name>_<level> against each cedar_kernels_<level> (kernels/CMakeLists.txt, CEDAR_ISA_TESTS).
get_property(CEDAR_KERNEL_ISAS GLOBAL PROPERTY CEDAR_KERNEL_ISAS)
function(cedar_kernels_test name links)
  cedar_add_test(${name} kernels "${links}" ${ARGN})
  foreach(id ${CEDAR_KERNEL_ISAS})
    string(REPLACE "cedar_kernels" "cedar_kernels_${id}" isa_links "${links}")
    cedar_add_test(${name}_${id} kernels "${isa_links}" ${ARGN})
  endforeach()
endfunction()

cedar_kernels_test(kernels_test cedar_kernels ${CMAKE_CURRENT_SOURCE_DIR}/kernels_test.cpp)
# The released KV row formats (FP8 window, FP4 + E4M3 main entries, MXFP4 index K/Q), bit-exact.
cedar_kernels_test(kv_quant_test "cedar_kernels;nlohmann_json::nlohmann_json" ${CMAKE_CURRENT_SOURCE_DIR}/kv_quant_test.cpp)
# The row-invariant GEMM: bitwise equal to its reference and to MatVec row by row (n = 1..300).
cedar_kernels_test(gemm_rowinv_test cedar_kernels ${CMAKE_CURRENT_SOURCE_DIR}/gemm_rowinv_test.cpp)
# Typed weights (BF16, INT8, FP8, FP4; issue 20): every product against its reference and the F32
# product within the format's bound, and batched rows equal to one row alone.
cedar_kernels_test(kernels_weights_test cedar_kernels ${CMAKE_CURRENT_SOURCE_DIR}/kernels_weights_test.cpp)
# The many-row F32 product (prefill): bitwise equal to its reference, within tolerance of a
# double product, and row results independent of the rows beside them (chunked == whole).
cedar_kernels_test(gemm_prefill_test cedar_kernels ${CMAKE_CURRENT_SOURCE_DIR}/gemm_prefill_test.cpp)
# INT8 weights times 8-bit activations (--int8-activations): bitwise equal to the scalar
# reference, batched rows equal to one row alone, error within the activation rounding bound.
cedar_kernels_test(kernels_i8a8_test cedar_kernels ${CMAKE_CURRENT_SOURCE_DIR}/kernels_i8a8_test.cpp)
cedar_kernels_test(kernels_bf16a_test cedar_kernels ${CMAKE_CURRENT_SOURCE_DIR}/kernels_bf16a_test.cpp)
