// Per-sequence state on a CUDA device (spec §6): the device twin of SequenceState
// (engine/state.h), with the same fields and the same meaning, and the copies between the two
// that the cache tiers need (the cache and the sessions stay host logic over SequenceState).
//
// Storage: every window store, H_E and each pool's entries and index keys is a DeviceRows, a
// device row array for contiguous positions [lo, hi) that grows by reallocation and compacts
// when it does (dropping old rows only moves `lo`). A window is therefore not a ring: a
// prefill chunk appends all its rows before any of them attends, so a ring would need
// chunk + W slots anyway, and the attention kernel takes any row array (win_capacity 0).
// All state is F32 (the pools in BF16 would halve their bytes: later work).
#pragma once
#include <cstdint>
#include <vector>

#include "engine/cuda/device_model.h"
#include "engine/state.h"

namespace cedar::gpu {

class DeviceRows {
 public:
  DeviceRows() = default;
  explicit DeviceRows(int dim) : dim_(dim) {}
  DeviceRows(DeviceRows&&) = default;
  DeviceRows& operator=(DeviceRows&&) = default;

  int dim() const { return dim_; }
  int64_t lo() const { return lo_; }
  int64_t hi() const { return hi_; }
  int64_t size() const { return hi_ - lo_; }
  bool Has(int64_t pos) const { return pos >= lo_ && pos < hi_; }
  float* base() const { return buf_.as<float>(); }               // row 0 of the array
  int64_t Index(int64_t pos) const { return off_ + (pos - lo_); }  // array row of `pos`
  float* Row(int64_t pos) const { return base() + size_t(Index(pos)) * dim_; }  // REQUIRES Has(pos)
  // Makes room for rows [pos, pos + n) and returns the device pointer of row `pos` (the n rows
  // are contiguous; their contents are for the caller to write). As RowStore::Append for each
  // row: a gap (pos > hi) empties the store first, pos < hi drops rows >= pos first.
  float* AppendRange(int64_t pos, int n);
  void DropFrom(int64_t pos);
  void DropBefore(int64_t pos);
  void Clear() { lo_ = hi_ = off_ = 0; }
  size_t Bytes() const { return size_t(size()) * dim_ * sizeof(float); }
  std::vector<float> Download() const;                 // [size, dim]
  void Upload(int64_t lo, const std::vector<float>& rows);  // rows: [n, dim]

 private:
  int dim_ = 0;
  int64_t lo_ = 0, hi_ = 0;
  int64_t off_ = 0;  // array row holding position lo_
  int64_t cap_ = 0;  // rows the array holds
  cu::DeviceBuffer buf_;
};

struct DevicePool {
  int layer = -1;
  int ratio = 1;
  int64_t rows_seen = 0;
  DeviceRows entries;      // [n_entries, c] by entry index (lo = 0)
  DeviceRows keys;         // [n_entries, index_head_dim]
  cu::DeviceBuffer pending;  // [2, c]: C then Z of the open half group's first token (m = 2)
  bool has_pending = false;
  int64_t Count() const { return entries.hi(); }
};

struct DeviceState {
  int64_t pos = 0;
  int64_t decoder_pos = 0;
  std::vector<DeviceRows> windows;  // per layer, [*, c] by position
  std::vector<DevicePool> pools;    // one per kv-source layer, in layer order
  DeviceRows h_e;                   // [*, d] by position
  std::vector<int32_t> tokens;
  int64_t keep_extra_rows = 0;
  int64_t keep_h_e_rows = 0;
  bool replayed = false;
  int64_t replayed_at = 0;
  int64_t ExactUntil() const { return replayed ? replayed_at : pos; }

  explicit DeviceState(const ModelConfig& c);
  DeviceState(DeviceState&&) = default;
  DeviceState& operator=(DeviceState&&) = default;
  DevicePool& PoolOfLayer(const ModelConfig& c, int layer);
  size_t Bytes() const;
  void DropWindowsAndResidual();
};

// Host copy of a device state (waits for the device). Equal field by field, so the cache's
// state codec and every host check work on it.
SequenceState Download(const DeviceState& d, const ModelConfig& c);
// Device copy of a host state.
DeviceState Upload(const SequenceState& s, const ModelConfig& c);

}  // namespace cedar::gpu
