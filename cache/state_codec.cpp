#include "cache/state_codec.h"

#include <cstring>
#include <stdexcept>

#include "engine/kv_precision.h"

namespace cedar::cache {

namespace {

constexpr uint32_t kSnapshotMagic = 0x43534e50;  // "CSNP"
// Version 1: window rows as F32 (kv_dtype "f32"). Version 2: the same layout with window rows in
// the released FP8 form (kv_dtype "released", engine/kv_precision.h). A reader accepts only the
// version of its model's kv_dtype, so neither is ever read as the other.
constexpr uint32_t kSnapshotVersionF32 = 1;
constexpr uint32_t kSnapshotVersionReleased = 2;
uint32_t SnapshotVersionFor(const ModelConfig& c) { return ReleasedKv(c) ? kSnapshotVersionReleased : kSnapshotVersionF32; }

struct SnapshotHeader {
  uint32_t magic = kSnapshotMagic;
  uint32_t version = kSnapshotVersionF32;
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

// Appends rows [lo, hi) of a window store as (lo, n, rows in the model's stored precision).
void PutWindowRows(std::vector<uint8_t>& out, const ModelConfig& c, const RowStore& s, int64_t lo, int64_t hi) {
  if (!ReleasedKv(c)) return PutRows(out, s, lo, hi);
  const int64_t n = std::max<int64_t>(0, hi - lo);
  PutBytes(out, &lo, 8);
  PutBytes(out, &n, 8);
  const size_t rb = WindowRowBytes(c);
  const size_t at = out.size();
  out.resize(at + size_t(n) * rb);
  for (int64_t i = 0; i < n; ++i)
    if (!kernels::EncodeRoundedKvRow(kWindowRowFormat, s.Row(lo + i), s.dim(), out.data() + at + size_t(i) * rb))
      throw std::logic_error("snapshot: window row " + std::to_string(lo + i) + " is not an FP8 row (kv_dtype released)");
}

// Appends n rows [n, dim] of pool entries or index keys in the model's stored precision.
void PutPoolRows(std::vector<uint8_t>& out, const ModelConfig& c, kernels::KvRowFormat f, const float* rows, int64_t n, int dim) {
  if (!ReleasedKv(c)) return PutBytes(out, rows, size_t(n) * dim * sizeof(float));
  const size_t rb = kernels::KvRowBytes(f, dim), at = out.size();
  out.resize(at + size_t(n) * rb);
  for (int64_t i = 0; i < n; ++i)
    if (!kernels::EncodeRoundedKvRow(f, rows + i * dim, dim, out.data() + at + size_t(i) * rb))
      throw std::logic_error(std::string("page: a pool row is not a ") + kernels::KvFormatName(f) + " row (kv_dtype released)");
}

// Reads n rows [n, dim] written by PutPoolRows from `p`, appending floats to `to`; returns the end.
const uint8_t* GetPoolRows(const ModelConfig& c, kernels::KvRowFormat f, const uint8_t* p, int64_t n, int dim, std::vector<float>& to) {
  const size_t at = to.size();
  to.resize(at + size_t(n) * dim);
  if (!ReleasedKv(c)) {
    std::memcpy(to.data() + at, p, size_t(n) * dim * sizeof(float));
    return p + size_t(n) * dim * sizeof(float);
  }
  const size_t rb = kernels::KvRowBytes(f, dim);
  for (int64_t i = 0; i < n; ++i) kernels::DecodeKvRow(f, p + size_t(i) * rb, dim, to.data() + at + size_t(i) * dim);
  return p + size_t(n) * rb;
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
    if (s.dim() > 0 && size_t(n) > (b_.size() - off_) / (size_t(s.dim()) * sizeof(float))) return false;  // truncated
    std::vector<float> rows(size_t(n) * s.dim());
    if (!Get(rows.data(), rows.size() * sizeof(float))) return false;
    s.Assign(lo, std::move(rows));
    return true;
  }
  // Window rows as PutWindowRows wrote them for this model.
  bool WindowRows(RowStore& s, const ModelConfig& c) {
    if (!ReleasedKv(c)) return Rows(s);
    int64_t lo = 0, n = 0;
    if (!Get(&lo, 8) || !Get(&n, 8) || n < 0) return false;
    const size_t rb = WindowRowBytes(c);
    if (size_t(n) > (b_.size() - off_) / rb) return false;  // truncated
    std::vector<float> rows(size_t(n) * s.dim());
    for (int64_t i = 0; i < n; ++i) kernels::DecodeKvRow(kWindowRowFormat, b_.data() + off_ + size_t(i) * rb, s.dim(), rows.data() + size_t(i) * s.dim());
    off_ += size_t(n) * rb;
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
  size_t bytes = 0;
  for (int s : c.kv_source_layers) bytes += page_tokens / size_t(c.RatioOf(s)) * (PoolEntryBytes(c) + IndexKeyBytes(c));
  return bytes;
}

Payload EncodePage(const ModelConfig& c, const SequenceState& st, int64_t start, size_t page_tokens) {
  std::vector<uint8_t> out;
  out.reserve(PageBytes(c, page_tokens));
  for (const Pool& p : st.pools) {
    const int64_t j0 = start / p.ratio, n = int64_t(page_tokens) / p.ratio;
    PutPoolRows(out, c, kPoolEntryFormat, p.entries.data() + size_t(j0) * c.head_dim, n, c.head_dim);
    PutPoolRows(out, c, kIndexKeyFormat, p.keys.data() + size_t(j0) * c.index_head_dim, n, c.index_head_dim);
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
  h.version = SnapshotVersionFor(c);
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
    PutWindowRows(out, c, w, position - R, position);
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
      PutWindowRows(out, c, w, std::max(w.lo(), position - int64_t(c.window)), position);
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
  if (!r.Get(&h, sizeof h) || h.magic != kSnapshotMagic ||
      (h.version != kSnapshotVersionF32 && h.version != kSnapshotVersionReleased))
    return DecoderTail::kNone;
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
                                std::to_string(expect) + " (pool rows stored as " +
                                (ReleasedKv(c) ? "released FP4/MXFP4" : "F32") + ", kv_dtype \"" + c.kv_dtype + "\")");
    const uint8_t* f = page->data();
    for (Pool& p : st.pools) {
      const int64_t n = int64_t(page_tokens) / p.ratio;
      f = GetPoolRows(c, kPoolEntryFormat, f, n, c.head_dim, p.entries);
      f = GetPoolRows(c, kIndexKeyFormat, f, n, c.index_head_dim, p.keys);
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
  if (!r.Get(&h, sizeof h) || h.magic != kSnapshotMagic) return Status::Corruption("snapshot: bad header");
  if (h.version != SnapshotVersionFor(c)) {
    auto name = [](uint32_t v) {
      return v == kSnapshotVersionF32 ? std::string("F32 window rows (version 1)")
             : v == kSnapshotVersionReleased ? std::string("released FP8 window rows (version 2)")
                                             : "unknown version " + std::to_string(v);
    };
    return Status::Corruption("snapshot: holds " + name(h.version) + ", the model (kv_dtype \"" + c.kv_dtype + "\") expects " +
                              name(SnapshotVersionFor(c)));
  }
  if (h.position != st.pos || h.n_layers != c.n_encoder_layers || h.dim != c.ResidualWidth() || h.head_dim != c.head_dim)
    return Status::Corruption("snapshot: header does not match the state (position " + std::to_string(h.position) + " vs " +
                              std::to_string(st.pos) + ")");
  for (int l = 0; l < h.n_layers; ++l)
    if (!r.WindowRows(st.windows[size_t(l)], c)) return Status::Corruption("snapshot: truncated window of layer " + std::to_string(l));
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
      if (!r.WindowRows(dec.back(), c) || dec.back().hi() != st.pos)
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
