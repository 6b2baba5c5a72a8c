// A tokenizer's vocabulary as the token matcher sees it (token_matcher.h), and the token mask.
//
// TokenVocab (per tokenizer, built once, immutable) holds every ordinary id's byte string in
// a trie laid out in preorder (node i's subtree is [i, subtree_end[i])), plus the special ids
// by name. Mask computations (compiled_grammar.h) walk that trie from an automaton state: one
// Automaton::Next per trie node, skipping a whole subtree as soon as its prefix leaves the
// grammar, so tokens whose bytes cross several grammar steps (a BPE token like `","` closes a
// string, adds a comma and opens the next key) are judged exactly.
//
// Thread contract: TokenVocab is immutable and shared by every grammar of its tokenizer.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace cedar::grammar {

class TokenVocab {
 public:
  // `token_bytes[id]`: the bytes of ordinary id `id` ("" for special and unused ids);
  // `specials`: (id, name) of the special ids. Ids are dense: [0, token_bytes.size()).
  TokenVocab(const std::vector<std::string>& token_bytes, const std::vector<std::pair<int32_t, std::string>>& specials);

  int32_t size() const { return vocab_size_; }
  const std::string& bytes(int32_t id) const { return bytes_[size_t(id)]; }
  // The special id named `name`, or -1.
  int32_t SpecialId(std::string_view name) const;
  size_t trie_nodes() const { return node_byte_.size(); }
  int max_depth() const { return max_depth_; }  // the longest token's bytes

 private:
  friend class CompiledGrammar;
  int32_t vocab_size_ = 0;
  std::vector<std::string> bytes_;
  std::vector<std::pair<int32_t, std::string>> specials_;
  // The trie in preorder (root not stored): per node its byte, depth (>= 1), subtree end, and
  // the ids whose bytes end here (token_ids_[token_begin_[i] .. token_begin_[i + 1])).
  std::vector<uint8_t> node_byte_;
  std::vector<uint16_t> node_depth_;
  std::vector<int32_t> subtree_end_;
  std::vector<int32_t> parent_;        // the node one byte up (-1 at depth 1)
  std::vector<int32_t> token_begin_;
  std::vector<int32_t> token_ids_;
  int max_depth_ = 0;
};

// A bitset over the vocabulary: bit id set = the id is allowed.
struct TokenMask {
  std::vector<uint64_t> words;
  bool Test(int32_t id) const { return (words[size_t(id) >> 6] >> (id & 63)) & 1; }
  void Set(int32_t id) { words[size_t(id) >> 6] |= 1ull << (id & 63); }
  int64_t Count() const;
};

}  // namespace cedar::grammar
