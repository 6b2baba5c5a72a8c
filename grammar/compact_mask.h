// A token mask kept in a cache (compiled_grammar.h's top-frame verdicts): only its nonzero
// 64-id words when they are few, densely otherwise. Most verdicts at a literal (a key's next
// character, a bracket) allow a few hundred ids of the 128,815, so they take a few hundred
// bytes instead of 16 KiB, and a grammar's compile-time prewarm of hundreds of them fits the
// cache; a string's characters allow most ids and stay dense.
#pragma once
#include <cstdint>
#include <vector>

#include "grammar/token_vocab.h"

namespace cedar::grammar {

struct CompactMask {
  bool dense = true;
  std::vector<uint32_t> at;     // sparse: the index of each stored word
  std::vector<uint64_t> words;  // dense: every word; sparse: the nonzero ones

  static CompactMask Of(const TokenMask& m) {
    CompactMask c;
    size_t nonzero = 0;
    for (uint64_t w : m.words) nonzero += w != 0;
    if (nonzero * 12 >= m.words.size() * 8) {  // a sparse word costs 12 bytes, a dense one 8
      c.words = m.words;
      return c;
    }
    c.dense = false;
    c.at.reserve(nonzero);
    c.words.reserve(nonzero);
    for (size_t i = 0; i < m.words.size(); ++i)
      if (m.words[i]) c.at.push_back(uint32_t(i)), c.words.push_back(m.words[i]);
    return c;
  }
  // m |= this (m has the vocabulary's size).
  void OrInto(TokenMask& m) const {
    if (dense) {
      for (size_t i = 0; i < words.size(); ++i) m.words[i] |= words[i];
      return;
    }
    for (size_t k = 0; k < at.size(); ++k) m.words[at[k]] |= words[k];
  }
  size_t Bytes() const { return words.size() * 8 + at.size() * 4; }
};

}  // namespace cedar::grammar
