#include "tools_bridge/lib/bpe_model.h"

#include <queue>
#include <stdexcept>

namespace cedar::bridge {

BpeModel::BpeModel(std::vector<int32_t> byte_ids, const std::vector<std::array<int32_t, 3>>& merges) {
  if (byte_ids.size() != 256) throw std::invalid_argument("BpeModel: expected 256 byte ids");
  for (int b = 0; b < 256; ++b) {
    if (byte_ids[b] < 0) {
      throw std::invalid_argument("BPE vocab has no token for byte " + std::to_string(b) +
                                  " (a byte-level vocab needs all 256)");
    }
    byte_ids_[b] = byte_ids[b];
  }
  size_t cap = 16;
  while (cap < merges.size() * 2) cap <<= 1;  // load factor <= 1/2
  table_.assign(cap, Slot{kEmpty, 0, 0});
  mask_ = cap - 1;
  for (size_t r = 0; r < merges.size(); ++r) {
    const auto& m = merges[r];
    const uint64_t key = (uint64_t(uint32_t(m[0])) << 32) | uint32_t(m[1]);
    size_t i = Hash(key) & mask_;
    while (table_[i].key != kEmpty && table_[i].key != key) i = (i + 1) & mask_;
    if (table_[i].key == key) continue;  // a repeated merge keeps its first (lowest) rank
    table_[i] = Slot{key, uint32_t(r), m[2]};
    ++size_;
  }
}

void BpeModel::EncodeWord(std::string_view word, std::vector<int32_t>& out) const {
  if (word.size() == 1) {
    out.push_back(byte_ids_[uint8_t(word[0])]);
  } else if (word.size() <= 64) {
    EncodeSmall(word, out);
  } else {
    EncodeLarge(word, out);
  }
}

// Short words: keep each adjacent pair's rank in an array, take the lowest (leftmost on ties),
// merge, and look up only the two pairs the merge changed (no allocation).
void BpeModel::EncodeSmall(std::string_view word, std::vector<int32_t>& out) const {
  int32_t sym[64];
  uint32_t rank[64];  // rank[i]: merge rank of (sym[i], sym[i + 1]); UINT32_MAX = none
  int32_t merged[64];
  int n = int(word.size());
  for (int i = 0; i < n; ++i) sym[i] = byte_ids_[uint8_t(word[i])];
  auto look = [&](int i) {
    const Slot* s = Find(sym[i], sym[i + 1]);
    rank[i] = s ? s->rank : UINT32_MAX;
    merged[i] = s ? s->merged : 0;
  };
  for (int i = 0; i + 1 < n; ++i) look(i);
  while (n > 1) {
    int best = 0;
    for (int i = 1; i + 1 < n; ++i) {
      if (rank[i] < rank[best]) best = i;  // strict: the leftmost pair wins a tie
    }
    if (rank[best] == UINT32_MAX) break;
    sym[best] = merged[best];
    for (int i = best + 1; i + 1 < n; ++i) {
      sym[i] = sym[i + 1];
      rank[i] = rank[i + 1];
      merged[i] = merged[i + 1];
    }
    --n;
    if (best > 0) look(best - 1);
    if (best + 1 < n) look(best);
  }
  out.insert(out.end(), sym, sym + n);
}

// Long words (e.g. a long run of letters): a linked list of symbols and a priority queue of
// candidate pairs ordered by (rank, position), as HF's word merge does; stale entries (a side
// already merged away or changed) are skipped when popped.
void BpeModel::EncodeLarge(std::string_view word, std::vector<int32_t>& out) const {
  const int n = int(word.size());
  std::vector<int32_t> sym(n), prev(n), next(n);
  for (int i = 0; i < n; ++i) {
    sym[i] = byte_ids_[uint8_t(word[i])];
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
  }
  struct Cand {
    uint32_t rank;
    int32_t pos;    // left symbol
    int32_t left;   // ids when pushed, to detect stale entries
    int32_t right;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> q;
  auto push = [&](int i) {
    if (i < 0 || next[i] < 0) return;
    if (const Slot* s = Find(sym[i], sym[next[i]])) q.push({s->rank, i, sym[i], sym[next[i]]});
  };
  for (int i = 0; i + 1 < n; ++i) push(i);
  while (!q.empty()) {
    const Cand c = q.top();
    q.pop();
    const int r = next[c.pos];
    if (sym[c.pos] != c.left || r < 0 || sym[r] != c.right) continue;  // stale
    sym[c.pos] = Find(c.left, c.right)->merged;
    sym[r] = -1;  // dead
    next[c.pos] = next[r];
    if (next[r] >= 0) prev[next[r]] = c.pos;
    push(prev[c.pos]);
    push(c.pos);
  }
  for (int i = 0; i >= 0; i = next[i]) out.push_back(sym[i]);
}

}  // namespace cedar::bridge
