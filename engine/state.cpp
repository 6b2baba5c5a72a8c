#include "engine/state.h"

#include <algorithm>
#include <stdexcept>

namespace cedar {

float* RowStore::Append(int64_t pos) {
  if (pos > hi_ || size() == 0) {
    Clear();
    lo_ = hi_ = pos;
  } else if (pos < hi_) {
    DropFrom(pos);
    if (size() == 0) {
      Clear();
      lo_ = hi_ = pos;
    }
  }
  data_.resize(data_.size() + size_t(dim_));
  ++hi_;
  return MutableRow(pos);
}

void RowStore::DropFrom(int64_t pos) {
  if (pos >= hi_) return;
  if (pos <= lo_) {
    Clear();
    return;
  }
  data_.resize(size_t(skip_ + pos - lo_) * dim_);
  hi_ = pos;
}

void RowStore::DropBefore(int64_t pos) {
  if (pos <= lo_) return;
  if (pos >= hi_) {
    data_.clear();
    skip_ = 0;
    lo_ = hi_;
    return;
  }
  skip_ += pos - lo_;
  lo_ = pos;
  if (skip_ >= size()) Compact();
}

void RowStore::Compact() const {
  if (skip_ == 0) return;
  data_.erase(data_.begin(), data_.begin() + skip_ * dim_);
  skip_ = 0;
}

RowStore RowStore::Copy() const {
  RowStore r(dim_);
  r.lo_ = lo_;
  r.hi_ = hi_;
  r.data_.assign(data_.begin() + skip_ * dim_, data_.end());
  return r;
}

void RowStore::Assign(int64_t lo, std::vector<float> rows) {
  if (rows.size() % size_t(dim_) != 0) throw std::invalid_argument("RowStore::Assign: size is not a multiple of dim");
  lo_ = lo;
  hi_ = lo + int64_t(rows.size() / size_t(dim_));
  data_ = std::move(rows);
  skip_ = 0;
}

SequenceState::SequenceState(const ModelConfig& c) : h_e(c.ResidualWidth()) {
  for (int l = 0; l < c.n_layers; ++l) windows.emplace_back(c.head_dim);
  for (int s : c.kv_source_layers) {
    Pool p;
    p.layer = s;
    p.ratio = c.RatioOf(s);
    pools.push_back(std::move(p));
  }
}

void SequenceState::Reserve(const ModelConfig& c, int64_t rows) {
  if (rows <= 0) return;
  h_e.Reserve(rows);
  windows[size_t(c.n_encoder_layers)].Reserve(rows);
  for (Pool& p : pools) {
    const int64_t more = rows / std::max(1, p.ratio) + 1;
    RowStore::ReserveGrowing(p.entries, p.entries.size() + size_t(more) * size_t(c.head_dim));
    RowStore::ReserveGrowing(p.keys, p.keys.size() + size_t(more) * size_t(c.index_head_dim));
  }
  RowStore::ReserveGrowing(tokens, tokens.size() + size_t(rows));
}

Pool& SequenceState::PoolOfLayer(const ModelConfig& c, int layer) {
  const int src = c.PoolOf(layer);
  for (Pool& p : pools)
    if (p.layer == src) return p;
  throw std::logic_error("no pool for layer " + std::to_string(layer));
}

const Pool& SequenceState::PoolOfLayer(const ModelConfig& c, int layer) const {
  return const_cast<SequenceState*>(this)->PoolOfLayer(c, layer);
}

size_t SequenceState::Bytes() const {
  size_t b = h_e.Bytes();
  for (const auto& w : windows) b += w.Bytes();
  for (const auto& p : pools) b += (p.entries.size() + p.keys.size() + p.pending_c.size() + p.pending_z.size()) * sizeof(float);
  if (decoder_run) b += DecoderRunBytes(*decoder_run);
  return b;
}

void SequenceState::DropWindowsAndResidual() {
  for (auto& w : windows) w.Clear();
  h_e.Clear();
  decoder_pos = 0;
}

SequenceState CopyState(const SequenceState& s, const ModelConfig& c) {
  if (s.decoder_run) throw std::logic_error("CopyState: the state is in the middle of a decoder phase");
  SequenceState r(c);
  r.pos = s.pos;
  r.decoder_pos = s.decoder_pos;
  for (size_t l = 0; l < s.windows.size(); ++l) r.windows[l] = s.windows[l].Copy();
  r.pools = s.pools;
  r.h_e = s.h_e.Copy();
  r.tokens = s.tokens;
  r.keep_extra_rows = s.keep_extra_rows;
  r.keep_h_e_rows = s.keep_h_e_rows;
  r.replayed = s.replayed;
  r.replayed_at = s.replayed_at;
  return r;
}

}  // namespace cedar
