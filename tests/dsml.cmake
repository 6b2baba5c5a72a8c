# deepseek_v41 chat encoding (tools_bridge/lib/dsml_*, py_json): encoder vectors, Python-JSON
# formatting, replay, streaming DSML parsing. Host logic, runs in about a second.
cedar_add_test(dsml_test unit cedar_bridge
  ${CMAKE_CURRENT_SOURCE_DIR}/dsml_encoding_test.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/dsml_parser_test.cpp)
