// `cedar init --arch v41` -> Model::Load round trip on the released layout (engine/v41_init.*,
// engine/v41_load.*): the loaded F32 weights equal the stored codes decoded here with bit-field
// formulas written in this test (not kernels/quant_formats); both config spellings load the same;
// defects (missing tensor, wrong dtype, wrong shape, truncated shard, bad index, --max-ram too small,
// Engram) are refused with errors that name them.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/backend.h"
#include "engine/checkpoint_index.h"
#include "engine/engine.h"
#include "engine/expert_cache.h"
#include "engine/model.h"
#include "engine/pcg64.h"
#include "engine/safetensors.h"
#include "engine/v41_init.h"
#include "engine/v41_load.h"

using namespace cedar;
namespace fs = std::filesystem;

namespace {

struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& tag) : path(fs::temp_directory_path() / ("cedar_v41_load_" + tag + "_" + std::to_string(::getpid()))) {
    fs::remove_all(path);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string str() const { return path.string(); }
};

// v41-tiny with a 1024-id vocabulary: the preset's 129280 (the released tokenizer) makes embed and head
// 33 MB of BF16 to draw and decode per write, seconds per case on this machine; the CLI test
// (tests/cli/v41_init_test.sh) writes and checks the preset as is.
V41Config Tiny() {
  V41Config c;
  REQUIRE(V41PresetConfig("v41-tiny", &c));
  c.vocab_size = 1024;
  return c;
}

// ---- independent decoders (bit fields, as the formats are defined in docs/v41-contract.md §3) ----
double E4M3(uint8_t b) {
  const int s = b >> 7, e = (b >> 3) & 15, m = b & 7;
  const double v = e == 0 ? (m / 8.0) * std::pow(2.0, -6) : (1.0 + m / 8.0) * std::pow(2.0, e - 7);
  return s ? -v : v;
}
double E2M1(uint8_t n) {
  const int s = (n >> 3) & 1, e = (n >> 1) & 3, m = n & 1;
  const double v = e == 0 ? m * 0.5 : (1.0 + m / 2.0) * std::pow(2.0, e - 1);
  return s ? -v : v;
}
double E8M0(uint8_t b) { return std::pow(2.0, int(b) - 127); }
float BF16(const uint8_t* p) {
  const uint32_t bits = uint32_t(p[0] | (p[1] << 8)) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Rewrites the shard holding `name` with `edit` applied to that tensor's entry.
void EditTensor(const std::string& dir, const std::string& name, DType dtype, std::vector<int64_t> shape) {
  const Checkpoint ck(dir);
  const std::string shard = dir + "/" + ck.ShardOf(name);
  SafetensorsWriter w;
  {
    SafetensorsFile f(shard);
    for (const auto& [n, t] : f.Tensors()) {
      if (n != name) {
        w.AddRaw(n, t.dtype, t.shape, t.data, t.nbytes);
        continue;
      }
      int64_t count = 1;
      for (int64_t s : shape) count *= s;
      std::vector<uint8_t> zeros(size_t(count) * DTypeSize(dtype), 0);
      w.AddRaw(n, dtype, shape, zeros.data(), zeros.size());
    }
  }
  w.Write(shard);
}

// The Weight Model::Load fills for a tensor name of Cedar's own layout (engine/model.cpp
// RequiredTensors), written out here independently of engine/v41_load.cpp's table.
const Weight& CedarWeight(const Model& m, const std::string& name) {
  if (name == "embed.weight") return m.embed();
  if (name == "norm.weight") return m.norm();
  if (name == "head.weight") return m.head();
  const size_t dot = name.find('.', 7);
  const LayerWeights& w = m.layer(std::stoi(name.substr(7, dot - 7)));
  const std::string r = name.substr(dot + 1);
  const std::map<std::string, const Weight*> plain = {
      {"attn_norm.weight", &w.attn_norm}, {"ffn_norm.weight", &w.ffn_norm}, {"attn.wq_a.weight", &w.wq_a},
      {"attn.q_norm.weight", &w.q_norm}, {"attn.wq_b.weight", &w.wq_b}, {"attn.wkv.weight", &w.wkv},
      {"attn.kv_norm.weight", &w.kv_norm}, {"attn.sink", &w.sink}, {"attn.wo_a.weight", &w.wo_a}, {"attn.wo_b.weight", &w.wo_b},
      {"attn.compressor.wkv.weight", &w.comp_wkv}, {"attn.compressor.wz.weight", &w.comp_wz},
      {"attn.compressor.norm.weight", &w.comp_norm}, {"attn.indexer.wk.weight", &w.idx_wk},
      {"attn.indexer.k_norm.weight", &w.idx_k_norm}, {"attn.indexer.wq_b.weight", &w.idx_wq_b},
      {"attn.indexer.weights_proj.weight", &w.idx_wproj}, {"ffn.gate.weight", &w.gate}, {"ffn.gate.bias", &w.gate_bias},
      {"ffn.shared.w1.weight", &w.shared.w1}, {"ffn.shared.w2.weight", &w.shared.w2}, {"ffn.shared.w3.weight", &w.shared.w3}};
  if (auto it = plain.find(r); it != plain.end()) return *it->second;
  // ffn.experts.E.wN.weight
  const size_t e0 = std::string("ffn.experts.").size(), e1 = r.find('.', e0);
  const FfnWeights& f = w.experts.at(size_t(std::stoi(r.substr(e0, e1 - e0))));
  const char which = r[e1 + 2];
  return which == '1' ? f.w1 : which == '2' ? f.w2 : f.w3;
}

std::string LoadError(const std::string& dir, LoadOptions o = {}) {
  try {
    Model::Load(dir, o);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("v41-tiny written in the released layout loads; weights equal the codes decoded by hand") {
  TempDir d("roundtrip");
  const V41Config v = Tiny();
  WriteReleasedModel(v, 7, d.str());
  REQUIRE(fs::exists(d.path / "model.safetensors.index.json"));
  // One shard per layer plus embed, DSpark block and head: 1 + 6 + 1 + 1.
  int shards = 0;
  for (const auto& e : fs::directory_iterator(d.path)) shards += e.path().extension() == ".safetensors";
  CHECK(shards == 9);
  const auto m = Model::Load(d.str());
  const ModelConfig& c = m->config();
  CHECK(c.weight_layout == "deepseek_v41");
  CHECK(c.chat_format == "deepseek_v41");
  CHECK(c.hc_mult == 4);
  CHECK(c.n_encoder_layers == 3);
  CHECK(c.compress_ratios == std::vector<int>{0, 2, 2, 1, 1, 1});
  CHECK(c.o_group_rank == 32);
  CHECK(c.candidate_source_layer == 3);
  CHECK(c.candidate_blocks == 12);
  CHECK(c.rope_factor == 4.0f);
  CHECK(c.rope_original_seq_len == 1024);
  CHECK(c.max_seq_len == 4096);
  CHECK(c.kv_dtype == "released");  // the released forward rounds its stored KV
  CHECK(c.n_mtp_layers == 1);
  REQUIRE(m->released_load() != nullptr);
  CHECK(m->released_load()->tensors > 0);
  // 6 layers and the DSpark stage (its own bank, routed experts too) x 4 experts x w1, w2, w3 [64, 64] F32.
  CHECK(m->released_load()->expert_bytes == int64_t((6 + 1) * 4 * 3 * 64 * 64 * 4));

  const Checkpoint ck(d.str());
  // FP8 with 32x32 E8M0 blocks: layers.2.attn.wq_b [128, 32].
  {
    const TensorInfo& w = ck.Get("layers.2.attn.wq_b.weight");
    const TensorInfo& s = ck.Get("layers.2.attn.wq_b.scale");
    REQUIRE(w.shape == std::vector<int64_t>{128, 32});
    REQUIRE(s.shape == std::vector<int64_t>{4, 1});
    const Weight& got = m->layer(2).wq_b;
    REQUIRE(got.rows == 128);
    REQUIRE(got.cols == 32);
    int mismatches = 0, nonzero = 0;
    for (int r = 0; r < 128; ++r)
      for (int k = 0; k < 32; ++k) {
        const double want = E4M3(w.data[r * 32 + k]) * E8M0(s.data[(r / 32) * 1 + k / 32]);
        mismatches += double(got.data[r * 32 + k]) != want;
        nonzero += want != 0;
      }
    CHECK(mismatches == 0);
    CHECK(nonzero > 128 * 32 / 2);
  }
  // Packed FP4 expert, element 2k in the low nibble, one E8M0 per 32: layers.4.ffn.experts.3.w2 [64, 64].
  {
    const TensorInfo& w = ck.Get("layers.4.ffn.experts.3.w2.weight");
    const TensorInfo& s = ck.Get("layers.4.ffn.experts.3.w2.scale");
    REQUIRE(w.shape == std::vector<int64_t>{64, 32});
    const Weight& got = m->layer(4).experts[3].w2;
    int mismatches = 0;
    for (int r = 0; r < 64; ++r)
      for (int k = 0; k < 64; ++k) {
        const uint8_t byte = w.data[r * 32 + k / 2];
        const uint8_t nib = k % 2 == 0 ? (byte & 15) : (byte >> 4);
        mismatches += double(got.data[r * 64 + k]) != E2M1(nib) * E8M0(s.data[r * 2 + k / 32]);
      }
    CHECK(mismatches == 0);
  }
  // BF16 and F32 tensors, and the renamed ones (attn_sink -> sink, wgate -> comp_wz, shared_experts -> shared).
  {
    const TensorInfo& e = ck.Get("embed.weight");
    CHECK(m->embed().rows == 1024);
    int mismatches = 0;
    for (int64_t i : {int64_t(0), int64_t(64 * 1000 + 5), int64_t(1023) * 64 + 63}) mismatches += m->embed().data[i] != BF16(e.data + 2 * i);
    const TensorInfo& g = ck.Get("layers.1.attn.compressor.wgate.weight");
    for (int64_t i = 0; i < 32 * 64; ++i) mismatches += m->layer(1).comp_wz.data[i] != BF16(g.data + 2 * i);
    CHECK(mismatches == 0);
    CHECK(m->layer(2).comp_wz.data == nullptr);  // wgate only on ratio-2 sources
    CHECK(m->layer(3).comp_wz.data == nullptr);  // layer 3 is the ratio-1 source
    const TensorInfo& sink = ck.Get("layers.0.attn.attn_sink");
    CHECK(std::memcmp(m->layer(0).sink.data, sink.data, 4 * 4) == 0);
    const TensorInfo& fn = ck.Get("layers.5.hc_ffn_fn");
    CHECK(m->layer(5).hc_ffn_fn.rows == 24);
    CHECK(m->layer(5).hc_ffn_fn.cols == 4 * 64);
    CHECK(std::memcmp(m->layer(5).hc_ffn_fn.data, fn.data, fn.nbytes) == 0);
    const TensorInfo& sh = ck.Get("layers.0.ffn.shared_experts.w2.weight");
    const TensorInfo& shs = ck.Get("layers.0.ffn.shared_experts.w2.scale");
    CHECK(double(m->layer(0).shared.w2.data[70]) == E4M3(sh.data[70]) * E8M0(shs.data[0 * 2 + 70 / 32]));
    CHECK(m->layer(0).wo_a.rows == 64);
    CHECK(m->layer(0).wo_a.cols == 64);
    CHECK(m->layer(5).idx_wq_b.present());
    CHECK(!m->layer(4).idx_wq_b.present());
    CHECK(m->layer(3).idx_wk.present());
  }
  // The fingerprint reads headers and the ends of each shard's data only; stable, and the seed changes it.
  const uint64_t fp = m->fingerprint();
  CHECK(fp == ReleasedFingerprint(d.str(), d.str() + "/config.json"));
  TempDir d2("seed");
  WriteReleasedModel(v, 8, d2.str());
  CHECK(ReleasedFingerprint(d2.str(), d2.str() + "/config.json") != fp);
}

TEST_CASE("the flat inference/config.json spelling loads the same model") {
  TempDir d("flat");
  const V41Config v = Tiny();
  WriteReleasedModel(v, 3, d.str());
  const auto hf = Model::Load(d.str());
  // Rewrite the config in the flat spelling of the reference code (keys per docs/v41-contract.md §1).
  const nlohmann::json t = nlohmann::json::parse(std::ifstream(d.path / "config.json"))["text_config"];
  nlohmann::json f = {{"vocab_size", t["vocab_size"]}, {"dim", t["hidden_size"]}, {"n_layers", t["num_hidden_layers"]},
                      {"n_heads", t["num_attention_heads"]}, {"head_dim", t["head_dim"]}, {"rope_head_dim", t["qk_rope_head_dim"]},
                      {"q_lora_rank", t["q_lora_rank"]}, {"o_lora_rank", t["o_lora_rank"]}, {"o_groups", t["o_groups"]},
                      {"window_size", t["sliding_window"]}, {"norm_eps", t["rms_norm_eps"]}, {"rope_theta", t["rope_theta"]},
                      {"compress_rope_theta", t["compress_rope_theta"]}, {"rope_factor", t["rope_scaling"]["factor"]},
                      {"original_seq_len", t["rope_scaling"]["original_max_position_embeddings"]},
                      {"beta_fast", t["rope_scaling"]["beta_fast"]}, {"beta_slow", t["rope_scaling"]["beta_slow"]},
                      {"compress_ratios", t["compress_ratios"]}, {"kv_source_layers", t["kv_source_layer_ids"]},
                      {"index_source_layers", t["index_source_layer_ids"]}, {"candidate_source_layer", t["candidate_source_layer_id"]},
                      {"candidate_topk_blocks", t["candidate_topk_blocks"]}, {"candidate_block_size", t["candidate_block_size"]},
                      {"index_n_heads", t["index_n_heads"]}, {"index_head_dim", t["index_head_dim"]}, {"index_topk", t["index_topk"]},
                      {"hc_mult", t["hc_mult"]}, {"hc_sinkhorn_iters", t["hc_sinkhorn_iters"]}, {"hc_eps", t["hc_eps"]},
                      {"moe_inter_dim", t["moe_intermediate_size"]}, {"n_routed_experts", t["n_routed_experts"]},
                      {"n_shared_experts", t["n_shared_experts"]}, {"n_activated_experts", t["num_experts_per_tok"]},
                      {"score_func", t["scoring_func"]}, {"route_scale", t["routed_scaling_factor"]}, {"swiglu_limit", t["swiglu_limit"]},
                      {"n_mtp_layers", t["num_nextn_predict_layers"]}, {"dspark_block_size", t["dspark_block_size"]},
                      {"dspark_noise_token_id", t["dspark_noise_token_id"]}, {"dspark_target_layer_ids", t["dspark_target_layer_ids"]},
                      {"dspark_markov_rank", t["dspark_markov_rank"]}, {"dspark_n_routed_experts", t["dspark_n_routed_experts"]},
                      {"dspark_n_activated_experts", t["dspark_num_experts_per_tok"]}, {"dtype", "fp8"}, {"expert_dtype", "fp4"}};
  fs::remove(d.path / "config.json");
  fs::create_directories(d.path / "inference");
  std::ofstream(d.path / "inference/config.json") << f.dump(2);
  const auto flat = Model::Load(d.str());
  CHECK(ConfigToJson(flat->config()) == ConfigToJson(hf->config()));
  CHECK(std::memcmp(flat->layer(3).wq_b.data, hf->layer(3).wq_b.data, size_t(hf->layer(3).wq_b.rows * hf->layer(3).wq_b.cols) * 4) == 0);
  CHECK(std::memcmp(flat->layer(2).experts[1].w1.data, hf->layer(2).experts[1].w1.data, 64 * 64 * 4) == 0);
}

TEST_CASE("released checkpoint defects are refused with errors naming them") {
  TempDir d("defects");
  const V41Config v = Tiny();
  // doctest runs the body once per SUBCASE: each run gets its own copy of one pristine checkpoint.
  static TempDir pristine("pristine");
  if (!fs::exists(pristine.path / "config.json")) WriteReleasedModel(v, 1, pristine.str());
  fs::remove_all(d.path);
  fs::copy(pristine.path, d.path, fs::copy_options::recursive);
  static int64_t dense = 0, experts = 0;
  if (dense == 0) {
    const auto m = Model::Load(d.str());
    dense = m->released_load()->dense_bytes;
    experts = m->released_load()->expert_bytes;
  }

  SUBCASE("--max-ram") {
    LoadOptions o;
    o.max_ram_bytes = dense - 1;
    const std::string e1 = LoadError(d.str(), o);
    CHECK(e1.find("dense weights need " + std::to_string(dense) + " bytes") != std::string::npos);
    CHECK(e1.find("--max-ram " + std::to_string(dense - 1)) != std::string::npos);
    // Experts on demand need room for one token's experts (2 in v41-tiny) beside the dense part.
    const int64_t one_expert = 3 * 64 * 64 * 4;
    o.max_ram_bytes = dense + 2 * one_expert - 1;
    const std::string e2 = LoadError(d.str(), o);
    CHECK(e2.find("routed experts (" + std::to_string(experts) + " bytes in all) do not") != std::string::npos);
    CHECK(e2.find("fewer than the 2 experts of one token (" + std::to_string(2 * one_expert) + " bytes)") != std::string::npos);
    o.max_ram_bytes = dense + experts;
    const auto all = Model::Load(d.str(), o);
    CHECK(all->expert_cache() == nullptr);
  }
  SUBCASE("weights beyond the machine's memory") {
    // f32 (the default) beyond it: refused before the arena, naming as-stored's bytes when they fit.
    LoadOptions as_stored;
    as_stored.weights = WeightPrecision::kAsStored;
    const auto m8 = Model::Load(d.str(), as_stored);
    const int64_t held8 = m8->released_load()->dense_bytes + m8->released_load()->expert_bytes;
    REQUIRE(held8 < dense + experts);
    LoadOptions o;
    o.machine_memory_bytes = dense + experts - 1;
    const std::string e1 = LoadError(d.str(), o);
    CHECK(e1.find("the weights held at --weights f32 need " + std::to_string(dense + experts) + " bytes") != std::string::npos);
    CHECK(e1.find("more than this machine's memory, " + std::to_string(dense + experts - 1) + " bytes") != std::string::npos);
    CHECK(e1.find("--weights as-stored holds them as released in " + std::to_string(held8) + " bytes") != std::string::npos);
    CHECK(e1.find("--max-ram BYTES") != std::string::npos);
    // as-stored that fits exactly loads; one byte less is refused, pointing at --max-ram only.
    as_stored.machine_memory_bytes = held8;
    CHECK(Model::Load(d.str(), as_stored) != nullptr);
    as_stored.machine_memory_bytes = held8 - 1;
    const std::string e2 = LoadError(d.str(), as_stored);
    CHECK(e2.find("the weights held at --weights as-stored need " + std::to_string(held8) + " bytes") != std::string::npos);
    CHECK(e2.find("--weights as-stored holds") == std::string::npos);
    CHECK(e2.find("--max-ram BYTES") != std::string::npos);
    // Experts on demand: --max-ram itself must fit the machine.
    o.max_ram_bytes = dense + 3 * 3 * 64 * 64 * 4;
    o.machine_memory_bytes = o.max_ram_bytes - 1;
    CHECK(LoadError(d.str(), o).find("--max-ram " + std::to_string(o.max_ram_bytes) + " bytes (") != std::string::npos);
    o.machine_memory_bytes = o.max_ram_bytes;
    CHECK(Model::Load(d.str(), o)->expert_cache() != nullptr);
  }
  SUBCASE("missing tensor") {
    nlohmann::json idx = nlohmann::json::parse(std::ifstream(d.path / "model.safetensors.index.json"));
    idx["weight_map"].erase("layers.2.attn.wq_b.scale");
    std::ofstream(d.path / "model.safetensors.index.json") << idx.dump();
    CHECK(LoadError(d.str()).find("layers.2.attn.wq_b.scale: expected F8_E8M0 [4, 1], found no such tensor") != std::string::npos);
  }
  SUBCASE("wrong dtype") {
    EditTensor(d.str(), "layers.0.attn.attn_sink", DType::BF16, {4});
    CHECK(LoadError(d.str()).find("layers.0.attn.attn_sink: expected F32 [4], found BF16 [4]") != std::string::npos);
  }
  SUBCASE("wrong shape") {
    EditTensor(d.str(), "layers.1.attn.kv_norm.weight", DType::BF16, {16});
    CHECK(LoadError(d.str()).find("layers.1.attn.kv_norm.weight: expected BF16 [32], found BF16 [16]") != std::string::npos);
  }
  SUBCASE("truncated shard") {
    const fs::path shard = d.path / "model-00004-of-00009.safetensors";
    fs::resize_file(shard, fs::file_size(shard) - 100);
    const std::string e = LoadError(d.str());
    CHECK(e.find("model-00004-of-00009.safetensors") != std::string::npos);
  }
  SUBCASE("bad index") {
    nlohmann::json idx = nlohmann::json::parse(std::ifstream(d.path / "model.safetensors.index.json"));
    idx["metadata"]["total_size"] = idx["metadata"]["total_size"].get<int64_t>() + 1;
    std::ofstream(d.path / "model.safetensors.index.json") << idx.dump();
    CHECK(LoadError(d.str()).find("metadata.total_size") != std::string::npos);
    std::ofstream(d.path / "model.safetensors.index.json") << "{\"weight_map\": [";
    CHECK(LoadError(d.str()).find("not valid JSON") != std::string::npos);
  }
  SUBCASE("a config Cedar cannot run names the released key") {
    V41Config bad = v;
    bad.kv_source_layers = {1, 3, 5};  // a kv source past E = 3
    std::string e;
    try {
      ModelConfigFromV41(bad, "config.json");
    } catch (const std::invalid_argument& x) {
      e = x.what();
    }
    CHECK(e.find("text_config.kv_source_layer_ids: expected no kv source after E=3, found layer 5") != std::string::npos);
  }
}

TEST_CASE("a checkpoint with Engram layers loads its Engram (class table from tokenizer.json) and runs it") {
  TempDir d("engram");
  V41Config v;
  REQUIRE(V41PresetConfig("v41-tiny-engram", &v));
  v.vocab_size = 1024;
  WriteReleasedModel(v, 1, d.str());
  const Checkpoint ck(d.str());
  CHECK(ck.Get("layers.1.engram.embed.weight").dtype == DType::F8_E4M3);
  // 99,092 classes (the released tokenizer's) over 1,024 ids without a tokenizer.json: refused by name.
  CHECK(LoadError(d.str()).find("tokenizer.json") != std::string::npos);
  // With as many classes as ids the identity table serves (our own models, tests).
  TempDir e("engram_identity");
  v.engram_compressed_vocab = v.vocab_size;
  v.engram_num_embeddings = ComputeEngramHashConstants(v.engram_layer_ids, v.engram_max_ngram, v.engram_n_heads,
                                                       v.engram_vocab_size, v.engram_compressed_vocab).table_rows;
  WriteReleasedModel(v, 1, e.str());
  const auto m = Model::Load(e.str());
  REQUIRE(m->engram().size() == 1);
  CHECK(m->engram()[0].layer == 1);
  BackendOptions bo;
  const auto b = MakeBackend(*m, bo);
  const std::vector<int32_t> prompt = {5, 17, 300, 2, 999, 42, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17};
  PrefillOptions whole, chunked;
  whole.mode = chunked.mode = PrefillMode::kExact;
  chunked.chunk_size = 5;
  auto s1 = b->NewSequence(), s2 = b->NewSequence();
  const std::vector<float> a = b->Prefill(*s1, prompt, whole).logits, c = b->Prefill(*s2, prompt, chunked).logits;
  REQUIRE(a.size() == c.size());
  double worst = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, double(std::fabs(a[i] - c[i]))), scale = std::max(scale, double(std::fabs(a[i])));
  CHECK(worst <= 1e-4 * scale);  // Engram's wkv product rounds per chunk size like every other product (engram.h)
}

TEST_CASE("hc_mult 1 in the released layout runs today's forward: logits equal the same weights in Cedar's layout") {
  // The forward for hc_mult > 1 is helper v41fwd's; with one stream the released layout is our family,
  // so the loaded model must fill every weight Cedar's loader fills, with the same values and shapes.
  TempDir rel("hc1"), ced("hc1_cedar");
  V41Config v = Tiny();
  v.hc_mult = 1;
  WriteReleasedModel(v, 11, rel.str());
  const auto a = Model::Load(rel.str());
  CHECK(!a->layer(0).hc_attn_fn.present());
  SafetensorsWriter w;
  for (const TensorSpec& t : RequiredTensors(a->config())) {
    const Weight& x = CedarWeight(*a, t.name);
    REQUIRE_MESSAGE(x.present(), t.name);
    int64_t n = 1;
    for (int64_t s : t.shape) n *= s;
    REQUIRE_MESSAGE(x.rows * x.cols == n, t.name);
    w.AddF32(t.name, t.shape, x.data);
  }
  fs::create_directories(ced.path);
  w.Write(ced.str() + "/model.safetensors");
  std::ofstream(ced.path / "config.json") << ConfigToJson(a->config()).dump(2);
  const auto b = Model::Load(ced.str());
  BackendOptions bo;
  const auto ba = MakeBackend(*a, bo), bb = MakeBackend(*b, bo);
  auto sa = ba->NewSequence(), sb = bb->NewSequence();
  const std::vector<int32_t> prompt = {5, 17, 300, 2, 999, 42, 7, 8, 9, 10, 11, 12, 13, 14};
  PrefillOptions po;
  po.mode = PrefillMode::kExact;
  const std::vector<float> la = ba->Prefill(*sa, prompt, po).logits, lb = bb->Prefill(*sb, prompt, po).logits;
  REQUIRE(la.size() == 1024);
  CHECK(std::memcmp(la.data(), lb.data(), la.size() * 4) == 0);
  float lo = la[0], hi = la[0];
  for (float x : la) lo = std::min(lo, x), hi = std::max(hi, x);
  CHECK(std::isfinite(lo));
  CHECK(hi - lo > 1e-3f);  // not degenerate
  const std::vector<float> da = ba->DecodeStep(*sa, 77), db = bb->DecodeStep(*sb, 77);
  CHECK(std::memcmp(da.data(), db.data(), da.size() * 4) == 0);
}

TEST_CASE("experts beyond --max-ram are read on demand: the forward is bit-identical to all resident") {
  TempDir d("ondemand");
  WriteReleasedModel(Tiny(), 4, d.str());
  const auto all = Model::Load(d.str());
  const int64_t dense = all->released_load()->dense_bytes, one_expert = 3 * 64 * 64 * 4;
  LoadOptions o;
  o.max_ram_bytes = dense + 3 * one_expert;  // 3 of the 28 experts (6 layers + the DSpark stage, 4 each) resident at a time
  const auto lazy = Model::Load(d.str(), o);
  REQUIRE(lazy->expert_cache() != nullptr);
  CHECK(lazy->layer(2).experts.size() == 4);
  CHECK(lazy->layer(2).experts[0].w1.data == nullptr);
  BackendOptions bo;
  const auto ba = MakeBackend(*all, bo), bb = MakeBackend(*lazy, bo);
  auto sa = ba->NewSequence(), sb = bb->NewSequence();
  const std::vector<int32_t> prompt = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3};
  PrefillOptions po;
  po.mode = PrefillMode::kExact;
  const std::vector<float> la = ba->Prefill(*sa, prompt, po).logits, lb = bb->Prefill(*sb, prompt, po).logits;
  CHECK(std::memcmp(la.data(), lb.data(), la.size() * 4) == 0);
  for (int32_t t : {11, 12, 13}) {
    const std::vector<float> da = ba->DecodeStep(*sa, t), db = bb->DecodeStep(*sb, t);
    CHECK(std::memcmp(da.data(), db.data(), da.size() * 4) == 0);
  }
  const ExpertCache::Stats st = lazy->expert_cache()->stats();
  CHECK(st.misses > 3);
  CHECK(st.evictions > 0);
  CHECK(st.resident_bytes <= 3 * one_expert);
}
