// Per-sequence state (spec §6), owned by the caller and passed to every engine call. Nothing
// here is global; copying a state is explicit (CopyState) because it can be large.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "engine/config.h"

namespace cedar {

// Rows for the contiguous absolute positions [lo, hi), each `dim` floats.
class RowStore {
 public:
  RowStore() = default;
  explicit RowStore(int dim) : dim_(dim) {}
  RowStore(const RowStore&) = delete;
  RowStore& operator=(const RowStore&) = delete;
  RowStore(RowStore&&) = default;
  RowStore& operator=(RowStore&&) = default;

  int dim() const { return dim_; }
  int64_t lo() const { return lo_; }
  int64_t hi() const { return hi_; }
  int64_t size() const { return hi_ - lo_; }
  bool Has(int64_t pos) const { return pos >= lo_ && pos < hi_; }
  const float* Row(int64_t pos) const { return data_.data() + size_t(skip_ + pos - lo_) * dim_; }  // REQUIRES: Has(pos)
  float* MutableRow(int64_t pos) { return data_.data() + size_t(skip_ + pos - lo_) * dim_; }
  // Appends the row for position `pos`. A gap (pos > hi) first empties the store; pos < hi
  // first drops rows >= pos (an overwrite from there on).
  float* Append(int64_t pos);
  void DropFrom(int64_t pos);    // keep rows < pos
  void DropBefore(int64_t pos);  // keep rows >= pos
  void Clear() {
    data_.clear();
    skip_ = 0;
    lo_ = hi_ = 0;
  }
  // Capacity for `rows` more rows past hi(), so that appending them never reallocates (at
  // least doubling when it grows, as appending would, so that a reserve per turn of a long
  // session does not copy the store every turn).
  void Reserve(int64_t rows) { ReserveGrowing(data_, size_t(skip_ + size() + rows) * size_t(dim_)); }
  // v.capacity() >= n afterwards; grows to at least twice the old capacity when it grows.
  template <class V>
  static void ReserveGrowing(V& v, size_t n) {
    if (n > v.capacity()) v.reserve(n > 2 * v.capacity() ? n : 2 * v.capacity());
  }
  RowStore Copy() const;
  size_t Bytes() const { return size_t(size()) * dim_ * sizeof(float); }  // of the rows held
  // The rows held, [size, dim]. Moves them to the front of the buffer first if DropBefore left
  // dropped rows there (so, like the other members, not to be called concurrently with any
  // other call on the same store).
  const std::vector<float>& raw() const {
    Compact();
    return data_;
  }
  void Assign(int64_t lo, std::vector<float> rows);        // rows: [n, dim]

 private:
  // Erases the skip_ dropped rows at the front of data_.
  void Compact() const;

  int dim_ = 0;
  int64_t lo_ = 0, hi_ = 0;
  // [skip + hi - lo, dim]: DropBefore only counts the rows it drops (skip_) and erases them once
  // they are as many as the rows held, so a window trimmed by one row per decode step moves its
  // rows once per ~window steps instead of every step (perf, int8 decode on small: memmove of
  // the 24 windows and H_E, ~1.8 MB per token, ~2.5% of the step).
  mutable std::vector<float> data_;
  mutable int64_t skip_ = 0;
};

// One compressed pool (a kv-source layer's): entries and index keys by entry index.
struct Pool {
  int layer = -1;      // the kv-source layer that owns it
  int ratio = 1;       // m
  int64_t rows_seen = 0;           // prompt positions consumed by the compressor
  std::vector<float> entries;      // [n_entries, c], rotated main entries ĉ_j
  std::vector<float> keys;         // [n_entries, index_head_dim], index keys k_j
  std::vector<float> pending_c;    // [c] C of the first token of an open half group (m = 2)
  std::vector<float> pending_z;    // [c] Z of that token
  bool has_pending = false;
  // Speculative verification (engine/speculative.h) rolls a pass back to any of its rows; while
  // log_pending is set the compressor also records every open half group (position, C, Z) so the
  // pending half of any rolled-back-to position can be restored. Not part of the state proper.
  bool log_pending = false;
  std::vector<int64_t> log_pos;    // positions whose C, Z opened a half group, in order
  std::vector<float> log_c, log_z;  // [log_pos.size(), c] each
  int64_t Count(int c) const { return int64_t(entries.size()) / c; }
};

// A decoder phase paused between two layers (engine/prefill_parts.h; batch_prefill.h
// PrefillFinishLayers).
struct DecoderRun;
size_t DecoderRunBytes(const DecoderRun& run);

struct SequenceState {
  int64_t pos = 0;          // tokens consumed (next position)
  int64_t decoder_pos = 0;  // rows [0, decoder_pos) have decoder window entries (live state)
  std::vector<RowStore> windows;  // per layer: window entries [*, c] by position
  std::vector<Pool> pools;        // one per kv-source layer, in layer order
  RowStore h_e;                   // residual state entering layer E, [*, ResidualWidth()] by position
  std::vector<int32_t> tokens;    // every token consumed, in order
  // History kept after each call beyond what the next call needs (default: none). The session
  // layer keeps a page of slack so a snapshot can be cut at the last page boundary, and a
  // staircase of H_E so an exact decoder can be rebuilt from a snapshot.
  int64_t keep_extra_rows = 0;    // extra rows in every window store and in H_E
  int64_t keep_h_e_rows = 0;      // rows of H_E kept (0 = W)
  // Set by EncoderReplay: the window state (and every pool row computed after it) is an
  // approximation from here on; rows before `replayed_at` are still exact.
  bool replayed = false;
  int64_t replayed_at = 0;
  // Set while a decoder phase runs in parts (PrefillFinishLayers): its rows between two decoder
  // layers. The state is mid-prefill then: only PrefillFinishLayers may touch it, and it cannot
  // be copied.
  std::shared_ptr<DecoderRun> decoder_run;
  // Positions [0, exact_until) hold exact pool rows (what a prefix cache may keep).
  int64_t ExactUntil() const { return replayed ? replayed_at : pos; }

  explicit SequenceState(const ModelConfig& c);
  SequenceState(const SequenceState&) = delete;
  SequenceState& operator=(const SequenceState&) = delete;
  SequenceState(SequenceState&&) = default;
  SequenceState& operator=(SequenceState&&) = default;

  Pool& PoolOfLayer(const ModelConfig& c, int layer);  // REQUIRES: ratio(layer) > 0
  const Pool& PoolOfLayer(const ModelConfig& c, int layer) const;
  size_t Bytes() const;
  // Capacity for `rows` more positions in what grows with them during a chunked prefill (H_E,
  // layer E's window, the pools, the tokens), so that appending them never reallocates. Without
  // it each of those vectors doubles as it fills, copying itself and faulting in its new pages
  // at one row: all of them cross 4K, 8K, ... rows in the same step (on `small` a 30-90 ms stall
  // of the step that crossed 8K rows of a 16K prompt, every decoding session's longest gap).
  // Changes no value. The session layer calls it when a turn's prefill begins.
  void Reserve(const ModelConfig& c, int64_t rows);
  // Drops what a cache eviction drops: every window entry and the H_E tail (pools stay).
  void DropWindowsAndResidual();
};

// The costly copy, named (gemma.cpp's KVCache::Copy idea).
SequenceState CopyState(const SequenceState& s, const ModelConfig& c);

}  // namespace cedar
