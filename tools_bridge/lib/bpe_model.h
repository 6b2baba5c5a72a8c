// The BPE model of a byte-level tokenizer: starting from one symbol per byte, repeatedly merge
// the adjacent pair with the lowest merge rank (leftmost first on ties) until no pair has a
// merge, exactly as Hugging Face `tokenizers` does (its priority queue picks the same pair).
// Works on raw bytes and ids: tokenizer.json's byte-level strings are converted at load.
//
// Thread contract: immutable after construction; EncodeWord may run on many threads at once.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace cedar::bridge {

class BpeModel {
 public:
  // `byte_ids[b]`: the id of the one-byte token b (all 256 must exist). `merges` in rank order:
  // (left id, right id, merged id). Throws std::invalid_argument when a byte has no token.
  BpeModel(std::vector<int32_t> byte_ids, const std::vector<std::array<int32_t, 3>>& merges);
  BpeModel() = default;

  // Appends the ids of `word` (one pre-tokenized piece, raw bytes, non-empty) to `out`.
  void EncodeWord(std::string_view word, std::vector<int32_t>& out) const;

  size_t merges() const { return size_; }

 private:
  struct Slot {
    uint64_t key;     // left << 32 | right; kEmpty when unused
    uint32_t rank;    // merge priority: lower merges first
    int32_t merged;   // the id the pair becomes
  };
  static constexpr uint64_t kEmpty = ~uint64_t{0};

  // The merge of (left, right), or nullptr. Open addressing, linear probing.
  const Slot* Find(int32_t left, int32_t right) const {
    const uint64_t key = (uint64_t(uint32_t(left)) << 32) | uint32_t(right);
    size_t i = Hash(key) & mask_;
    while (true) {
      const Slot& s = table_[i];
      if (s.key == key) return &s;
      if (s.key == kEmpty) return nullptr;
      i = (i + 1) & mask_;
    }
  }
  static size_t Hash(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    return size_t(k);
  }
  void EncodeSmall(std::string_view word, std::vector<int32_t>& out) const;
  void EncodeLarge(std::string_view word, std::vector<int32_t>& out) const;

  int32_t byte_ids_[256] = {};
  std::vector<Slot> table_;
  size_t mask_ = 0;
  size_t size_ = 0;
};

}  // namespace cedar::bridge
