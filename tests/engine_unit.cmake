# Engine units without a model (seconds): sampling and the --device rule.
# Sampling (engine/sampling.h): the selection Sample uses against the full stable sort it
# replaced, token for token (seconds on a CPU).
cedar_add_test(sampling_test unit cedar_engine ${CMAKE_CURRENT_SOURCE_DIR}/sampling_test.cpp)
# engine/backend.h ChooseDevice: the --device rule (auto falls back to the CPU on a CUDA refusal), no GPU needed.
cedar_add_test(backend_device_test unit cedar_engine ${CMAKE_CURRENT_SOURCE_DIR}/backend_device_test.cpp)
