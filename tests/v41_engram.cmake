# Engram of DeepSeek-V4.1-Flash (engine/engram.h): hashing, on-demand table reads and the gated
# stream update against the float64 reference tools/reference/v41/engram.py (run by
# /usr/bin/python3 at test time; exits 77, skipped, without numpy and torch).
cedar_add_test(v41_engram_test model cedar_engine ${CMAKE_CURRENT_SOURCE_DIR}/v41_engram_test.cpp)
set_tests_properties(v41_engram_test PROPERTIES SKIP_RETURN_CODE 77 ENVIRONMENT "OPENBLAS_NUM_THREADS=2;OMP_NUM_THREADS=1")
# The token -> class table (engine/engram_classes.h, ICU) against the same reference.
cedar_add_test(v41_engram_classes_test model cedar_engine ${CMAKE_CURRENT_SOURCE_DIR}/v41_engram_classes_test.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/tokenizer_fixtures.cpp)
set_tests_properties(v41_engram_classes_test PROPERTIES SKIP_RETURN_CODE 77)
