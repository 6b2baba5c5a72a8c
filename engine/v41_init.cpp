#include "engine/v41_init.h"

#include <xxhash.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <stdexcept>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "engine/pcg64.h"
#include "engine/safetensors.h"
#include "engine/v41_info.h"
#include "kernels/quant_formats.h"

namespace cedar {

namespace {

bool EndsWith(const std::string& s, const std::string& suf) {
  return s.size() >= suf.size() && s.compare(s.size() - suf.size(), suf.size(), suf) == 0;
}

std::string Expand(const std::string& pattern, int64_t e) {
  const size_t brace = pattern.find("{E}");
  return brace == std::string::npos ? pattern : pattern.substr(0, brace) + std::to_string(e) + pattern.substr(brace + 3);
}

// The logical float values of one tensor ([rows, cols]; packed FP4 has 2 * the stored columns).
std::vector<float> RandomValues(const V41Config& c, const std::string& name, int64_t rows, int64_t cols, uint64_t seed) {
  std::vector<float> v(size_t(rows * cols));
  std::mt19937_64 rng(seed ^ XXH3_64bits(name.data(), name.size()));
  auto normal = [&](double sd) {
    std::normal_distribution<float> dist(0.0f, float(sd));
    for (float& x : v) x = dist(rng);
  };
  const int64_t hc = c.hc_mult;
  if (EndsWith(name, "norm.weight")) {
    std::fill(v.begin(), v.end(), 1.0f);
  } else if (EndsWith(name, "attn_sink")) {
    normal(0.5);
  } else if (EndsWith(name, "gate.bias") || EndsWith(name, "gate.bias_vl")) {
    normal(0.01);
  } else if (EndsWith(name, "_fn")) {  // mHC Phi [(2+hc) hc, hc d]: mu = Phi x / rms(x) is O(1)
    normal(1.0 / std::sqrt(double(hc * c.dim)));
  } else if (EndsWith(name, "_scale") && name.find(".hc_") != std::string::npos) {
    std::uniform_real_distribution<float> u(0.05f, 0.15f);
    for (float& x : v) x = u(rng);
  } else if (EndsWith(name, "_base")) {
    normal(0.3);
    for (int64_t i = 0; i < hc; ++i) v[size_t(2 * hc + i * hc + i)] += 4.0f;  // comb logits favour the identity
  } else if (name == "embed.weight" || EndsWith(name, "markov_head.embed.weight") || EndsWith(name, "engram.embed.weight")) {
    normal(1.0);
  } else {
    double sd = 1.0 / std::sqrt(double(cols));
    if (EndsWith(name, "wo_b.weight") || EndsWith(name, "w2.weight")) sd /= std::sqrt(2.0 * c.n_layers);
    normal(sd);
  }
  return v;
}

std::string ShardName(int i, int n) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "model-%05d-of-%05d.safetensors", i, n);
  return buf;
}

// The shard group of a tensor: 0 embed, 1..L layer l-1 (its dense and expert tensors), then one per
// DSpark block, one per Engram table, and last the final norm + head (release: one layer per shard,
// embed apart, Engram tables in their own shards).
int GroupOf(const V41Config& c, const V41TensorSpec& t) {
  const int L = c.n_layers, M = c.n_mtp_layers;
  if (t.name == "embed.weight") return 0;
  if (t.name.rfind("mtp.", 0) == 0) return 1 + L + std::stoi(t.name.substr(4));
  if (t.name.find(".engram.embed.") != std::string::npos) {
    int idx = 0;
    while (c.engram_layer_ids[size_t(idx)] != t.layer) ++idx;
    return 1 + L + M + idx;
  }
  if (t.layer >= 0) return 1 + t.layer;
  return 1 + L + M + int(c.engram_layer_ids.size());  // head.weight, norm.weight
}

}  // namespace

std::vector<std::string> V41PresetNames() { return {"v41-tiny", "v41-tiny-engram", "v41-small"}; }

bool V41PresetConfig(const std::string& name, V41Config* out) {
  V41Config c;
  c.spelling = "hf";
  c.vocab_size = 129280;  // the released tokenizer's ids
  c.norm_eps = 1e-20;
  c.rope_theta = 10000;
  c.compress_rope_theta = 160000;
  c.hc_mult = 4;
  c.hc_sinkhorn_iters = 20;
  c.hc_eps = 1e-6;
  c.score_func = "sqrtsoftplus";
  c.norm_topk_prob = true;
  c.route_scale = 1.5;
  c.swiglu_limit = 10;
  c.n_shared_experts = 1;
  c.candidate_block_size = 8;
  c.image_token_id = 129264;
  c.n_mtp_layers = 1;
  c.dspark_block_size = 5;
  c.dspark_noise_token_id = 128799;
  if (name == "v41-tiny" || name == "v41-tiny-engram") {
    c.dim = 64; c.n_layers = 6; c.n_heads = 4; c.head_dim = 32; c.rope_dim = 8; c.q_lora_rank = 32;
    c.o_lora_rank = 32; c.o_groups = 2; c.window = 8;
    c.rope_factor = 4; c.original_seq_len = 1024; c.beta_fast = 32; c.beta_slow = 1; c.max_positions = 4096;
    c.compress_ratios = {0, 2, 2, 1, 1, 1, 0};  // + one DSpark block
    c.kv_source_layers = {1, 3};
    c.index_source_layers = {1, 3, 5};
    c.candidate_source_layer = 3; c.candidate_topk_blocks = 12;
    c.index_n_heads = 2; c.index_head_dim = 32; c.index_topk = 8;
    c.moe_inter_dim = 64; c.n_routed_experts = 4; c.n_activated_experts = 2;
    c.dspark_target_layer_ids = {3, 4, 5}; c.dspark_markov_rank = 8;
    c.dspark_n_routed_experts = 4; c.dspark_n_activated_experts = 2;
    if (name == "v41-tiny-engram") {
      c.engram_layer_ids = {1};
      c.engram_max_ngram = 3; c.engram_vocab_size = 1000; c.engram_n_heads = 2; c.engram_head_dim = 32;
      c.engram_pad_id = 2; c.engram_compressed_vocab = 99092;  // the released tokenizer's class count (init writes it)
      c.engram_num_embeddings = ComputeEngramHashConstants(c.engram_layer_ids, c.engram_max_ngram, c.engram_n_heads,
                                                           c.engram_vocab_size, c.engram_compressed_vocab).table_rows;
    }
  } else if (name == "v41-small") {
    c.dim = 512; c.n_layers = 24; c.n_heads = 8; c.head_dim = 128; c.rope_dim = 32; c.q_lora_rank = 256;
    c.o_lora_rank = 256; c.o_groups = 2; c.window = 128;
    c.rope_factor = 16; c.original_seq_len = 4096; c.beta_fast = 32; c.beta_slow = 1; c.max_positions = 65536;
    c.compress_ratios.assign(25, 0);
    for (int l = 2; l < 12; ++l) c.compress_ratios[size_t(l)] = 2;
    for (int l = 12; l < 24; ++l) c.compress_ratios[size_t(l)] = 1;
    c.kv_source_layers = {2, 7, 12};
    c.index_source_layers = {2, 7, 12, 15, 18, 21};
    c.candidate_source_layer = 12; c.candidate_topk_blocks = 256;
    c.index_n_heads = 4; c.index_head_dim = 64; c.index_topk = 512;
    c.moe_inter_dim = 320; c.n_routed_experts = 8; c.n_activated_experts = 2;
    c.dspark_target_layer_ids = {21, 22, 23}; c.dspark_markov_rank = 64;
    c.dspark_n_routed_experts = 8; c.dspark_n_activated_experts = 2;
  } else {
    return false;
  }
  ValidateV41Config(c, name);
  *out = c;
  return true;
}

nlohmann::json V41ConfigToHfJson(const V41Config& c) {
  using nlohmann::json;
  json t = {{"model_type", "deepseek_v41_text"},
            {"vocab_size", c.vocab_size},
            {"hidden_size", c.dim},
            {"moe_intermediate_size", c.moe_inter_dim},
            {"num_hidden_layers", c.n_layers},
            {"num_attention_heads", c.n_heads},
            {"num_key_value_heads", 1},
            {"head_dim", c.head_dim},
            {"qk_rope_head_dim", c.rope_dim},
            {"q_lora_rank", c.q_lora_rank},
            {"o_lora_rank", c.o_lora_rank},
            {"o_groups", c.o_groups},
            {"hidden_act", "silu"},
            {"swiglu_limit", c.swiglu_limit},
            {"rms_norm_eps", c.norm_eps},
            {"attention_bias", false},
            {"tie_word_embeddings", false},
            {"max_position_embeddings", c.max_positions},
            {"rope_theta", c.rope_theta},
            {"n_routed_experts", c.n_routed_experts},
            {"n_shared_experts", c.n_shared_experts},
            {"num_experts_per_tok", c.n_activated_experts},
            {"scoring_func", c.score_func},
            {"topk_method", "noaux_tc"},
            {"norm_topk_prob", c.norm_topk_prob},
            {"routed_scaling_factor", c.route_scale},
            {"sliding_window", c.window},
            {"compress_ratios", c.compress_ratios},
            {"compress_rope_theta", c.compress_rope_theta},
            {"kv_source_layer_ids", c.kv_source_layers},
            {"index_source_layer_ids", c.index_source_layers},
            {"index_n_heads", c.index_n_heads},
            {"index_head_dim", c.index_head_dim},
            {"index_topk", c.index_topk},
            {"candidate_source_layer_id", c.candidate_source_layer},
            {"candidate_topk_blocks", c.candidate_topk_blocks},
            {"candidate_block_size", c.candidate_block_size},
            {"hc_mult", c.hc_mult},
            {"hc_sinkhorn_iters", c.hc_sinkhorn_iters},
            {"hc_eps", c.hc_eps},
            {"engram_layer_ids", c.engram_layer_ids},
            {"engram_num_embeddings", c.engram_num_embeddings}};
  if (c.rope_factor != 1)
    t["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", c.rope_factor}, {"beta_fast", c.beta_fast}, {"beta_slow", c.beta_slow},
                         {"original_max_position_embeddings", c.original_seq_len}};
  if (!c.engram_layer_ids.empty()) {
    t["engram_max_ngram_size"] = c.engram_max_ngram;
    t["engram_vocab_size"] = c.engram_vocab_size;
    t["engram_n_heads"] = c.engram_n_heads;
    t["engram_head_dim"] = c.engram_head_dim;
    t["engram_pad_token_id"] = c.engram_pad_id;
    t["engram_compressed_vocab_size"] = c.engram_compressed_vocab;
  }
  t["num_nextn_predict_layers"] = c.n_mtp_layers;
  if (c.n_mtp_layers > 0) {
    t["dspark_block_size"] = c.dspark_block_size;
    t["dspark_noise_token_id"] = c.dspark_noise_token_id;
    t["dspark_target_layer_ids"] = c.dspark_target_layer_ids;
    t["dspark_markov_rank"] = c.dspark_markov_rank;
    t["dspark_n_routed_experts"] = c.dspark_n_routed_experts;
    t["dspark_num_experts_per_tok"] = c.dspark_n_activated_experts;
  }
  json j = {{"architectures", {"DeepseekV41ForCausalLM"}},
            {"model_type", "deepseek_v41"},
            {"dtype", "bfloat16"},
            {"bos_token_id", 0},
            {"eos_token_id", 1},
            {"pad_token_id", 2},
            {"image_token_id", c.image_token_id},
            {"text_config", t}};
  if (c.weight_dtype != "bf16")
    j["quantization_config"] = {{"quant_method", c.weight_dtype}, {"activation_scheme", "dynamic"},
                                {"weight_block_size", {c.weight_block_rows, c.weight_block_cols}}, {"scale_fmt", c.scale_fmt},
                                {"expert_dtype", c.expert_dtype}};
  return j;
}

int64_t WriteReleasedModel(const V41Config& c, uint64_t seed, const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw std::runtime_error("init: cannot create " + dir + ": " + ec.message());
  const std::vector<V41TensorSpec> specs = V41Tensors(c);
  std::map<std::string, const V41TensorSpec*> by_name;
  for (const V41TensorSpec& t : specs) by_name[t.name] = &t;
  const int n_groups = 2 + c.n_layers + c.n_mtp_layers + int(c.engram_layer_ids.size());
  std::vector<std::vector<const V41TensorSpec*>> groups(static_cast<size_t>(n_groups));
  for (const V41TensorSpec& t : specs) groups[size_t(GroupOf(c, t))].push_back(&t);
  nlohmann::json index;
  index["weight_map"] = nlohmann::json::object();
  int64_t total = 0;
  for (int g = 0; g < n_groups; ++g) {
    const std::string shard = ShardName(g + 1, n_groups);
    SafetensorsWriter w;
    auto add = [&](const std::string& name, DType dt, const std::vector<int64_t>& shape, const void* data, size_t n) {
      w.AddRaw(name, dt, shape, data, n);
      index["weight_map"][name] = shard;
      total += int64_t(n);
    };
    for (const V41TensorSpec* t : groups[size_t(g)]) {
      if (t->is_scale) continue;  // written with its weight
      for (int64_t e = 0; e < t->count; ++e) {
        const std::string name = Expand(t->name, e);
        const int64_t rows = t->shape[0], stored_cols = t->shape.size() > 1 ? t->shape[1] : 1;
        if (t->dtype == DType::F32 || t->dtype == DType::BF16) {
          const std::vector<float> v = RandomValues(c, name, rows, stored_cols, seed);
          if (t->dtype == DType::F32) {
            add(name, DType::F32, t->shape, v.data(), v.size() * 4);
          } else {
            std::vector<uint16_t> b(v.size());
            for (size_t i = 0; i < v.size(); ++i) b[i] = FloatToBF16(v[i]);
            add(name, DType::BF16, t->shape, b.data(), b.size() * 2);
          }
          continue;
        }
        // A quantised weight: its scale spec is `<prefix>.scale` beside it.
        const std::string prefix = t->name.substr(0, t->name.size() - std::string(".weight").size());
        const V41TensorSpec* s = by_name.at(prefix + ".scale");
        const std::string sname = Expand(s->name, e);
        const int64_t cols = t->dtype == DType::I8 ? 2 * stored_cols : stored_cols;
        const std::vector<float> v = RandomValues(c, name, rows, cols, seed);
        std::vector<uint8_t> q(size_t(t->Elements())), sc(size_t(s->Elements()));
        if (t->dtype == DType::I8) {
          kernels::QuantFp4Packed(v.data(), rows, cols, int(cols / s->shape[1]), q.data(), sc.data());
        } else {
          const int br = int((rows + s->shape[0] - 1) / s->shape[0]), bc = int((cols + s->shape[1] - 1) / s->shape[1]);
          kernels::QuantFp8Blocks(v.data(), rows, cols, br, bc, q.data(), sc.data());
        }
        add(name, t->dtype, t->shape, q.data(), q.size());
        add(sname, DType::F8_E8M0, s->shape, sc.data(), sc.size());
      }
    }
    w.SetMetadata("format", "pt");
    w.Write(dir + "/" + shard);
  }
  index["metadata"]["total_size"] = total;
  std::ofstream(dir + "/model.safetensors.index.json") << index.dump(2) << "\n";
  std::ofstream cfg(dir + "/config.json");
  if (!cfg) throw std::runtime_error("init: cannot write " + dir + "/config.json");
  cfg << V41ConfigToHfJson(c).dump(2) << "\n";
  spdlog::debug("init: released layout in {}: {} shards, {} bytes", dir, n_groups, total);
  return total;
}

}  // namespace cedar
