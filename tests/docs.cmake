# The docs followed literally (issue 19): every bash/sh/console block of README.md and
# docs/SERVER.md runs with the built cedar in a temporary working copy; blocks marked
# <!-- long --> are skipped and <!-- server --> blocks get their server started in the
# background (markers documented in tests/docs/shell_blocks_test.py).
find_program(CEDAR_DOCS_PYTHON3 python3)
if(CEDAR_DOCS_PYTHON3 AND TARGET cedar)
  add_test(NAME docs_shell_blocks
           COMMAND ${CEDAR_DOCS_PYTHON3} ${CMAKE_CURRENT_SOURCE_DIR}/docs/shell_blocks_test.py
                   ${CMAKE_SOURCE_DIR} ${CMAKE_BINARY_DIR})
  set_tests_properties(docs_shell_blocks PROPERTIES LABELS unit TIMEOUT 300)
endif()
