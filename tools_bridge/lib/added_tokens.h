// Added tokens (tokenizer.json "added_tokens"): strings matched in the text before BPE, each
// becoming its own id. Follows Hugging Face `tokenizers`' AddedVocabulary: first the tokens
// with normalized=false are split out of the raw text, then those with normalized=true out of
// the remaining (normalized) pieces; each pass takes the leftmost match, the longest one at
// that position. lstrip / rstrip let a match swallow the whitespace on its left / right.
//
// Thread contract: immutable after construction.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace cedar::bridge {

struct AddedToken {
  std::string content;      // the text it matches (UTF-8)
  int32_t id = 0;           // its id
  bool special = false;     // HF: skipped by decode(skip_special_tokens=True)
  bool normalized = false;  // HF: matched after normalization (second pass)
  bool lstrip = false;      // the match also takes the whitespace before it
  bool rstrip = false;      // the match also takes the whitespace after it
};

class AddedTokenMatcher {
 public:
  AddedTokenMatcher() = default;
  // Throws std::invalid_argument for an empty content.
  explicit AddedTokenMatcher(const std::vector<AddedToken>& tokens);

  // One part of a text: either plain text (id < 0) or an added token's id.
  struct Part {
    std::string_view text;  // the bytes it covers (a view into the input)
    int32_t id;             // the added token, or -1 for plain text
  };
  // Splits `text` into parts, in order; plain parts are non-empty.
  void Split(std::string_view text, std::vector<Part>& parts) const;
  bool empty() const { return tokens_.empty(); }

 private:
  // A byte trie per pass. Node 0 of each pass is its root.
  struct Trie {
    std::unordered_map<uint64_t, uint32_t> edges;  // (node << 8 | byte) -> child
    std::vector<int32_t> token;                    // node -> index into tokens_, or -1
    uint32_t Add(uint32_t node, uint8_t b);
    // The longest token starting at text[pos]: its index and end, or false.
    bool Longest(std::string_view text, size_t pos, int32_t& tok, size_t& end) const;
  };
  void Pass(const Trie& trie, std::string_view text, std::vector<Part>& parts) const;

  std::vector<AddedToken> tokens_;
  Trie raw_, normalized_;
  bool first_byte_[2][256] = {};    // [pass][byte]: some token of the pass starts with it
};

}  // namespace cedar::bridge
