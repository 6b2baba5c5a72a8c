# Self-tests of the float64 reference of DeepSeek-V4.1-Flash's new components
# (tools/reference/v41/: single-pass mHC, released MoE routing and clamped SwiGLU, YaRN RoPE,
# FP4/FP8/MXFP4 KV quantisation with bit-level codecs). Python only; without python3-torch it
# reports "skipped" (exit 77), not a pass.
find_program(CEDAR_V41_PYTHON3 python3 PATHS /usr/bin NO_DEFAULT_PATH)
if(CEDAR_V41_PYTHON3)
  add_test(NAME reference_v41_selftest
           COMMAND sh -c "${CEDAR_V41_PYTHON3} -c 'import torch' 2>/dev/null || exit 77; exec ${CEDAR_V41_PYTHON3} ${CMAKE_SOURCE_DIR}/tools/reference/v41/test_v41.py")
  set_tests_properties(reference_v41_selftest PROPERTIES LABELS model SKIP_RETURN_CODE 77 TIMEOUT 120
                       ENVIRONMENT "OMP_NUM_THREADS=1")
endif()

# The released switches wired into the reference model (tools/reference/test_reference_v41.py):
# defaults reproduce the committed tiny/pool goldens bit for bit; with mHC, YaRN, router scores
# and released KV on, exact = full, chunked = whole, bounded and replay hold; the released-layout
# writer and v41/checkpoint.py round-trip exactly.
if(CEDAR_V41_PYTHON3)
  add_test(NAME reference_v41_model_selftest
           COMMAND sh -c "${CEDAR_V41_PYTHON3} -c 'import torch' 2>/dev/null || exit 77; exec ${CEDAR_V41_PYTHON3} ${CMAKE_SOURCE_DIR}/tools/reference/test_reference_v41.py")
  set_tests_properties(reference_v41_model_selftest PROPERTIES LABELS model SKIP_RETURN_CODE 77 TIMEOUT 300
                       ENVIRONMENT "OMP_NUM_THREADS=1")
endif()
