# Issue 20: models loaded with BF16 / INT8 / as-stored (FP8, FP4) matmul weights on tiny and v41-tiny.
cedar_add_test(model_weights_test model cedar_engine
  ${CMAKE_CURRENT_SOURCE_DIR}/model_weights_test.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/test_models.cpp)
# `cedar init --dtype int8|bf16` files loaded as stored == F32 files converted at load, bit for bit.
cedar_add_test(model_init_dtype_test model cedar_engine
  ${CMAKE_CURRENT_SOURCE_DIR}/model_init_dtype_test.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/test_models.cpp)
# Released experts read on demand under --max-ram, held at the --weights precision: == resident, bit for bit.
cedar_add_test(v41_experts_typed_test model cedar_engine
  ${CMAKE_CURRENT_SOURCE_DIR}/v41_experts_typed_test.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/test_models.cpp)
# `cedar info --config --weights W` on a released layout: the bytes Cedar would hold == what a load at W holds.
cedar_add_test(v41_held_bytes_test model cedar_engine
  ${CMAKE_CURRENT_SOURCE_DIR}/v41_held_bytes_test.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/test_models.cpp)
