// KV as released on a tiny model (preset tiny-kvq): the forward rounds exactly the rows it
// stores, the cache stores them in the released byte forms (sizes asserted from the payloads),
// a restore gives back the very same floats, and payloads of the other precision are refused.
#include <doctest/doctest.h>

#include <cstring>

#include "cache/prefix_cache.h"
#include "cache/state_codec.h"
#include "engine/backend.h"
#include "engine/engine.h"
#include "engine/info.h"
#include "engine/kv_precision.h"
#include "kernels/kv_quant.h"
#include "tests/test_models.h"

using namespace cedar;
using cedar::test::RandomTokens;
using cedar::test::RelError;
using cedar::test::TinyKvqModel;
using cedar::test::TinyModel;

namespace {

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

// The restored store `r` is non-empty and its rows equal `o`'s rows at the same positions, bit for bit.
bool SameRows(const RowStore& r, const RowStore& o) {
  if (r.size() == 0 || r.lo() < o.lo() || r.hi() > o.hi()) return false;
  return std::memcmp(r.Row(r.lo()), o.Row(r.lo()), size_t(r.size()) * r.dim() * sizeof(float)) == 0;
}

// Rows of `v` ([rows, n]) that are exactly representable in format f.
int64_t RowsOnGrid(kernels::KvRowFormat f, const std::vector<float>& v, int n) {
  std::vector<uint8_t> b(kernels::KvRowBytes(f, n));
  int64_t ok = 0;
  for (size_t r = 0; r + size_t(n) <= v.size(); r += size_t(n)) ok += kernels::EncodeRoundedKvRow(f, v.data() + r, n, b.data());
  return ok;
}

SequenceState Prefilled(const Model& m, const std::vector<int32_t>& t) {
  SequenceState st(m.config());
  PrefillOptions o;
  o.mode = PrefillMode::kExact;
  Prefill(m, st, t, o);
  return st;
}

}  // namespace

TEST_CASE("tiny-kvq rounds what it stores: layer 0's window is the F32 twin's, quantised; every stored row is on its grid") {
  const Model& q = TinyKvqModel();
  ModelConfig twin_c = q.config();
  twin_c.kv_dtype = "f32";  // the same weights (same shapes, same seed), KV kept in F32
  auto twin = cedar::test::MakeModel(twin_c, 1);
  const ModelConfig& c = q.config();
  auto t = RandomTokens(40, c.vocab_size, 5);
  SequenceState a = Prefilled(q, t), b = Prefilled(*twin, t);
  // Layer 0's window entries depend on the embeddings alone: the same numbers before rounding.
  std::vector<float> rounded = b.windows[0].raw();
  kernels::QdqKvRows(kWindowRowFormat, rounded.data(), b.windows[0].size(), c.head_dim);
  CHECK(SameBits(a.windows[0].raw(), rounded));
  CHECK_FALSE(SameBits(b.windows[0].raw(), rounded));  // the rounding did something
  for (int l = 0; l < c.n_layers; ++l) {
    CAPTURE(l);
    const RowStore& w = a.windows[size_t(l)];
    CHECK(RowsOnGrid(kWindowRowFormat, w.raw(), c.head_dim) == w.size());
  }
  for (const Pool& p : a.pools) {
    CAPTURE(p.layer);
    REQUIRE(p.Count(c.head_dim) > 0);
    CHECK(RowsOnGrid(kPoolEntryFormat, p.entries, c.head_dim) == p.Count(c.head_dim));
    CHECK(RowsOnGrid(kIndexKeyFormat, p.keys, c.index_head_dim) == p.Count(c.head_dim));
  }
  // The F32 twin's rows are (almost all) off those grids: the check above is not vacuous.
  CHECK(RowsOnGrid(kPoolEntryFormat, b.pools[0].entries, c.head_dim) < b.pools[0].Count(c.head_dim) / 2);
}

TEST_CASE("pages and snapshots hold the released bytes and restore the same floats, bit for bit") {
  const Model& m = TinyKvqModel();
  const ModelConfig& c = m.config();
  const int P = 64, page = 16, E = c.n_encoder_layers, W = c.window;
  auto t = RandomTokens(P, c.vocab_size, 9);
  SequenceState st = Prefilled(m, t);
  REQUIRE(st.decoder_pos == P);

  // Pages: per pool entry c/2 + c/16 bytes (FP4 + E4M3 scales), per index key h/2 + h/32 (MXFP4).
  const size_t entry = size_t(c.head_dim / 2 + c.head_dim / 16), key = size_t(c.index_head_dim / 2 + c.index_head_dim / 32);
  CHECK(entry == 18);
  CHECK(key == 17);
  size_t expect_page = 0;
  for (int s : c.kv_source_layers) expect_page += size_t(page / c.RatioOf(s)) * (entry + key);
  CHECK(expect_page == 1120);  // pools at layers 1, 3 (m 2) and 4 (m 1): (8 + 8 + 16) * 35
  CHECK(cache::PageBytes(c, page) == expect_page);
  std::vector<cache::Payload> pages;
  for (int s = 0; s < P; s += page) {
    pages.push_back(cache::EncodePage(c, st, s, page));
    CHECK(pages.back()->size() == expect_page);
  }
  auto restored = cache::StateFromPages(c, pages, page, t);
  REQUIRE(restored.ok());
  SequenceState& r = restored.value();
  for (size_t p = 0; p < st.pools.size(); ++p) {
    CAPTURE(st.pools[p].layer);
    CHECK(SameBits(r.pools[p].entries, st.pools[p].entries));
    CHECK(SameBits(r.pools[p].keys, st.pools[p].keys));
  }

  // Snapshot with a decoder tail: window rows c + c/32 bytes (FP8 + UE8M0), H_E and logits F32.
  std::vector<float> logits(size_t(c.vocab_size));
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = float(i) * 0.25f;
  auto snap = cache::EncodeSnapshot(c, st, P, W, {cache::DecoderTail::kExact, logits});
  REQUIRE(snap.ok());
  const size_t row = size_t(c.head_dim + c.head_dim / 32), header = 32, run = 16;  // (lo, n) per run
  size_t tail_rows = 0;  // decoder layers (E, L): the last min(W, held) rows each
  for (int l = E + 1; l < c.n_layers; ++l) tail_rows += size_t(P - std::max<int64_t>(st.windows[size_t(l)].lo(), P - W));
  CHECK(tail_rows > 0);
  const size_t expect_snap = header + size_t(E) * (run + size_t(W) * row) + (run + size_t(W) * c.dim * 4) +
                             size_t(c.n_layers - E - 1) * run + tail_rows * row + 8 + size_t(c.vocab_size) * 4;
  CHECK((*snap)->size() == expect_snap);
  std::vector<float> got_logits;
  REQUIRE(cache::ApplySnapshot(c, *snap, r, &got_logits).ok());
  for (int l = 0; l < c.n_layers; ++l) {
    CAPTURE(l);
    if (l == E) continue;  // layer E's window is rebuilt from H_E (RebuildLayerEWindow), not stored
    CHECK(SameRows(r.windows[size_t(l)], st.windows[size_t(l)]));
  }
  CHECK(SameBits(r.h_e.raw(), std::vector<float>(st.h_e.raw().end() - W * c.dim, st.h_e.raw().end())));
  CHECK(SameBits(got_logits, logits));
  // And the restored state continues like the original.
  RebuildLayerEWindow(m, r);
  SequenceState o = CopyState(st, c);
  for (int32_t tok : RandomTokens(3, c.vocab_size, 10)) CHECK(RelError(DecodeStep(m, r, tok), DecodeStep(m, o, tok)) <= 2e-5);
}

TEST_CASE("a payload of the other KV precision is refused by name, never misread; F32 snapshots keep version 1") {
  const Model& f = TinyModel();
  const Model& q = TinyKvqModel();
  auto t = RandomTokens(32, 256, 11);
  SequenceState sf = Prefilled(f, t), sq = Prefilled(q, t);
  auto snap_f = cache::EncodeSnapshot(f.config(), sf, 32, 8), snap_q = cache::EncodeSnapshot(q.config(), sq, 32, 8);
  REQUIRE(snap_f.ok());
  REQUIRE(snap_q.ok());
  uint32_t version = 0;
  std::memcpy(&version, (*snap_f)->data() + 4, 4);
  CHECK(version == 1);  // the format F32 models wrote before released KV existed: old files read
  std::memcpy(&version, (*snap_q)->data() + 4, 4);
  CHECK(version == 2);
  // F32 snapshot size: unchanged layout (header, E windows of W F32 rows, W rows of H_E).
  const ModelConfig& cf = f.config();
  CHECK((*snap_f)->size() == 32 + size_t(cf.n_encoder_layers) * (16 + 8 * cf.head_dim * 4) + 16 + 8 * cf.dim * 4);

  SequenceState into_q(q.config()), into_f(f.config());
  into_q.pos = into_f.pos = 32;
  const cache::Status a = cache::ApplySnapshot(q.config(), *snap_f, into_q);
  CHECK(a.code() == cache::StatusCode::kCorruption);
  CHECK(a.ToString().find("F32 window rows (version 1)") != std::string::npos);
  CHECK(a.ToString().find("kv_dtype \"released\"") != std::string::npos);
  const cache::Status b = cache::ApplySnapshot(f.config(), *snap_q, into_f);
  CHECK(b.code() == cache::StatusCode::kCorruption);
  CHECK(b.ToString().find("released FP8 window rows (version 2)") != std::string::npos);

  // A page written at F32 offered to the released model: a size mismatch that names the precision.
  std::vector<cache::Payload> pages{cache::EncodePage(f.config(), sf, 0, 16)};
  auto r = cache::StateFromPages(q.config(), pages, 16, t);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().ToString().find("kv_dtype \"released\"") != std::string::npos);
}

TEST_CASE("the CUDA engine refuses KV as released by name; --device auto runs it on the CPU") {
  const Model& q = TinyKvqModel();
  BackendOptions cuda;
  cuda.device = "cuda";
  CHECK_THROWS_WITH_AS(MakeBackend(q, cuda), doctest::Contains("kv_dtype \"released\""), std::runtime_error);
  BackendOptions autod;
  autod.device = "auto";
  auto b = MakeBackend(q, autod);
  REQUIRE(b != nullptr);
  CHECK(b->name() == std::string("cpu"));
}

TEST_CASE("released pages and a snapshot go to the disk tier and come back after a restart as the same floats") {
  const Model& m = TinyKvqModel();
  const ModelConfig& c = m.config();
  const size_t page = 16;
  auto t = RandomTokens(48, c.vocab_size, 21);
  std::vector<cache::TokenId> toks(t.begin(), t.end());
  SequenceState st = Prefilled(m, t);
  auto snap = cache::EncodeSnapshot(c, st, 48, c.window);
  REQUIRE(snap.ok());
  const std::string dir = cedar::test::TempDir("kvq-disk");
  auto open = [&] {
    cache::PrefixCacheConfig cc;
    cc.page_tokens = page;
    cc.disk_dir = dir;
    cc.disk_budget_bytes = 1 << 20;
    auto pc = cache::PrefixCache::Open(m.fingerprint(), cc);
    REQUIRE_MESSAGE(pc.ok(), pc.status().ToString());
    return std::move(pc).value();
  };
  {
    auto pc = open();
    auto provider = [&](size_t i, std::span<const cache::TokenId>) -> cache::Result<cache::Payload> {
      return cache::EncodePage(c, st, int64_t(i * page), page);
    };
    std::vector<cache::SnapshotInput> snaps{{48, *snap}};
    auto ins = pc->Insert(toks, provider, snaps);
    REQUIRE(ins.ok());
    REQUIRE(pc->Flush().ok());
    pc->EvictRamTo(0);  // nothing left in RAM: the next process reads the disk tier
  }
  auto pc = open();
  auto h = pc->Acquire(toks);
  REQUIRE(h.ok());
  REQUIRE(h->tokens() == 48);
  REQUIRE(h->snapshot_position() == 48);
  for (const cache::Payload& p : h->pages()) CHECK(p->size() == cache::PageBytes(c, page));
  auto r = cache::StateFromPages(c, h->pages(), page, t);
  REQUIRE(r.ok());
  REQUIRE(cache::ApplySnapshot(c, h->snapshot(), r.value()).ok());
  for (size_t p = 0; p < st.pools.size(); ++p) {
    CHECK(SameBits(r->pools[p].entries, st.pools[p].entries));
    CHECK(SameBits(r->pools[p].keys, st.pools[p].keys));
  }
  for (int l = 0; l < c.n_encoder_layers; ++l) CHECK(SameRows(r->windows[size_t(l)], st.windows[size_t(l)]));
  CHECK(pc->Counters().disk_hit_tokens == 48);
}

TEST_CASE("cedar info sizes the flash preset's caches at its kv_dtype: 890 bytes per token as released") {
  ModelConfig flash;
  REQUIRE(PresetConfig("flash", &flash));
  const ModelInfo f32 = ComputeInfo(flash);
  CHECK(f32.cached_bytes_per_token == 3 * (512 + 128) * 4 / 2.0 + (512 + 128) * 4);  // 6400
  flash.kv_dtype = "released";
  REQUIRE(flash.Validate() == "");
  const ModelInfo rel = ComputeInfo(flash);
  CHECK(rel.kv_dtype == "released");
  CHECK(rel.cached_bytes_per_token == 3 * (288 + 68) / 2.0 + (288 + 68));  // 890, the report's figure
  CHECK(rel.boundary_window_bytes == 20 * 128 * 528 + 128 * 5120 * 4);   // FP8 windows, F32 H_E
  CHECK(rel.live_decoder_window_bytes == 20 * 128 * 528);
}
