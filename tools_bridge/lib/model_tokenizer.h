// The tokenizer a model directory declares. config.json's "tokenizer" field:
//   "byte" (the default, our own small models): ByteTokenizer sized to the vocab;
//   "bpe": BpeTokenizer from tokenizer.json (+ tokenizer_config.json) beside config.json,
//          as released models ship it.
// Cedar's chat template needs its own special tokens (kChatSpecialTokens); a BPE tokenizer
// that lacks them gets them on the first unused ids after its own, when the vocab has room
// (a model that uses a released chat encoding instead does not need them).
#pragma once
#include <memory>
#include <string>

#include "tools_bridge/lib/tokenizer.h"

namespace cedar::bridge {

enum class TokenizerKind { kByte, kBpe };

struct ModelTokenizerOptions {
  // Give a BPE tokenizer Cedar's chat specials after its own ids when it lacks them and
  // vocab_size leaves room (otherwise it is loaded without them).
  bool cedar_chat_specials = true;
};

// config.json's "tokenizer" in `model_dir` (absent: kByte). Throws std::runtime_error for an
// unreadable config.json or a value other than "byte" / "bpe".
TokenizerKind ModelTokenizerKind(const std::string& model_dir);

// The declared tokenizer, sized to `vocab_size` (the model's). Throws std::runtime_error
// naming the file and the problem (missing tokenizer.json, unsupported format, a tokenizer
// larger than the model's vocab).
std::unique_ptr<Tokenizer> LoadModelTokenizer(const std::string& model_dir, int32_t vocab_size,
                                              ModelTokenizerOptions options = {});

}  // namespace cedar::bridge
