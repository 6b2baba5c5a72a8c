#include "cache/state_codec.h"

#include <cstring>

namespace cedar::cache {

namespace {

constexpr uint32_t kSnapshotMagic = 0x43534e50;  // "CSNP"
constexpr uint32_t kSnapshotVersion = 1;

struct SnapshotHeader {
  uint32_t magic = kSnapshotMagic;
  uint32_t version = kSnapshotVersion;
  int64_t position = 0;
  int32_t n_layers = 0;  // encoder layers stored (E)
  int32_t dim = 0, head_dim = 0;
  int32_t tail = 0;      // DecoderTail (0 in payloads written before tails existed)
};

void PutBytes(std::vector<uint8_t>& out, const void* p, size_t n) {
  if (n == 0) return;
  const size_t at = out.size();
  out.resize(at + n);
  std::memcpy(out.data() + at, p, n);
}

// Appends rows [lo, hi) of a store as (lo, n, floats).
void PutRows(std::vector<uint8_t>& out, const RowStore& s, int64_t lo, int64_t hi) {
  const int64_t n = std::max<int64_t>(0, hi - lo);
  PutBytes(out, &lo, 8);
  PutBytes(out, &n, 8);
  if (n > 0) PutBytes(out, s.Row(lo), size_t(n) * s.dim() * sizeof(float));
}

class Reader {
 public:
  explicit Reader(const std::vector<uint8_t>& b) : b_(b) {}
  bool Get(void* p, size_t n) {
    if (off_ + n > b_.size()) return false;
    std::memcpy(p, b_.data() + off_, n);
    off_ += n;
    return true;
  }
  bool Rows(RowStore& s) {
    int64_t lo = 0, n = 0;
    if (!Get(&lo, 8) || !Get(&n, 8) || n < 0) return false;
    std::vector<float> rows(size_t(n) * s.dim());
    if (!Get(rows.data(), rows.size() * sizeof(float))) return false;
    s.Assign(lo, std::move(rows));
    return true;
  }
  bool Floats(std::vector<float>& v) {
    int64_t n = 0;
    if (!Get(&n, 8) || n < 0 || size_t(n) > (b_.size() - off_) / sizeof(float)) return false;
    v.resize(size_t(n));
    return Get(v.data(), v.size() * sizeof(float));
  }
  bool done() const { return off_ == b_.size(); }

 private:
  const std::vector<uint8_t>& b_;
  size_t off_ = 0;
};

}  // namespace

size_t PageBytes(const ModelConfig& c, size_t page_tokens) {
  size_t floats = 0;
  for (int s : c.kv_source_layers) floats += page_tokens / size_t(c.RatioOf(s)) * size_t(c.head_dim + c.index_head_dim);
  return floats * sizeof(float);
}

Payload EncodePage(const ModelConfig& c, const SequenceState& st, int64_t start, size_t page_tokens) {
  std::vector<uint8_t> out;
  out.reserve(PageBytes(c, page_tokens));
  for (const Pool& p : st.pools) {
    const int64_t j0 = start / p.ratio, n = int64_t(page_tokens) / p.ratio;
    PutBytes(out, p.entries.data() + size_t(j0) * c.head_dim, size_t(n) * c.head_dim * sizeof(float));
    PutBytes(out, p.keys.data() + size_t(j0) * c.index_head_dim, size_t(n) * c.index_head_dim * sizeof(float));
  }
  return MakePayload(std::move(out));
}

Result<Payload> EncodeSnapshot(const ModelConfig& c, const SequenceState& st, int64_t position, int64_t h_e_rows,
                               const TailInput& tail) {
  const int E = c.n_encoder_layers;
  if (tail.kind != DecoderTail::kNone) {
    if (position != st.pos || st.decoder_pos != st.pos)
      return Status::FailedPrecondition("snapshot tail: the decoder did not run to the position");
    if (int64_t(tail.logits.size()) != c.vocab_size) return Status::FailedPrecondition("snapshot tail: logits are not [V]");
  }
  const int64_t R = std::min<int64_t>(c.window, position);
  for (const Pool& p : st.pools)
    if (p.rows_seen < position) return Status::FailedPrecondition("snapshot: pools end before position");
  if (position % 2 != 0) return Status::InvalidArgument("snapshot: position must be even (no pending half group)");
  SnapshotHeader h;
  h.position = position;
  h.n_layers = E;
  h.dim = c.ResidualWidth();  // H_E rows: the residual state (X and a with mHC)
  h.head_dim = c.head_dim;
  h.tail = int32_t(tail.kind);
  std::vector<uint8_t> out;
  PutBytes(out, &h, sizeof h);
  for (int l = 0; l < E; ++l) {
    const RowStore& w = st.windows[size_t(l)];
    if (w.lo() > position - R || w.hi() < position)
      return Status::FailedPrecondition("snapshot: layer " + std::to_string(l) + " window does not cover [P-R, P)");
    PutRows(out, w, position - R, position);
  }
  const int64_t h_lo = std::max(st.h_e.lo(), position - std::max<int64_t>(h_e_rows, R));
  if (h_lo > position - R || st.h_e.hi() < position) return Status::FailedPrecondition("snapshot: H_E does not cover [P-R, P)");
  PutRows(out, st.h_e, h_lo, position);
  if (tail.kind != DecoderTail::kNone) {
    // Decoder windows of layers (E, L): the last W rows (a decode step at P reads W - 1 back).
    for (int l = E + 1; l < c.n_layers; ++l) {
      const RowStore& w = st.windows[size_t(l)];
      if (w.hi() != position || w.size() == 0)
        return Status::FailedPrecondition("snapshot tail: decoder layer " + std::to_string(l) + " window does not end at P");
      PutRows(out, w, std::max(w.lo(), position - int64_t(c.window)), position);
    }
    const int64_t n = int64_t(tail.logits.size());
    PutBytes(out, &n, 8);
    PutBytes(out, tail.logits.data(), tail.logits.size() * sizeof(float));
  }
  return MakePayload(std::move(out));
}

DecoderTail SnapshotTail(const Payload& snapshot) {
  if (!snapshot) return DecoderTail::kNone;
  Reader r(*snapshot);
  SnapshotHeader h;
  if (!r.Get(&h, sizeof h) || h.magic != kSnapshotMagic || h.version != kSnapshotVersion) return DecoderTail::kNone;
  if (h.tail != int32_t(DecoderTail::kExact) && h.tail != int32_t(DecoderTail::kBounded)) return DecoderTail::kNone;
  return DecoderTail(h.tail);
}

Result<SequenceState> StateFromPages(const ModelConfig& c, std::span<const Payload> pages, size_t page_tokens,
                                     std::span<const int32_t> tokens) {
  const size_t expect = PageBytes(c, page_tokens);
  const int64_t P = int64_t(pages.size() * page_tokens);
  if (int64_t(tokens.size()) < P) return Status::InvalidArgument("restore: fewer tokens than cached pages");
  SequenceState st(c);
  for (Pool& p : st.pools) {
    p.entries.reserve(size_t(P / p.ratio) * c.head_dim);
    p.keys.reserve(size_t(P / p.ratio) * c.index_head_dim);
  }
  for (const Payload& page : pages) {
    if (!page || page->size() != expect)
      return Status::Corruption("restore: page payload of " + std::to_string(page ? page->size() : 0) + " bytes, expected " +
                                std::to_string(expect));
    const auto* f = reinterpret_cast<const float*>(page->data());
    for (Pool& p : st.pools) {
      const size_t n = page_tokens / size_t(p.ratio);
      p.entries.insert(p.entries.end(), f, f + n * c.head_dim);
      f += n * c.head_dim;
      p.keys.insert(p.keys.end(), f, f + n * c.index_head_dim);
      f += n * c.index_head_dim;
    }
  }
  for (Pool& p : st.pools) p.rows_seen = P;
  st.pos = P;
  st.tokens.assign(tokens.begin(), tokens.begin() + P);
  return st;
}

Status ApplySnapshot(const ModelConfig& c, const Payload& snapshot, SequenceState& st, std::vector<float>* logits) {
  if (!snapshot) return Status::InvalidArgument("snapshot: null payload");
  Reader r(*snapshot);
  SnapshotHeader h;
  if (!r.Get(&h, sizeof h) || h.magic != kSnapshotMagic || h.version != kSnapshotVersion)
    return Status::Corruption("snapshot: bad header");
  if (h.position != st.pos || h.n_layers != c.n_encoder_layers || h.dim != c.ResidualWidth() || h.head_dim != c.head_dim)
    return Status::Corruption("snapshot: header does not match the state (position " + std::to_string(h.position) + " vs " +
                              std::to_string(st.pos) + ")");
  for (int l = 0; l < h.n_layers; ++l)
    if (!r.Rows(st.windows[size_t(l)])) return Status::Corruption("snapshot: truncated window of layer " + std::to_string(l));
  if (!r.Rows(st.h_e)) return Status::Corruption("snapshot: truncated H_E");
  if (st.h_e.hi() != st.pos) return Status::Corruption("snapshot: H_E does not end at the position");
  for (int l = 0; l < h.n_layers; ++l)
    if (st.windows[size_t(l)].hi() != st.pos) return Status::Corruption("snapshot: window does not end at the position");
  st.decoder_pos = 0;
  if (h.tail != int32_t(DecoderTail::kNone)) {
    if (h.tail != int32_t(DecoderTail::kExact) && h.tail != int32_t(DecoderTail::kBounded))
      return Status::Corruption("snapshot: unknown decoder tail " + std::to_string(h.tail));
    // Read into scratch stores; they replace the state's decoder windows only when asked for.
    std::vector<RowStore> dec;
    for (int l = h.n_layers + 1; l < c.n_layers; ++l) {
      dec.emplace_back(st.windows[size_t(l)].dim());
      if (!r.Rows(dec.back()) || dec.back().hi() != st.pos)
        return Status::Corruption("snapshot: bad decoder tail window of layer " + std::to_string(l));
    }
    std::vector<float> lg;
    if (!r.Floats(lg) || int64_t(lg.size()) != c.vocab_size) return Status::Corruption("snapshot: bad tail logits");
    if (logits != nullptr) {
      for (size_t i = 0; i < dec.size(); ++i) st.windows[size_t(h.n_layers) + 1 + i] = std::move(dec[i]);
      st.decoder_pos = st.pos;
      *logits = std::move(lg);
    }
  }
  if (!r.done()) return Status::Corruption("snapshot: oversized payload");
  return Status::Ok();
}

}  // namespace cedar::cache
