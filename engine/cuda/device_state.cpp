// Device row arrays, device sequence state and the host <-> device copies (device_state.h).
#include "engine/cuda/device_state.h"

#include <algorithm>

namespace cedar::gpu {

float* DeviceRows::AppendRange(int64_t pos, int n) {
  if (pos > hi_ || size() == 0) {
    Clear();
    lo_ = hi_ = pos;
  } else if (pos < hi_) {
    DropFrom(pos);
    if (size() == 0) Clear(), lo_ = hi_ = pos;
  }
  if (off_ + size() + n > cap_) {
    // Reallocate with room to grow and move the live rows to the front.
    const int64_t live = size(), cap = std::max<int64_t>(2 * (live + n), 16);
    cu::DeviceBuffer nb;
    CEDAR_GPU(nb.Allocate(size_t(cap) * dim_ * sizeof(float)));
    if (live > 0) CEDAR_GPU(cu::CopyOnDeviceAsync(nb.get(), Row(lo_), size_t(live) * dim_ * sizeof(float), nullptr));
    buf_ = std::move(nb);
    cap_ = cap;
    off_ = 0;
  }
  hi_ += n;
  return Row(pos);
}

void DeviceRows::DropFrom(int64_t pos) {
  if (pos >= hi_) return;
  if (pos <= lo_) {
    Clear();
    return;
  }
  hi_ = pos;
}

void DeviceRows::DropBefore(int64_t pos) {
  if (pos <= lo_) return;
  if (pos >= hi_) {
    off_ = 0;
    lo_ = hi_;
    return;
  }
  off_ += pos - lo_;
  lo_ = pos;
}

std::vector<float> DeviceRows::Download() const {
  std::vector<float> v(size_t(size()) * dim_);
  if (!v.empty()) CEDAR_GPU(cu::CopyToHost(v.data(), Row(lo_), v.size() * sizeof(float)));
  return v;
}

void DeviceRows::Upload(int64_t lo, const std::vector<float>& rows) {
  const int n = int(rows.size() / size_t(dim_));
  Clear();
  lo_ = hi_ = lo;
  if (n == 0) return;
  float* p = AppendRange(lo, n);
  CEDAR_GPU(cu::CopyToDevice(p, rows.data(), rows.size() * sizeof(float)));
}

DeviceState::DeviceState(const ModelConfig& c) : h_e(c.dim) {
  for (int l = 0; l < c.n_layers; ++l) windows.emplace_back(c.head_dim);
  for (int s : c.kv_source_layers) {
    DevicePool p;
    p.layer = s;
    p.ratio = c.RatioOf(s);
    p.entries = DeviceRows(c.head_dim);
    p.keys = DeviceRows(c.index_head_dim);
    CEDAR_GPU(p.pending.Allocate(size_t(2) * c.head_dim * sizeof(float)));
    pools.push_back(std::move(p));
  }
}

DevicePool& DeviceState::PoolOfLayer(const ModelConfig& c, int layer) {
  const int src = c.PoolOf(layer);
  for (DevicePool& p : pools)
    if (p.layer == src) return p;
  throw std::logic_error("no pool for layer " + std::to_string(layer));
}

size_t DeviceState::Bytes() const {
  size_t b = h_e.Bytes();
  for (const auto& w : windows) b += w.Bytes();
  for (const auto& p : pools) b += p.entries.Bytes() + p.keys.Bytes() + (p.has_pending ? p.pending.bytes() : 0);
  return b;
}

void DeviceState::DropWindowsAndResidual() {
  for (auto& w : windows) w.Clear();
  h_e.Clear();
  decoder_pos = 0;
}

SequenceState Download(const DeviceState& d, const ModelConfig& c) {
  SequenceState s(c);
  s.pos = d.pos;
  s.decoder_pos = d.decoder_pos;
  for (size_t l = 0; l < d.windows.size(); ++l) s.windows[l].Assign(d.windows[l].lo(), d.windows[l].Download());
  s.h_e.Assign(d.h_e.lo(), d.h_e.Download());
  for (size_t i = 0; i < d.pools.size(); ++i) {
    const DevicePool& dp = d.pools[i];
    Pool& p = s.pools[i];
    p.rows_seen = dp.rows_seen;
    p.entries = dp.entries.Download();
    p.keys = dp.keys.Download();
    p.has_pending = dp.has_pending;
    if (dp.has_pending) {
      std::vector<float> cz(size_t(2) * c.head_dim);
      CEDAR_GPU(cu::CopyToHost(cz.data(), dp.pending.get(), cz.size() * sizeof(float)));
      p.pending_c.assign(cz.begin(), cz.begin() + c.head_dim);
      p.pending_z.assign(cz.begin() + c.head_dim, cz.end());
    }
  }
  s.tokens = d.tokens;
  s.keep_extra_rows = d.keep_extra_rows;
  s.keep_h_e_rows = d.keep_h_e_rows;
  s.replayed = d.replayed;
  s.replayed_at = d.replayed_at;
  return s;
}

DeviceState Upload(const SequenceState& s, const ModelConfig& c) {
  DeviceState d(c);
  d.pos = s.pos;
  d.decoder_pos = s.decoder_pos;
  for (size_t l = 0; l < s.windows.size(); ++l) d.windows[l].Upload(s.windows[l].lo(), s.windows[l].raw());
  d.h_e.Upload(s.h_e.lo(), s.h_e.raw());
  for (size_t i = 0; i < s.pools.size(); ++i) {
    const Pool& p = s.pools[i];
    DevicePool& dp = d.pools[i];
    if (p.layer != dp.layer) throw std::invalid_argument("Upload: the state's pools do not match the model");
    dp.rows_seen = p.rows_seen;
    dp.entries.Upload(0, p.entries);
    dp.keys.Upload(0, p.keys);
    dp.has_pending = p.has_pending;
    if (p.has_pending) {
      std::vector<float> cz(p.pending_c);
      cz.insert(cz.end(), p.pending_z.begin(), p.pending_z.end());
      if (cz.size() != size_t(2) * c.head_dim) throw std::invalid_argument("Upload: pending half group of the wrong size");
      CEDAR_GPU(cu::CopyToDevice(dp.pending.get(), cz.data(), cz.size() * sizeof(float)));
    }
  }
  d.tokens = s.tokens;
  d.keep_extra_rows = s.keep_extra_rows;
  d.keep_h_e_rows = s.keep_h_e_rows;
  d.replayed = s.replayed;
  d.replayed_at = s.replayed_at;
  return d;
}

}  // namespace cedar::gpu
