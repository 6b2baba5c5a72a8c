# The trainer and the committed trained models (tools/train/, models/cedar-mini*). Python tests
# with /usr/bin/python3; without python3-torch they report "skipped" (exit 77), not a pass.
find_program(CEDAR_TRAIN_PYTHON3 python3 PATHS /usr/bin NO_DEFAULT_PATH)
if(CEDAR_TRAIN_PYTHON3)
  set(CEDAR_TRAIN_GUARD "${CEDAR_TRAIN_PYTHON3} -c 'import torch, numpy' 2>/dev/null || exit 77")
  # the batched training forward equals the reference (full, bounded, paper, encoder replay; f64, 1e-9)
  add_test(NAME train_forward_matches_reference
           COMMAND sh -c "${CEDAR_TRAIN_GUARD}; exec ${CEDAR_TRAIN_PYTHON3} ${CMAKE_SOURCE_DIR}/tests/train_forward_test.py")
  # a few steps on a tiny config: the loss goes down; stop + resume == uninterrupted
  add_test(NAME train_trainer_steps
           COMMAND sh -c "${CEDAR_TRAIN_GUARD}; exec ${CEDAR_TRAIN_PYTHON3} ${CMAKE_SOURCE_DIR}/tests/train_loss_test.py")
  # the committed models: load, held-out bpb as logged, C++ engine bpb and exact == full
  add_test(NAME train_committed_model
           COMMAND sh -c "${CEDAR_TRAIN_GUARD}; exec ${CEDAR_TRAIN_PYTHON3} ${CMAKE_SOURCE_DIR}/tests/train_model_test.py --cedar ${CMAKE_BINARY_DIR}/cedar --bench ${CMAKE_BINARY_DIR}/bench/bench_quality")
  set_tests_properties(train_forward_matches_reference train_trainer_steps train_committed_model
                       PROPERTIES LABELS model SKIP_RETURN_CODE 77 TIMEOUT 300 ENVIRONMENT "OMP_NUM_THREADS=1")
endif()
