# tools_bridge: tokenizer, chat template, tool-call parsing (host logic, runs in well under a second).
cedar_add_test(bridge_test unit cedar_bridge
  ${CMAKE_CURRENT_SOURCE_DIR}/bridge_tokenizer_test.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/bridge_chat_template_test.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/bridge_tool_calls_test.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/bridge_roundtrip_test.cpp)
