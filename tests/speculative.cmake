# Speculative decoding (issue 21, DSpark): verify pass = decode steps bit for bit, rollback =
# feeding only the kept tokens (state hash), speculative greedy = plain greedy (speculative_test);
# rejection sampling keeps the model's distribution, chi-square with a wrong variant that must
# fail, and sampled generation on v41-tiny (speculative_sampling_test).
cedar_add_test(speculative_test model cedar_engine ${CMAKE_CURRENT_SOURCE_DIR}/speculative_test.cpp)
cedar_add_test(speculative_sampling_test model cedar_engine ${CMAKE_CURRENT_SOURCE_DIR}/speculative_sampling_test.cpp)
# The DSpark drafter's draft logits against the float64 reference's golden (tests/golden/v41_dspark,
# tools/reference/v41/dspark.py), with the prompt's hidden states captured by the prefill.
cedar_add_test(dspark_golden_test model cedar_engine ${CMAKE_CURRENT_SOURCE_DIR}/dspark_golden_test.cpp)
# The committed DSpark golden is what the float64 reference computes from the committed model
# (tools/reference/v41/dspark.py --check). Needs python3-torch; without it "skipped" (exit 77).
find_program(CEDAR_DSPARK_PYTHON3 python3 PATHS /usr/bin NO_DEFAULT_PATH)
if(CEDAR_DSPARK_PYTHON3)
  add_test(NAME reference_dspark_golden
           COMMAND sh -c "${CEDAR_DSPARK_PYTHON3} -c 'import torch' 2>/dev/null || exit 77; exec ${CEDAR_DSPARK_PYTHON3} ${CMAKE_SOURCE_DIR}/tools/reference/v41/dspark.py --model ${CMAKE_SOURCE_DIR}/tests/golden/v41_dspark --check")
  set_tests_properties(reference_dspark_golden PROPERTIES LABELS model SKIP_RETURN_CODE 77 TIMEOUT 120
                       ENVIRONMENT "OMP_NUM_THREADS=1")
endif()
