# DeepSeek-V4.1-Flash as released: config, tensor inventory, number formats, checkpoint files, and
# NumPy's PCG64 (Engram's hash multipliers). See docs/v41-contract.md.
cedar_add_test(v41_config_test model cedar_engine ${CMAKE_CURRENT_SOURCE_DIR}/v41_config_test.cpp)
cedar_add_test(v41_checkpoint_test model cedar_engine ${CMAKE_CURRENT_SOURCE_DIR}/v41_checkpoint_test.cpp)
cedar_add_test(v41_quant_test unit cedar_kernels ${CMAKE_CURRENT_SOURCE_DIR}/v41_quant_test.cpp)
cedar_add_test(v41_safetensors_test unit cedar_engine ${CMAKE_CURRENT_SOURCE_DIR}/v41_safetensors_test.cpp)
# Compares with /usr/bin/python3 (numpy, fractions) at test time; exits 77 (skipped) without them.
cedar_add_test(v41_python_parity_test unit cedar_engine ${CMAKE_CURRENT_SOURCE_DIR}/v41_python_parity_test.cpp)
set_tests_properties(v41_python_parity_test PROPERTIES SKIP_RETURN_CODE 77)
