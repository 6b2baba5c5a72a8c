cedar_add_test(engine_test model cedar_engine
  ${CMAKE_CURRENT_SOURCE_DIR}/engine_test.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/engine_modes_test.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/model_files_test.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/test_models.cpp)
# Issue 21: today's models give bit-identical logits and state with the released switches off.
cedar_add_test(engine_bit_identity_test model cedar_engine
  ${CMAKE_CURRENT_SOURCE_DIR}/engine_bit_identity_test.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/test_models.cpp)
# Issue 21: mHC, YaRN and the released routers against the equations and the float64 components.
cedar_add_test(engine_v41_parts_test model cedar_engine
  ${CMAKE_CURRENT_SOURCE_DIR}/engine_v41_parts_test.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/test_models.cpp)
