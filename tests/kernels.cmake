# cedar_kernels_test(<name> <links> <sources...>): a kernel test against cedar_kernels, and again
# as <name>_<level> against each cedar_kernels_<level> (kernels/CMakeLists.txt, CEDAR_ISA_TESTS).
# The x86-64 (portable) library runs its AVX2 kernels on a CPU with AVX2 (kernels/avx2_runtime.h),
# so its tests run once more as <name>_x86_64_noavx2 with CEDAR_NO_AVX2=1: the plain loops that
# CPUs without AVX2 take.
# Each level's tests have a test main built for that level too (cedar_test_main_<level>), so a test
# binary holds no code compiled for this machine's CPU and runs on any CPU of its level
# (kernels_portable_cpu_test below runs the x86-64 ones on an emulated CPU without AVX2).
get_property(CEDAR_KERNEL_ISAS GLOBAL PROPERTY CEDAR_KERNEL_ISAS)
foreach(id ${CEDAR_KERNEL_ISAS})
  add_library(cedar_test_main_${id} STATIC ${CMAKE_CURRENT_SOURCE_DIR}/test_main.cpp)
  target_link_libraries(cedar_test_main_${id} PUBLIC doctest::doctest cedar_kernels_${id})
endforeach()
function(cedar_kernels_test name links)
  cedar_add_test(${name} kernels "${links}" ${ARGN})
  foreach(id ${CEDAR_KERNEL_ISAS})
    string(REPLACE "cedar_kernels" "cedar_kernels_${id}" isa_links "${links}")
    set(CEDAR_TEST_MAIN cedar_test_main_${id})
    cedar_add_test(${name}_${id} kernels "${isa_links}" ${ARGN})
    unset(CEDAR_TEST_MAIN)
    if(id STREQUAL "x86_64")
      add_test(NAME ${name}_${id}_noavx2 COMMAND ${name}_${id})
      set_tests_properties(${name}_${id}_noavx2 PROPERTIES LABELS kernels TIMEOUT 600
        ENVIRONMENT "OPENBLAS_NUM_THREADS=2;CEDAR_NO_AVX2=1")
    endif()
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
# The portable kernels' tests on an emulated CPU without AVX2 (qemu-user): they must take the plain
# loops there and pass, with no AVX2 instruction outside the run-time choice (avx2_runtime.h).
if("x86_64" IN_LIST CEDAR_KERNEL_ISAS)
  add_test(NAME kernels_portable_cpu_test COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/kernels_cpu/portable_cpu_test.sh ${CMAKE_BINARY_DIR})
  set_tests_properties(kernels_portable_cpu_test PROPERTIES LABELS kernels TIMEOUT 900 SKIP_RETURN_CODE 77
    ENVIRONMENT "OPENBLAS_NUM_THREADS=2")
endif()
