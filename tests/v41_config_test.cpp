// The released V4.1 config in both spellings, its validation messages, the tensor inventory the
// config implies, and the parameter / byte / active counts of `cedar info --config`, checked
// against independent arithmetic here and against the numbers the report and other engines state.
#include <doctest/doctest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/model.h"
#include "engine/pcg64.h"
#include "engine/v41_config.h"
#include "engine/v41_info.h"

using namespace cedar;

namespace {
const std::string kDir = std::string(CEDAR_SOURCE_DIR) + "/tests/data/v41/";

nlohmann::json LoadJson(const std::string& name) {
  std::ifstream f(kDir + name);
  REQUIRE(f.good());
  nlohmann::json j;
  f >> j;
  return j;
}

std::string ErrorOf(const nlohmann::json& j) {
  try {
    ParseV41Config(j, "cfg");
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST_CASE("the released config.json parses with the released values") {
  const V41Config c = LoadV41ConfigFile(kDir + "config.json");
  CHECK(c.spelling == "hf");
  CHECK(c.vocab_size == 129280);
  CHECK(c.dim == 5120);
  CHECK(c.n_layers == 40);
  CHECK(c.n_heads == 64);
  CHECK(c.head_dim == 512);
  CHECK(c.rope_dim == 64);
  CHECK(c.q_lora_rank == 1280);
  CHECK(c.o_lora_rank == 1024);
  CHECK(c.o_groups == 8);
  CHECK(c.window == 128);
  CHECK(c.norm_eps == 1e-20);
  CHECK(c.rope_theta == 10000);
  CHECK(c.compress_rope_theta == 160000);
  CHECK(c.rope_factor == 16);
  CHECK(c.original_seq_len == 65536);
  CHECK(c.beta_fast == 32);
  CHECK(c.beta_slow == 1);
  CHECK(c.max_positions == 1048576);
  REQUIRE(c.compress_ratios.size() == 43);
  CHECK(c.kv_source_layers == std::vector<int>{2, 8, 14, 20});
  CHECK(c.index_source_layers == std::vector<int>{2, 8, 14, 20, 24, 28, 32, 36});
  CHECK(c.candidate_source_layer == 20);
  CHECK(c.candidate_topk_blocks == 2048);
  CHECK(c.candidate_block_size == 8);
  CHECK(c.index_n_heads == 32);
  CHECK(c.index_head_dim == 128);
  CHECK(c.index_topk == 512);
  CHECK(c.hc_mult == 4);
  CHECK(c.hc_sinkhorn_iters == 20);
  CHECK(c.hc_eps == 1e-6);
  CHECK(c.moe_inter_dim == 2304);
  CHECK(c.n_routed_experts == 384);
  CHECK(c.n_shared_experts == 1);
  CHECK(c.n_activated_experts == 6);
  CHECK(c.score_func == "sqrtsoftplus");
  CHECK(c.norm_topk_prob);
  CHECK(c.route_scale == 1.5);
  CHECK(c.swiglu_limit == 10.0);
  CHECK(c.engram_layer_ids == std::vector<int>{1, 14});
  CHECK(c.engram_num_embeddings == std::vector<int64_t>{384006168, 384016682});
  CHECK(c.engram_max_ngram == 4);
  CHECK(c.engram_vocab_size == 16000000);
  CHECK(c.engram_n_heads == 8);
  CHECK(c.engram_head_dim == 256);
  CHECK(c.engram_pad_id == 2);
  CHECK(c.engram_compressed_vocab == 99092);
  CHECK(c.n_mtp_layers == 3);
  CHECK(c.dspark_block_size == 5);
  CHECK(c.dspark_noise_token_id == 128799);
  CHECK(c.dspark_target_layer_ids == std::vector<int>{37, 38, 39});
  CHECK(c.dspark_markov_rank == 256);
  CHECK(c.dspark_n_routed_experts == 128);
  CHECK(c.dspark_n_activated_experts == 3);
  CHECK(c.weight_dtype == "fp8");
  CHECK(c.expert_dtype == "fp4");
  CHECK(c.scale_fmt == "ue8m0");
  CHECK(c.weight_block_rows == 32);
  CHECK(c.weight_block_cols == 32);
  CHECK(c.image_token_id == 129264);
  // Layer roles as the report's table gives them (0-indexed).
  for (int l = 0; l < 40; ++l) CHECK(c.RatioOf(l) == (l < 2 ? 0 : l < 20 ? 2 : 1));
  CHECK(c.KvSourceOf(1) == -1);
  CHECK(c.KvSourceOf(7) == 2);
  CHECK(c.KvSourceOf(13) == 8);
  CHECK(c.KvSourceOf(19) == 14);
  CHECK(c.KvSourceOf(39) == 20);
  CHECK(c.IndexSourceOf(23) == 20);
  CHECK(c.IndexSourceOf(27) == 24);
  CHECK(c.IndexSourceOf(39) == 36);
  CHECK(c.EncoderLayers() == 20);
}

TEST_CASE("the flat inference/config.json gives the same config") {
  const V41Config h = LoadV41ConfigFile(kDir + "config.json");
  const V41Config f = LoadV41ConfigFile(kDir + "inference_config.json");
  CHECK(f.spelling == "inference");
  // Every field both files carry. (norm_topk_prob and max_position_embeddings exist only in the
  // HF file; the flat file implies true and original_seq_len * rope_factor.)
  CHECK(nlohmann::json(V41InfoToJson(ComputeV41Info(h))) == V41InfoToJson(ComputeV41Info(f)));
  CHECK(f.vocab_size == h.vocab_size);
  CHECK(f.dim == h.dim);
  CHECK(f.n_layers == h.n_layers);
  CHECK(f.n_heads == h.n_heads);
  CHECK(f.head_dim == h.head_dim);
  CHECK(f.rope_dim == h.rope_dim);
  CHECK(f.window == h.window);
  CHECK(f.norm_eps == h.norm_eps);
  CHECK(f.rope_factor == h.rope_factor);
  CHECK(f.original_seq_len == h.original_seq_len);
  CHECK(f.max_positions == h.max_positions);
  CHECK(f.compress_ratios == h.compress_ratios);
  CHECK(f.kv_source_layers == h.kv_source_layers);
  CHECK(f.index_source_layers == h.index_source_layers);
  CHECK(f.candidate_source_layer == h.candidate_source_layer);
  CHECK(f.n_activated_experts == h.n_activated_experts);
  CHECK(f.score_func == h.score_func);
  CHECK(f.route_scale == h.route_scale);
  CHECK(f.engram_pad_id == h.engram_pad_id);
  CHECK(f.engram_head_dim == h.engram_head_dim);
  CHECK(f.n_mtp_layers == h.n_mtp_layers);
  CHECK(f.dspark_n_activated_experts == h.dspark_n_activated_experts);
  CHECK(f.weight_dtype == h.weight_dtype);
  CHECK(f.expert_dtype == h.expert_dtype);
  CHECK(f.image_token_id == h.image_token_id);
}

TEST_CASE("config defects are reported with the key, what was expected and what was found") {
  const nlohmann::json good = LoadJson("config.json");
  {
    nlohmann::json j = good;
    j["text_config"].erase("hidden_size");
    const std::string e = ErrorOf(j);
    CHECK(e.find("text_config.hidden_size") != std::string::npos);
    CHECK(e.find("missing") != std::string::npos);
  }
  {
    nlohmann::json j = good;
    j["text_config"]["hc_mult"] = "four";
    const std::string e = ErrorOf(j);
    CHECK(e.find("text_config.hc_mult") != std::string::npos);
    CHECK(e.find("\"four\"") != std::string::npos);
  }
  {
    nlohmann::json j = good;
    j["text_config"]["kv_source_layer_ids"] = {1, 8, 14, 20};  // layer 1 has ratio 0
    CHECK(ErrorOf(j).find("text_config.kv_source_layer_ids") != std::string::npos);
  }
  {
    nlohmann::json j = good;
    j["text_config"]["kv_source_layer_ids"] = {8, 14, 20};  // layers 2..7 compress with no source
    const std::string e = ErrorOf(j);
    CHECK(e.find("kv_source_layer_ids") != std::string::npos);
    CHECK(e.find("layer 2") != std::string::npos);
  }
  {
    nlohmann::json j = good;
    j["text_config"]["compress_ratios"][5] = 1;  // layer 5 reads layer 2's ratio-2 pool
    CHECK(ErrorOf(j).find("text_config.compress_ratios") != std::string::npos);
  }
  {
    nlohmann::json j = good;
    j["text_config"]["compress_ratios"].erase(42);
    CHECK(ErrorOf(j).find("43 entries") != std::string::npos);
  }
  {
    nlohmann::json j = good;
    j["text_config"]["engram_num_embeddings"] = {384006168};
    CHECK(ErrorOf(j).find("text_config.engram_num_embeddings") != std::string::npos);
  }
  {
    nlohmann::json j = good;
    j["text_config"]["scoring_func"] = "relu";
    CHECK(ErrorOf(j).find("sqrtsoftplus, sigmoid or softmax") != std::string::npos);
  }
  {
    nlohmann::json j = good;
    j["quantization_config"]["weight_block_size"] = {32};
    CHECK(ErrorOf(j).find("quantization_config.weight_block_size") != std::string::npos);
  }
  {
    nlohmann::json j = good;
    j["text_config"]["candidate_source_layer_id"] = 24;  // an index source, not a kv source
    CHECK(ErrorOf(j).find("text_config.candidate_source_layer_id") != std::string::npos);
  }
  {
    nlohmann::json j = LoadJson("inference_config.json");
    j.erase("n_layers");
    CHECK(ErrorOf(j).find("n_layers: expected an integer") != std::string::npos);  // the flat key name
  }
  CHECK(ErrorOf(nlohmann::json::object()).find("text_config") != std::string::npos);
  CHECK_THROWS_AS(LoadV41ConfigFile(kDir + "no_such_file.json"), std::invalid_argument);
}

TEST_CASE("the tensor inventory matches the released index, layer by layer") {
  const V41Config c = LoadV41ConfigFile(kDir + "config.json");
  const std::vector<V41TensorSpec> ts = V41Tensors(c);
  std::map<int, int64_t> per_layer;
  int64_t total = 0;
  for (const auto& t : ts) {
    total += t.count;
    if (t.layer >= 0) per_layer[t.layer] += t.count;
  }
  // Per-layer tensor counts read from model.safetensors.index.json by a header audit (docs/v41-contract.md):
  // 2334 baseline, +6 Engram (1), +8 Full (2, 8), +14 Full and Engram (14), +7 (20: no wgate), +3 Reindex.
  CHECK(per_layer[0] == 2334);
  CHECK(per_layer[1] == 2340);
  CHECK(per_layer[2] == 2342);
  CHECK(per_layer[8] == 2342);
  CHECK(per_layer[14] == 2348);
  CHECK(per_layer[20] == 2341);
  for (int l : {24, 28, 32, 36}) CHECK(per_layer[l] == 2337);
  for (int l : {3, 19, 21, 39}) CHECK(per_layer[l] == 2334);
  // 96,085 tensors in the index, of which 266 are vision (259 vision.*, 4 aligner.*, 3 image_*).
  CHECK(total == 96085 - 266);
  // Shapes the audit read from shard headers (layer 2).
  std::map<std::string, std::vector<int64_t>> shape;
  for (const auto& t : ts) shape[t.name] = t.shape;
  CHECK(shape["layers.2.attn.wq_a.scale"] == std::vector<int64_t>{40, 160});
  CHECK(shape["layers.2.attn.wq_b.weight"] == std::vector<int64_t>{32768, 1280});
  CHECK(shape["layers.2.attn.wo_a.weight"] == std::vector<int64_t>{8192, 4096});
  CHECK(shape["layers.2.attn.wo_a.scale"] == std::vector<int64_t>{256, 128});
  CHECK(shape["layers.2.attn.wo_b.weight"] == std::vector<int64_t>{5120, 8192});
  CHECK(shape["layers.2.attn.indexer.wq_b.scale"] == std::vector<int64_t>{128, 40});
  CHECK(shape["layers.2.ffn.experts.{E}.w1.weight"] == std::vector<int64_t>{2304, 2560});
  CHECK(shape["layers.2.ffn.experts.{E}.w2.scale"] == std::vector<int64_t>{5120, 72});
  CHECK(shape["layers.2.ffn.shared_experts.w1.scale"] == std::vector<int64_t>{72, 160});
  CHECK(shape["layers.2.hc_attn_fn"] == std::vector<int64_t>{24, 20480});
  CHECK(shape["layers.14.engram.embed.weight"] == std::vector<int64_t>{384016682, 256});
  CHECK(shape["layers.1.engram.wkv.weight"] == std::vector<int64_t>{25600, 6144});
  CHECK(shape["mtp.0.main_proj.weight"] == std::vector<int64_t>{5120, 15360});
}

TEST_CASE("bytes by dtype match the released shards' sums") {
  const V41Info i = ComputeV41Info(LoadV41ConfigFile(kDir + "config.json"));
  // Independent arithmetic: every routed expert (40 x 384 backbone + 3 x 128 DSpark) is three
  // 2304 x 5120 matrices at half a byte per value.
  const int64_t experts = 40 * 384 + 3 * 128;
  CHECK(i.bytes_by_dtype.at("I8") == experts * 3 * (2304LL * 5120 / 2));
  // Totals the index reports by dtype (Appendix A of the notes, 4 significant digits; BF16 there
  // includes ~0.97e9 bytes of vision tower, which is out of scope here).
  auto near = [](int64_t got, double want, double rel) { return std::fabs(double(got) - want) <= rel * want; };
  CHECK(near(i.bytes_by_dtype.at("I8"), 278.6e9, 0.0005));
  CHECK(near(i.bytes_by_dtype.at("F8_E4M3"), 204.0e9, 0.0005));
  CHECK(near(i.bytes_by_dtype.at("F8_E8M0"), 23.6e9, 0.003));
  CHECK(near(i.bytes_by_dtype.at("BF16"), 3.95e9 - 0.97e9, 0.01));
  CHECK(near(i.bytes_by_dtype.at("F32"), 0.17e9, 0.05));
  // Engram: (384006168 + 384016682) rows x 256 = the report's 196B.
  CHECK(i.engram_table_params == (384006168LL + 384016682LL) * 256);
  // The report's 552B backbone (rounded).
  CHECK(near(i.backbone_params, 552e9, 0.005));
  // 890 bytes of global KV per token (report abstract): (288 + 68) per entry, pools at 1/2, 1/2, 1/2, 1.
  CHECK(i.global_kv_bytes_per_token == 890.0);
}

TEST_CASE("active parameters per prefill and decode token") {
  const V41Config c = LoadV41ConfigFile(kDir + "config.json");
  const V41Info info = ComputeV41Info(c);
  // Independent arithmetic from the released dimensions.
  const int64_t d = 5120, qr = 1280, H = 64, hd = 512, g = 8, orank = 1024, E = 384, inter = 2304, k = 6;
  const int64_t attn = qr * d + qr + H * hd * qr + hd * d + hd + g * orank * (H * hd / g) + d * g * orank + H;
  const int64_t hc = 2 * ((6 * 4) * (4 * d) + 24 + 3);
  const int64_t norms = 2 * d;
  const int64_t expert = 3 * inter * d;
  const int64_t moe = E * d + 2 * E + k * expert + expert;  // router + biases + top-6 + shared
  const int64_t base = attn + hc + norms + moe;
  const int64_t comp2 = 2 * hd * d + hd, comp1 = hd * d + hd;  // wkv (+ wgate) + norm
  const int64_t idx_q = 32 * 128 * qr + 32 * d, idx_k = 128 * hd + 128;
  const int64_t engram = d * 5 * 6144 + 2 * 4 * d + 24 * 256;  // wkv + q/k weights + 24 rows read
  int64_t prefill = 20 * base + 3 * (comp2 + idx_q + idx_k) + 2 * engram;
  prefill += d + comp1 + idx_k;  // layer 20 for a prompt token: attn_norm, compressor, index keys
  const int64_t decode = 40 * base + 3 * (comp2 + idx_q + idx_k) + 2 * engram + (comp1 + idx_q + idx_k) + 4 * idx_q + d + 129280 * d;
  CHECK(info.active_prefill == prefill);
  CHECK(info.active_decode == decode);
  CHECK(info.active_per_layer[0] == base);
  // The report: ~8B per prefill token, ~16B per decode token (rounded figures; 5%).
  CHECK(std::fabs(double(info.active_prefill) - 8e9) <= 0.05 * 8e9);
  CHECK(std::fabs(double(info.active_decode) - 16e9) <= 0.05 * 16e9);
  MESSAGE("active prefill " << info.active_prefill << ", decode " << info.active_decode);
}

TEST_CASE("stored bytes a decode token reads") {
  const V41Config c = LoadV41ConfigFile(kDir + "config.json");
  const V41Info info = ComputeV41Info(c);
  // Independent arithmetic from the released dimensions and dtypes: FP8 dense weights with one
  // E8M0 byte per 32x32 block, FP4 experts (half a byte) with one E8M0 byte per 32 along a row,
  // BF16 norms / router / compressor / indexer keys / head, F32 mHC / sinks / router biases.
  const int64_t d = 5120, qr = 1280, H = 64, hd = 512, g = 8, orank = 1024, E = 384, inter = 2304, k = 6, V = 129280;
  auto cdiv = [](int64_t a, int64_t b) { return (a + b - 1) / b; };
  auto fp8 = [&](int64_t rows, int64_t cols) { return rows * cols + cdiv(rows, 32) * cdiv(cols, 32); };
  auto fp4 = [](int64_t rows, int64_t cols) { return rows * cols / 2 + rows * cols / 32; };
  auto bf16 = [](int64_t n) { return 2 * n; };
  auto f32 = [](int64_t n) { return 4 * n; };
  const int64_t attn = fp8(qr, d) + bf16(qr) + fp8(H * hd, qr) + fp8(hd, d) + bf16(hd) + fp8(g * orank, H * hd / g) +
                       fp8(d, g * orank) + f32(H);
  const int64_t hc = f32(2 * ((6 * 4) * (4 * d) + 24 + 3));
  const int64_t norms = bf16(2 * d);
  const int64_t expert = 2 * fp4(inter, d) + fp4(d, inter);
  const int64_t shared = 2 * fp8(inter, d) + fp8(d, inter);
  const int64_t moe = bf16(E * d) + f32(2 * E) + k * expert + shared;
  const int64_t base = attn + hc + norms + moe;
  const int64_t comp2 = bf16(2 * hd * d + hd), comp1 = bf16(hd * d + hd);
  const int64_t idx_q = fp8(32 * 128, qr) + bf16(32 * d), idx_k = bf16(128 * hd + 128);
  const int64_t engram = fp8(d * 5, 6144) + bf16(2 * 4 * d) + 24 * (256 + 256 / 32);  // 24 FP8 rows + their scales
  const int64_t decode = 40 * base + 3 * (comp2 + idx_q + idx_k) + 2 * engram + (comp1 + idx_q + idx_k) + 4 * idx_q +
                         bf16(d) + bf16(V * d);
  CHECK(info.active_decode_bytes == decode);
  // Below two bytes per active parameter (BF16 everywhere) and above half a byte (FP4 everywhere).
  CHECK(info.active_decode_bytes < 2 * info.active_decode);
  CHECK(2 * info.active_decode_bytes > info.active_decode);
  CHECK(V41InfoToJson(info)["active_bytes_per_decode_token"] == decode);
  CHECK(V41InfoText(c, info).find("weights streamed per decode token as stored: ") != std::string::npos);
  MESSAGE("decode bytes per token as stored " << info.active_decode_bytes);
}

TEST_CASE("Engram bucket primes reproduce the released table heights") {
  const V41Config c = LoadV41ConfigFile(kDir + "config.json");
  const EngramHashConstants k = ComputeEngramHashConstants(c.engram_layer_ids, c.engram_max_ngram, c.engram_n_heads,
                                                           c.engram_vocab_size, c.engram_compressed_vocab);
  // The primes drawn in (layer, order, head) order must sum to engram_num_embeddings exactly; any
  // other drawing order or reuse rule gives different heights.
  REQUIRE(k.table_rows.size() == 2);
  CHECK(k.table_rows[0] == 384006168);
  CHECK(k.table_rows[1] == 384016682);
  CHECK(k.primes[0][0][0] == 16000057);  // the first prime above 16,000,000
  REQUIRE(k.multipliers.size() == 2);
  for (const auto& m : k.multipliers) {
    REQUIRE(m.size() == 4);
    for (int64_t v : m) CHECK(v % 2 == 1);
  }
}

TEST_CASE("bytes Cedar holds and a decode token reads at --weights as-stored, at V4.1-Flash's size") {
  const V41Config c = LoadV41ConfigFile(kDir + "config.json");
  const V41Held h = ComputeV41Held(c, WeightPrecision::kAsStored);
  // Independent arithmetic of what engine/v41_load.cpp holds as-stored: matmul weights (Engram's
  // wkv too) and the routers as released (FP8 + E8M0 per 32x32, FP4 + E8M0 per 32, BF16),
  // everything else F32, each part of each tensor rounded up to 64 bytes; the routers' image bias
  // (bias_vl) not loaded; Engram's q * k ([4, d]) one unrounded F32 vector, its table rows read as stored.
  const int64_t d = 5120, qr = 1280, H = 64, hd = 512, g = 8, orank = 1024, E = 384, inter = 2304, k = 6, V = 129280;
  auto al = [](int64_t b) { return (b + 63) / 64 * 64; };
  auto cdiv = [](int64_t a, int64_t b) { return (a + b - 1) / b; };
  auto fp8 = [&](int64_t rows, int64_t cols) { return al(rows * cols) + al(cdiv(rows, 32) * cdiv(cols, 32)); };
  auto fp4 = [&](int64_t rows, int64_t cols) { return al(rows * cols / 2) + al(rows * cols / 32); };
  auto bf16 = [&](int64_t rows, int64_t cols) { return al(2 * rows * cols); };
  auto f32 = [&](int64_t n) { return al(4 * n); };
  const int64_t attn = fp8(qr, d) + f32(qr) + fp8(H * hd, qr) + fp8(hd, d) + f32(hd) + fp8(g * orank, H * hd / g) +
                       fp8(d, g * orank) + f32(H);
  const int64_t hc = 2 * (f32(24 * 4 * d) + f32(24) + f32(3));
  const int64_t norms = 2 * f32(d);
  const int64_t expert = 2 * fp4(inter, d) + fp4(d, inter);
  const int64_t moe = bf16(E, d) + f32(E) + k * expert + 2 * fp8(inter, d) + fp8(d, inter);
  const int64_t base = attn + hc + norms + moe;
  const int64_t comp2 = 2 * bf16(hd, d) + f32(hd), comp1 = bf16(hd, d) + f32(hd);
  const int64_t idx_q = fp8(32 * 128, qr) + bf16(32, d), idx_k = bf16(128, hd) + f32(128);
  const int64_t engram = fp8(d * 5, 6144) + 4 * 4 * d + 24 * (256 + 256 / 32);
  const int64_t decode = 40 * base + 3 * (comp2 + idx_q + idx_k) + 2 * engram + (comp1 + idx_q + idx_k) + 4 * idx_q + f32(d) +
                         bf16(V, d);
  CHECK(h.decode_token_bytes == decode);
  CHECK(h.engram_bytes == 2 * (fp8(d * 5, 6144) + 4 * 4 * d));
  // Within 0.01% of every tensor as released (the norms F32 where the file has BF16, the 64-byte
  // rounding), and above it.
  const V41Info info = ComputeV41Info(c);
  CHECK(h.decode_token_bytes > info.active_decode_bytes);
  CHECK(h.decode_token_bytes - info.active_decode_bytes < info.active_decode_bytes / 10000);
  MESSAGE("Cedar as-stored: holds " << h.arena_bytes + h.engram_bytes << " bytes, a decode token reads " << h.decode_token_bytes);
}
