# Issue 20: models loaded with BF16 / INT8 / as-stored (FP8, FP4) matmul weights on tiny and v41-tiny.
cedar_add_test(model_weights_test model cedar_engine
  ${CMAKE_CURRENT_SOURCE_DIR}/model_weights_test.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/test_models.cpp)
