# GPU tests (label gpu) and the kernel benchmark: only when the CUDA kernels are built
# (CEDAR_CUDA, or the standalone kernels/cuda build). A test exits 77 when there is no usable
# device, which ctest reports as skipped (SKIP_RETURN_CODE).
if(NOT TARGET cedar_kernels_cuda)
  return()
endif()
if(NOT TARGET doctest::doctest)
  message(WARNING "doctest not found: the gpu tests are not built (put doctest/doctest.h under .deps/include)")
  return()
endif()

get_filename_component(CEDAR_GPU_ROOT "${CMAKE_CURRENT_LIST_DIR}/.." ABSOLUTE)

# The tests are plain C++ that see only the host-only headers (kernels/cuda/*.h) and the scalar
# references, compiled in directly so the tests need no CPU-backend dependency (OpenBLAS).
add_library(cedar_gpu_test_main STATIC
  ${CEDAR_GPU_ROOT}/tests/gpu_test_main.cpp
  ${CEDAR_GPU_ROOT}/kernels/reference_ops.cpp
  ${CEDAR_GPU_ROOT}/kernels/weight_view_ref.cpp
  ${CEDAR_GPU_ROOT}/kernels/quant_formats.cpp)
target_include_directories(cedar_gpu_test_main PUBLIC ${CEDAR_GPU_ROOT})
target_link_libraries(cedar_gpu_test_main PUBLIC cedar_kernels_cuda doctest::doctest)

foreach(name gpu_ops_test gpu_select_test gpu_attention_moe_test)
  add_executable(${name} ${CEDAR_GPU_ROOT}/tests/${name}.cpp)
  target_link_libraries(${name} PRIVATE cedar_gpu_test_main)
  add_test(NAME ${name} COMMAND ${name})
  set_tests_properties(${name} PROPERTIES LABELS gpu SKIP_RETURN_CODE 77 TIMEOUT 600)
endforeach()

# Kernel benchmark (not a test): JSON lines, run by scripts/gpu-check.sh.
add_executable(gpu_bench ${CEDAR_GPU_ROOT}/tests/gpu_bench.cu)
set_target_properties(gpu_bench PROPERTIES CUDA_STANDARD 17 CUDA_STANDARD_REQUIRED ON)  # see kernels/cuda/CMakeLists.txt
set_property(TARGET gpu_bench PROPERTY COMPILE_OPTIONS "")
target_include_directories(gpu_bench PRIVATE ${CEDAR_GPU_ROOT})
target_link_libraries(gpu_bench PRIVATE cedar_kernels_cuda CUDA::cudart CUDA::cublas)

# Model-level parity of the CUDA engine (engine/cuda/) on the tiny model: needs the whole
# project (cedar_engine), so not in the standalone kernels/cuda build.
if(TARGET cedar_engine)
  add_executable(gpu_model_test ${CEDAR_GPU_ROOT}/tests/gpu_model_test.cpp ${CEDAR_GPU_ROOT}/tests/test_models.cpp
                                ${CEDAR_GPU_ROOT}/tests/gpu_test_main.cpp)
  target_link_libraries(gpu_model_test PRIVATE cedar_engine cedar_kernels_cuda doctest::doctest)
  target_compile_definitions(gpu_model_test PRIVATE CEDAR_SOURCE_DIR="${CEDAR_GPU_ROOT}")
  add_test(NAME gpu_model_test COMMAND gpu_model_test)
  set_tests_properties(gpu_model_test PROPERTIES LABELS gpu SKIP_RETURN_CODE 77 TIMEOUT 600)
endif()
# The session layer on the CUDA backend against the CPU backend (SessionManager, the cache).
if(TARGET cedar_session)
  add_executable(gpu_session_test ${CEDAR_GPU_ROOT}/tests/gpu_session_test.cpp ${CEDAR_GPU_ROOT}/tests/test_models.cpp
                                  ${CEDAR_GPU_ROOT}/tests/gpu_test_main.cpp)
  target_link_libraries(gpu_session_test PRIVATE cedar_session cedar_kernels_cuda doctest::doctest)
  add_test(NAME gpu_session_test COMMAND gpu_session_test)
  set_tests_properties(gpu_session_test PROPERTIES LABELS gpu SKIP_RETURN_CODE 77 TIMEOUT 600)
endif()
