# Speculative decoding (issue 21, DSpark): verify pass = decode steps bit for bit, rollback =
# feeding only the kept tokens (state hash), speculative greedy = plain greedy (speculative_test);
# rejection sampling keeps the model's distribution, chi-square with a wrong variant that must
# fail, and sampled generation on v41-tiny (speculative_sampling_test).
cedar_add_test(speculative_test model cedar_engine ${CMAKE_CURRENT_SOURCE_DIR}/speculative_test.cpp)
cedar_add_test(speculative_sampling_test model cedar_engine ${CMAKE_CURRENT_SOURCE_DIR}/speculative_sampling_test.cpp)
# The DSpark drafter's draft logits against the float64 reference's golden (tests/golden/v41_dspark,
# tools/reference/v41/dspark.py), with the prompt's hidden states captured by the prefill.
cedar_add_test(dspark_golden_test model cedar_engine ${CMAKE_CURRENT_SOURCE_DIR}/dspark_golden_test.cpp)
