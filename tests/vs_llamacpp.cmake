# bench/vs_llamacpp against llama.cpp's own llama-bench (scripts/setup_llamacpp.sh builds it into
# build/llamacpp; scripts/test.sh runs that). Without llama-bench or numpy it reports "skipped"
# (exit 77), not a pass.
find_program(CEDAR_VS_PYTHON3 python3 PATHS /usr/bin NO_DEFAULT_PATH)
if(CEDAR_VS_PYTHON3 AND TARGET cedar)
  add_test(NAME bench_vs_llamacpp_test
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/bench/vs_llamacpp_test.sh ${CEDAR_VS_PYTHON3}
                   $<TARGET_FILE:cedar> ${CMAKE_BINARY_DIR}/llamacpp/build/bin/llama-bench)
  set_tests_properties(bench_vs_llamacpp_test PROPERTIES LABELS unit TIMEOUT 600 SKIP_RETURN_CODE 77)
endif()
