# The engine against the committed golden files of the independent reference (label model).
cedar_add_test(golden_test model cedar_engine ${CMAKE_CURRENT_SOURCE_DIR}/golden_test.cpp)

# The reference itself, and the engine on freshly seeded random configs. Both need
# python3-torch; without it they report "skipped" (exit 77), not a pass.
find_program(CEDAR_PYTHON3 python3 PATHS /usr/bin NO_DEFAULT_PATH)
if(CEDAR_PYTHON3)
  set(CEDAR_TORCH_GUARD "${CEDAR_PYTHON3} -c 'import torch' 2>/dev/null || exit 77")
  add_test(NAME reference_selftest COMMAND sh -c "${CEDAR_TORCH_GUARD}; exec ${CEDAR_PYTHON3} ${CMAKE_SOURCE_DIR}/tools/reference/test_reference.py")
  add_test(NAME reference_random_configs COMMAND sh -c "${CEDAR_TORCH_GUARD}; exec ${CEDAR_PYTHON3} ${CMAKE_SOURCE_DIR}/tools/reference/random_check.py -K 6 --cedar ${CMAKE_BINARY_DIR}/cedar")
  set_tests_properties(reference_selftest reference_random_configs PROPERTIES LABELS model SKIP_RETURN_CODE 77 TIMEOUT 900)
endif()
