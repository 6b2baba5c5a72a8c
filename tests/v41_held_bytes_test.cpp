// `cedar info --config C --weights W` on a released layout (issue 20) says what Cedar would hold
// loading that checkpoint at W without reading it: engine/v41_info.h ComputeV41Held applies the
// loader's held-type rule to the config's tensor list. Here the same figures are taken from a
// model actually loaded at W: the arena the loader sized from the checkpoint's own tensors, the
// Engram weights it holds, and the bytes of the Weights one decode token reads, summed over
// the loaded Model's fields. Two paths (the config's tensor list vs. the loader's plan and the
// checkpoint's dtypes) that must agree to the byte.
#include <doctest/doctest.h>

#include <filesystem>
#include <string>

#include "engine/engram.h"
#include "engine/model.h"
#include "engine/pcg64.h"
#include "engine/v41_held.h"
#include "engine/v41_info.h"
#include "engine/v41_init.h"
#include "tests/test_models.h"

using namespace cedar;

namespace {

int64_t Held(const Weight& w) { return w.present() ? HeldBytes(w.type, w.rows, w.cols) : 0; }
int64_t Held(const FfnWeights& f) { return Held(f.w1) + Held(f.w2) + Held(f.w3); }

// The weights a decode token reads in one backbone layer of the loaded model: every field, and
// experts_per_token of its routed experts (all of one layer's experts are held alike).
int64_t LayerDecodeBytes(const LayerWeights& l, int experts_per_token) {
  int64_t b = 0;
  for (const Weight* w : {&l.attn_norm, &l.ffn_norm, &l.wq_a, &l.q_norm, &l.wq_b, &l.wkv, &l.kv_norm, &l.sink, &l.wo_a, &l.wo_b,
                          &l.comp_wkv, &l.comp_wz, &l.comp_norm, &l.idx_wk, &l.idx_k_norm, &l.idx_wq_b, &l.idx_wproj, &l.gate,
                          &l.gate_bias, &l.hc_attn_fn, &l.hc_attn_base, &l.hc_attn_scale, &l.hc_ffn_fn, &l.hc_ffn_base,
                          &l.hc_ffn_scale})
    b += Held(*w);
  int64_t experts = 0;
  for (const FfnWeights& e : l.experts) experts += Held(e);
  if (!l.experts.empty()) {
    REQUIRE(experts % int64_t(l.experts.size()) == 0);
    b += experts / int64_t(l.experts.size()) * experts_per_token;
  }
  return b + Held(l.shared) + Held(l.dense);
}

void CheckAgainstLoad(const V41Config& v, const std::string& dir) {
  for (WeightPrecision p : {WeightPrecision::kAsStored, WeightPrecision::kBF16, WeightPrecision::kI8, WeightPrecision::kF32}) {
    CAPTURE(WeightPrecisionName(p));
    LoadOptions o;
    o.weights = p;
    const auto m = Model::Load(dir, o);
    const ModelConfig& c = m->config();
    const ReleasedLoadReport& r = *m->released_load();
    const V41Held h = ComputeV41Held(v, p);
    CHECK(h.arena_bytes == r.dense_bytes + r.expert_bytes);
    CHECK(h.expert_bytes == r.expert_bytes);
    // The types held: matmul weights (Engram's wkv one of them) at p, the routers as released (BF16).
    using kernels::WeightType;
    const WeightType dense = p == WeightPrecision::kAsStored ? WeightType::kFP8
                             : p == WeightPrecision::kBF16   ? WeightType::kBF16
                             : p == WeightPrecision::kI8     ? WeightType::kI8
                                                             : WeightType::kF32;
    CHECK(m->layer(1).wq_a.type == dense);
    CHECK(m->layer(1).gate.type == (p == WeightPrecision::kF32 ? WeightType::kF32 : WeightType::kBF16));
    CHECK(m->layer(1).attn_norm.type == WeightType::kF32);
    int64_t engram = 0, decode = Held(m->head()) + Held(m->norm());
    for (const EngramWeights& e : m->engram()) {
      CHECK(e.wkv.type == dense);
      const int64_t vectors = HeldBytes(e.wkv.type, e.wkv.rows, e.wkv.cols) + int64_t(e.qk.size()) * 4;
      engram += vectors;
      // Each of (max_ngram - 1) x n_heads table rows read as stored: head_dim E4M3 codes + one E8M0 per 32.
      decode += vectors + int64_t(c.engram_max_ngram - 1) * c.engram_n_heads * (c.engram_head_dim + c.engram_head_dim / 32);
    }
    CHECK(h.engram_bytes == engram);
    for (int l = 0; l < c.n_layers; ++l) decode += LayerDecodeBytes(m->layer(l), c.experts_per_token);
    CHECK(h.decode_token_bytes == decode);
    std::printf("v41_held_bytes_test: %s --weights %s: arena %lld bytes (experts %lld), Engram %lld, decode token %lld\n",
                dir.c_str(), WeightPrecisionName(p), (long long)h.arena_bytes, (long long)h.expert_bytes, (long long)h.engram_bytes,
                (long long)h.decode_token_bytes);
  }
  // The precisions order as their bytes do, and as-stored keeps FP8 / FP4 under INT8's 1 + 2/32 bytes.
  const auto decode = [&](WeightPrecision p) { return ComputeV41Held(v, p).decode_token_bytes; };
  CHECK(decode(WeightPrecision::kAsStored) < decode(WeightPrecision::kI8));
  CHECK(decode(WeightPrecision::kI8) < decode(WeightPrecision::kBF16));
  CHECK(decode(WeightPrecision::kBF16) < decode(WeightPrecision::kF32));
}

}  // namespace

TEST_CASE("a released config's held bytes (cedar info --weights) equal what the loader holds, at every precision") {
  SUBCASE("v41-tiny: mHC, compressor and indexer, DSpark stage") {
    V41Config v;
    REQUIRE(V41PresetConfig("v41-tiny", &v));
    v.vocab_size = 1024;
    const std::string dir = cedar::test::TempDir("held-bytes");
    WriteReleasedModel(v, 3, dir);
    CheckAgainstLoad(v, dir);
    std::filesystem::remove_all(dir);
  }
  SUBCASE("v41-tiny-engram: Engram's tables stay in the shards, its wkv is held at --weights") {
    V41Config v;
    REQUIRE(V41PresetConfig("v41-tiny-engram", &v));
    v.vocab_size = 1024;
    v.engram_compressed_vocab = v.vocab_size;  // the identity class table: no tokenizer.json needed
    v.engram_num_embeddings = ComputeEngramHashConstants(v.engram_layer_ids, v.engram_max_ngram, v.engram_n_heads,
                                                         v.engram_vocab_size, v.engram_compressed_vocab).table_rows;
    const std::string dir = cedar::test::TempDir("held-bytes-engram");
    WriteReleasedModel(v, 1, dir);
    CheckAgainstLoad(v, dir);
    std::filesystem::remove_all(dir);
  }
}
