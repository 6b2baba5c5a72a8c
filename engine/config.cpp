#include "engine/config.h"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

namespace cedar {
namespace {

bool Contains(const std::vector<int>& v, int x) { return std::find(v.begin(), v.end(), x) != v.end(); }

int LatestAtOrBefore(const std::vector<int>& sorted, int layer) {
  int best = -1;
  for (int s : sorted)
    if (s <= layer) best = std::max(best, s);
  return best;
}

template <typename T>
void Read(const nlohmann::json& j, const char* key, T* out, bool required) {
  if (!j.contains(key)) {
    if (required) throw std::runtime_error(std::string("config: missing field '") + key + "'");
    return;
  }
  try {
    *out = j.at(key).get<T>();
  } catch (const std::exception& e) {
    throw std::runtime_error(std::string("config: field '") + key + "' has the wrong type (found " +
                             j.at(key).dump() + ")");
  }
}

}  // namespace

bool ModelConfig::IsKvSource(int layer) const { return Contains(kv_source_layers, layer); }
bool ModelConfig::IsIndexSource(int layer) const { return Contains(index_source_layers, layer); }
bool ModelConfig::IsEngramLayer(int layer) const { return Contains(engram_layers, layer); }

int ModelConfig::PoolOf(int layer) const {
  if (RatioOf(layer) == 0) return -1;
  return LatestAtOrBefore(kv_source_layers, layer);
}

int ModelConfig::IndexSourceOf(int layer) const {
  if (RatioOf(layer) == 0) return -1;
  return LatestAtOrBefore(index_source_layers, layer);
}

bool ModelConfig::UsesCandidates(int layer) const {
  return candidate_source_layer > 0 && IsIndexSource(layer) && layer > n_encoder_layers &&
         layer > candidate_source_layer;
}

int64_t ModelConfig::StaircaseLength() const {
  return int64_t(window) + int64_t(n_layers - n_encoder_layers - 1) * (window - 1);
}

std::string ModelConfig::Validate() const {
  std::ostringstream err;
  auto bad = [&](const std::string& field, const std::string& expected, const std::string& found) {
    err << field << ": expected " << expected << ", found " << found << "\n";
  };
  auto positive = [&](const char* name, long v) {
    if (v <= 0) bad(name, "> 0", std::to_string(v));
  };
  positive("vocab_size", vocab_size);
  positive("dim", dim);
  positive("n_layers", n_layers);
  positive("n_heads", n_heads);
  positive("head_dim", head_dim);
  positive("q_lora_rank", q_lora_rank);
  positive("o_groups", o_groups);
  positive("o_group_rank", o_group_rank);
  positive("window", window);
  positive("moe_inter_dim", moe_inter_dim);
  positive("max_seq_len", max_seq_len);
  if (chat_format != "cedar" && chat_format != "deepseek_v41")
    bad("chat_format", "\"cedar\" or \"deepseek_v41\"", "\"" + chat_format + "\"");
  if (!(norm_eps > 0)) bad("norm_eps", "> 0", std::to_string(norm_eps));
  if (!(rope_theta > 0) || !(compress_rope_theta > 0)) bad("rope_theta/compress_rope_theta", "> 0", "a non-positive base");
  if (n_encoder_layers <= 0 || n_encoder_layers >= n_layers)
    bad("n_encoder_layers", "0 < E < n_layers (" + std::to_string(n_layers) + ")", std::to_string(n_encoder_layers));
  if (int(compress_ratios.size()) != n_layers) {
    bad("compress_ratios", std::to_string(n_layers) + " entries (one per layer)", std::to_string(compress_ratios.size()));
    return err.str();  // everything below indexes by layer
  }
  if (!err.str().empty()) return err.str();
  for (int l = 0; l < n_layers; ++l)
    if (compress_ratios[l] != 0 && compress_ratios[l] != 1 && compress_ratios[l] != 2)
      bad("compress_ratios[" + std::to_string(l) + "]", "0, 1 or 2", std::to_string(compress_ratios[l]));
  auto check_layers = [&](const char* name, const std::vector<int>& v) {
    for (size_t i = 0; i < v.size(); ++i) {
      if (v[i] < 0 || v[i] >= n_layers) bad(name, "layers in [0, n_layers)", std::to_string(v[i]));
      if (i > 0 && v[i] <= v[i - 1]) bad(name, "strictly ascending layers", "layer " + std::to_string(v[i]) + " after " + std::to_string(v[i - 1]));
    }
  };
  check_layers("kv_source_layers", kv_source_layers);
  check_layers("index_source_layers", index_source_layers);
  if (!err.str().empty()) return err.str();
  const int E = n_encoder_layers;
  if (compress_ratios[E] != 1) bad("compress_ratios[E=" + std::to_string(E) + "]", "1 (layer E makes the decoder pool)", std::to_string(compress_ratios[E]));
  if (!IsKvSource(E)) bad("kv_source_layers", "to contain layer E=" + std::to_string(E), "it does not");
  for (int s : kv_source_layers) {
    if (s > E) bad("kv_source_layers", "no kv source after E=" + std::to_string(E), "layer " + std::to_string(s));
    if (compress_ratios[s] == 0) bad("kv_source_layers", "sources with ratio > 0", "layer " + std::to_string(s) + " with ratio 0");
    if (!IsIndexSource(s)) bad("index_source_layers", "every kv source (layer " + std::to_string(s) + ") to be an index source", "it is not");
  }
  const int first_source = kv_source_layers.empty() ? n_layers : kv_source_layers.front();
  for (int l = 0; l < n_layers; ++l) {
    const int m = compress_ratios[l];
    if (m == 0) continue;
    if (l < first_source) {
      bad("compress_ratios[" + std::to_string(l) + "]", "0 before the first kv source", std::to_string(m));
      continue;
    }
    const int src = LatestAtOrBefore(kv_source_layers, l);
    if (src >= 0 && compress_ratios[src] != m)
      bad("compress_ratios[" + std::to_string(l) + "]", "the ratio of its kv source layer " + std::to_string(src) + " (" + std::to_string(compress_ratios[src]) + ")", std::to_string(m));
  }
  for (int s : index_source_layers)
    if (compress_ratios[s] == 0) bad("index_source_layers", "index sources with ratio > 0", "layer " + std::to_string(s) + " with ratio 0");
  if (candidate_source_layer > 0) {
    const int c = candidate_source_layer;
    if (!IsIndexSource(c)) bad("candidate_source_layer", "an index source", "layer " + std::to_string(c));
    for (int s : kv_source_layers)
      if (s > c) bad("candidate_source_layer", "no kv source after it", "kv source " + std::to_string(s));
    if (candidate_block_size <= 0 || candidate_blocks <= 1)
      bad("candidate_blocks/candidate_block_size", "blocks > 1 and block size > 0", std::to_string(candidate_blocks) + "/" + std::to_string(candidate_block_size));
    else if (int64_t(candidate_blocks - 1) * candidate_block_size < index_topk)
      bad("candidate_blocks", "(candidate_blocks - 1) * candidate_block_size >= index_topk (" + std::to_string(index_topk) + ")",
          std::to_string(int64_t(candidate_blocks - 1) * candidate_block_size));
  }
  if (!kv_source_layers.empty()) {
    positive("index_heads", index_heads);
    positive("index_head_dim", index_head_dim);
    positive("index_topk", index_topk);
  }
  if (n_heads % o_groups != 0) bad("n_heads", "divisible by o_groups (" + std::to_string(o_groups) + ")", std::to_string(n_heads));
  if (rope_dim < 0 || rope_dim % 2 != 0 || rope_dim >= head_dim)
    bad("rope_dim", "even and < head_dim (" + std::to_string(head_dim) + ")", std::to_string(rope_dim));
  if (!kv_source_layers.empty() && rope_dim > index_head_dim)
    bad("rope_dim", "<= index_head_dim (" + std::to_string(index_head_dim) + ")", std::to_string(rope_dim));
  if (n_shared_experts != 0 && n_shared_experts != 1) bad("n_shared_experts", "0 or 1", std::to_string(n_shared_experts));
  if (n_routed_experts < 0) bad("n_routed_experts", ">= 0", std::to_string(n_routed_experts));
  if (n_routed_experts > 0 && (experts_per_token <= 0 || experts_per_token > n_routed_experts))
    bad("experts_per_token", "in [1, n_routed_experts=" + std::to_string(n_routed_experts) + "]", std::to_string(experts_per_token));
  ValidateReleasedParts(&err);
  return err.str();
}

void ModelConfig::ValidateReleasedParts(std::ostringstream* errp) const {
  std::ostringstream& err = *errp;
  auto bad = [&](const std::string& field, const std::string& expected, const std::string& found) {
    err << field << ": expected " << expected << ", found " << found << "\n";
  };
  if (weight_layout != "cedar" && weight_layout != "deepseek_v41")
    bad("weight_layout", "\"cedar\" or \"deepseek_v41\"", "\"" + weight_layout + "\"");
  if (hc_mult < 1) bad("hc_mult", ">= 1", std::to_string(hc_mult));
  if (hc_mult > 1 && hc_sinkhorn_iters < 1) bad("hc_sinkhorn_iters", ">= 1", std::to_string(hc_sinkhorn_iters));
  if (hc_mult > 1 && !(hc_eps >= 0)) bad("hc_eps", ">= 0", std::to_string(hc_eps));
  if (!(rope_factor >= 1)) bad("rope_factor", ">= 1 (1 = plain RoPE)", std::to_string(rope_factor));
  if (rope_factor > 1 && rope_original_seq_len <= 0)
    bad("rope_original_seq_len", "> 0 when rope_factor > 1", std::to_string(rope_original_seq_len));
  if (score_func != "sqrtsoftplus" && score_func != "sigmoid" && score_func != "softmax")
    bad("score_func", "\"sqrtsoftplus\", \"sigmoid\" or \"softmax\"", "\"" + score_func + "\"");
  if (kv_dtype != "f32" && kv_dtype != "released") bad("kv_dtype", "\"f32\" or \"released\"", "\"" + kv_dtype + "\"");
  // Released KV rounds rows in blocks of 32 (window, index keys/queries) and 16 (pool entries).
  if (kv_dtype == "released" && head_dim % 32 != 0)
    bad("head_dim", "a multiple of 32 with kv_dtype \"released\"", std::to_string(head_dim));
  if (kv_dtype == "released" && !kv_source_layers.empty() && index_head_dim % 32 != 0)
    bad("index_head_dim", "a multiple of 32 with kv_dtype \"released\"", std::to_string(index_head_dim));
  if (engram_layers.size() != engram_table_rows.size())
    bad("engram_table_rows", std::to_string(engram_layers.size()) + " entries (one per Engram layer)", std::to_string(engram_table_rows.size()));
  for (int l : engram_layers)
    if (l < 0 || l >= n_encoder_layers)
      bad("engram_layers", "layers before E=" + std::to_string(n_encoder_layers) + " (decoder replay needs it)", std::to_string(l));
  if (!engram_layers.empty() && (engram_max_ngram < 2 || engram_n_heads < 1 || engram_head_dim < 1))
    bad("engram_max_ngram/engram_n_heads/engram_head_dim", ">= 2 / >= 1 / >= 1",
        std::to_string(engram_max_ngram) + "/" + std::to_string(engram_n_heads) + "/" + std::to_string(engram_head_dim));
  if (n_mtp_layers < 0) bad("n_mtp_layers", ">= 0", std::to_string(n_mtp_layers));
}

ModelConfig ConfigFromJson(const nlohmann::json& j) {
  if (!j.is_object()) throw std::runtime_error("config: expected a JSON object, found " + std::string(j.type_name()));
  ModelConfig c;
  Read(j, "vocab_size", &c.vocab_size, true);
  Read(j, "dim", &c.dim, true);
  Read(j, "n_layers", &c.n_layers, true);
  Read(j, "n_encoder_layers", &c.n_encoder_layers, true);
  Read(j, "n_heads", &c.n_heads, true);
  Read(j, "head_dim", &c.head_dim, true);
  Read(j, "rope_dim", &c.rope_dim, true);
  Read(j, "q_lora_rank", &c.q_lora_rank, true);
  Read(j, "o_groups", &c.o_groups, true);
  Read(j, "o_group_rank", &c.o_group_rank, true);
  Read(j, "window", &c.window, true);
  Read(j, "compress_ratios", &c.compress_ratios, true);
  Read(j, "kv_source_layers", &c.kv_source_layers, true);
  Read(j, "index_source_layers", &c.index_source_layers, true);
  Read(j, "index_heads", &c.index_heads, false);
  Read(j, "index_head_dim", &c.index_head_dim, false);
  Read(j, "index_topk", &c.index_topk, false);
  Read(j, "candidate_source_layer", &c.candidate_source_layer, false);
  Read(j, "candidate_blocks", &c.candidate_blocks, false);
  Read(j, "candidate_block_size", &c.candidate_block_size, false);
  Read(j, "n_routed_experts", &c.n_routed_experts, false);
  Read(j, "n_shared_experts", &c.n_shared_experts, false);
  Read(j, "experts_per_token", &c.experts_per_token, false);
  Read(j, "moe_inter_dim", &c.moe_inter_dim, true);
  Read(j, "route_scale", &c.route_scale, false);
  Read(j, "swiglu_limit", &c.swiglu_limit, false);
  Read(j, "rope_theta", &c.rope_theta, false);
  Read(j, "compress_rope_theta", &c.compress_rope_theta, false);
  Read(j, "norm_eps", &c.norm_eps, false);
  Read(j, "max_seq_len", &c.max_seq_len, false);
  Read(j, "chat_format", &c.chat_format, false);
  Read(j, "weight_layout", &c.weight_layout, false);
  Read(j, "hc_mult", &c.hc_mult, false);
  Read(j, "hc_sinkhorn_iters", &c.hc_sinkhorn_iters, false);
  Read(j, "hc_eps", &c.hc_eps, false);
  Read(j, "rope_factor", &c.rope_factor, false);
  Read(j, "rope_original_seq_len", &c.rope_original_seq_len, false);
  Read(j, "rope_beta_fast", &c.rope_beta_fast, false);
  Read(j, "rope_beta_slow", &c.rope_beta_slow, false);
  Read(j, "score_func", &c.score_func, false);
  Read(j, "norm_topk_prob", &c.norm_topk_prob, false);
  Read(j, "kv_dtype", &c.kv_dtype, false);
  Read(j, "engram_layers", &c.engram_layers, false);
  Read(j, "engram_table_rows", &c.engram_table_rows, false);
  Read(j, "engram_max_ngram", &c.engram_max_ngram, false);
  Read(j, "engram_n_heads", &c.engram_n_heads, false);
  Read(j, "engram_head_dim", &c.engram_head_dim, false);
  Read(j, "engram_vocab_size", &c.engram_vocab_size, false);
  Read(j, "engram_compressed_vocab", &c.engram_compressed_vocab, false);
  Read(j, "engram_pad_id", &c.engram_pad_id, false);
  Read(j, "n_mtp_layers", &c.n_mtp_layers, false);
  return c;
}

nlohmann::json ConfigToJson(const ModelConfig& c) {
  nlohmann::json j{
      {"vocab_size", c.vocab_size}, {"dim", c.dim}, {"n_layers", c.n_layers},
      {"n_encoder_layers", c.n_encoder_layers}, {"n_heads", c.n_heads}, {"head_dim", c.head_dim},
      {"rope_dim", c.rope_dim}, {"q_lora_rank", c.q_lora_rank}, {"o_groups", c.o_groups},
      {"o_group_rank", c.o_group_rank}, {"window", c.window}, {"compress_ratios", c.compress_ratios},
      {"kv_source_layers", c.kv_source_layers}, {"index_source_layers", c.index_source_layers},
      {"index_heads", c.index_heads}, {"index_head_dim", c.index_head_dim}, {"index_topk", c.index_topk},
      {"candidate_source_layer", c.candidate_source_layer}, {"candidate_blocks", c.candidate_blocks},
      {"candidate_block_size", c.candidate_block_size}, {"n_routed_experts", c.n_routed_experts},
      {"n_shared_experts", c.n_shared_experts}, {"experts_per_token", c.experts_per_token},
      {"moe_inter_dim", c.moe_inter_dim}, {"route_scale", c.route_scale},
      {"swiglu_limit", c.swiglu_limit}, {"rope_theta", c.rope_theta},
      {"compress_rope_theta", c.compress_rope_theta}, {"norm_eps", c.norm_eps},
      {"max_seq_len", c.max_seq_len}};
  // Written only when not the default, so existing models keep their config JSON (and with it
  // the model fingerprint that keys on-disk caches).
  if (c.chat_format != "cedar") j["chat_format"] = c.chat_format;
  const ModelConfig def;
  if (c.weight_layout != def.weight_layout) j["weight_layout"] = c.weight_layout;
  if (c.hc_mult != def.hc_mult) {
    j["hc_mult"] = c.hc_mult;
    j["hc_sinkhorn_iters"] = c.hc_sinkhorn_iters;
    j["hc_eps"] = c.hc_eps;
  }
  if (c.rope_factor != def.rope_factor) {
    j["rope_factor"] = c.rope_factor;
    j["rope_original_seq_len"] = c.rope_original_seq_len;
    j["rope_beta_fast"] = c.rope_beta_fast;
    j["rope_beta_slow"] = c.rope_beta_slow;
  }
  if (c.score_func != def.score_func) j["score_func"] = c.score_func;
  if (c.norm_topk_prob != def.norm_topk_prob) j["norm_topk_prob"] = c.norm_topk_prob;
  if (c.kv_dtype != def.kv_dtype) j["kv_dtype"] = c.kv_dtype;
  if (!c.engram_layers.empty()) {
    j["engram_layers"] = c.engram_layers;
    j["engram_table_rows"] = c.engram_table_rows;
    j["engram_max_ngram"] = c.engram_max_ngram;
    j["engram_n_heads"] = c.engram_n_heads;
    j["engram_head_dim"] = c.engram_head_dim;
    j["engram_vocab_size"] = c.engram_vocab_size;
    j["engram_compressed_vocab"] = c.engram_compressed_vocab;
    j["engram_pad_id"] = c.engram_pad_id;
  }
  if (c.n_mtp_layers != def.n_mtp_layers) j["n_mtp_layers"] = c.n_mtp_layers;
  return j;
}

ModelConfig LoadConfigFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("config: cannot open " + path);
  nlohmann::json j;
  try {
    in >> j;
  } catch (const std::exception& e) {
    throw std::runtime_error("config: " + path + " is not valid JSON: " + e.what());
  }
  ModelConfig c;
  try {
    c = ConfigFromJson(j);
  } catch (const std::exception& e) {
    throw std::runtime_error(path + ": " + e.what());
  }
  const std::string problems = c.Validate();
  if (!problems.empty()) throw std::runtime_error("config: " + path + " is invalid:\n" + problems);
  return c;
}

std::vector<std::string> PresetNames() { return {"tiny", "tiny-hc", "tiny-kvq", "small", "medium", "flash"}; }

std::string JoinNames(const std::vector<std::string>& names, const char* sep) {
  std::string s;
  for (const std::string& n : names) s += (s.empty() ? "" : sep) + n;
  return s;
}

std::string UnknownPresetMessage(const std::string& name, const std::vector<std::string>& more) {
  std::vector<std::string> names = PresetNames();
  names.insert(names.end(), more.begin(), more.end());
  return "unknown preset '" + name + "' (expected one of " + JoinNames(names, ", ") + ")";
}

bool PresetConfig(const std::string& name, ModelConfig* out) {
  if (name == "tiny-kvq") {
    // tiny with KV stored as released (FP8 window, FP4 pool, MXFP4 index keys); the index width
    // grows to 32, the smallest MXFP4 block.
    PresetConfig("tiny", out);
    out->index_head_dim = 32;
    out->kv_dtype = "released";
    return true;
  }
  ModelConfig c;
  if (name == "tiny-hc") {
    // tiny with the released architecture's switches (issue 21): 4 mHC streams, YaRN on the
    // compressed layers (factor 4; with r = 8 and 1024 original positions the ramp runs over
    // pairs 0..2: pair 0 keeps its frequency, pair 1 is blended (x0.625), pairs 2, 3 divided by 4),
    // sigmoid router scores.
    PresetConfig("tiny", &c);
    c.hc_mult = 4;
    c.rope_factor = 4.0f;
    c.rope_original_seq_len = 1024;
    c.score_func = "sigmoid";
  } else if (name == "tiny") {
    // Every test runs on it in seconds: W = 8, top-k 8, candidate pool active past 96 entries.
    c.vocab_size = 512; c.dim = 64; c.n_layers = 8; c.n_encoder_layers = 4;
    c.n_heads = 4; c.head_dim = 32; c.rope_dim = 8; c.q_lora_rank = 32;
    c.o_groups = 2; c.o_group_rank = 32; c.window = 8;
    c.compress_ratios = {0, 2, 2, 2, 1, 1, 1, 1};
    c.kv_source_layers = {1, 3, 4};
    c.index_source_layers = {1, 3, 4, 6};
    c.index_heads = 2; c.index_head_dim = 16; c.index_topk = 8;
    c.candidate_source_layer = 4; c.candidate_blocks = 12; c.candidate_block_size = 8;
    c.n_routed_experts = 4; c.n_shared_experts = 1; c.experts_per_token = 2; c.moe_inter_dim = 64;
    c.route_scale = 1.5f; c.swiglu_limit = 10.0f; c.max_seq_len = 4096;
  } else if (name == "small") {
    // The benchmark model: ~130M parameters, the real W = 128 and top-k 512.
    c.vocab_size = 512; c.dim = 512; c.n_layers = 24; c.n_encoder_layers = 12;
    c.n_heads = 8; c.head_dim = 128; c.rope_dim = 32; c.q_lora_rank = 256;
    c.o_groups = 2; c.o_group_rank = 256; c.window = 128;
    c.compress_ratios.assign(24, 0);
    for (int l = 2; l < 12; ++l) c.compress_ratios[l] = 2;
    for (int l = 12; l < 24; ++l) c.compress_ratios[l] = 1;
    c.kv_source_layers = {2, 7, 12};
    c.index_source_layers = {2, 7, 12, 15, 18, 21};
    c.index_heads = 4; c.index_head_dim = 64; c.index_topk = 512;
    c.candidate_source_layer = 12; c.candidate_blocks = 256; c.candidate_block_size = 8;
    c.n_routed_experts = 8; c.n_shared_experts = 1; c.experts_per_token = 2; c.moe_inter_dim = 320;
    c.route_scale = 1.5f; c.swiglu_limit = 10.0f; c.max_seq_len = 65536;
  } else if (name == "medium") {
    // The GPU benchmark model: ~1.2B parameters (d 2048, 16 layers, 8 routed experts + 1 shared
    // of inter 1024), products large enough to keep a GPU's tensor cores busy; W and top-k as small.
    c.vocab_size = 512; c.dim = 2048; c.n_layers = 16; c.n_encoder_layers = 8;
    c.n_heads = 16; c.head_dim = 256; c.rope_dim = 64; c.q_lora_rank = 1024;
    c.o_groups = 4; c.o_group_rank = 1024; c.window = 128;
    c.compress_ratios.assign(16, 0);
    for (int l = 2; l < 8; ++l) c.compress_ratios[l] = 2;
    for (int l = 8; l < 16; ++l) c.compress_ratios[l] = 1;
    c.kv_source_layers = {2, 5, 8};
    c.index_source_layers = {2, 5, 8, 11, 14};
    c.index_heads = 8; c.index_head_dim = 128; c.index_topk = 512;
    c.candidate_source_layer = 8; c.candidate_blocks = 256; c.candidate_block_size = 8;
    c.n_routed_experts = 8; c.n_shared_experts = 1; c.experts_per_token = 2; c.moe_inter_dim = 1024;
    c.route_scale = 1.5f; c.swiglu_limit = 10.0f; c.max_seq_len = 65536;
  } else if (name == "flash") {
    // DeepSeek-V4.1-Flash (spec §2 table); too large to instantiate here, used by `info`.
    c.vocab_size = 129280; c.dim = 5120; c.n_layers = 40; c.n_encoder_layers = 20;
    c.n_heads = 64; c.head_dim = 512; c.rope_dim = 64; c.q_lora_rank = 1280;
    c.o_groups = 8; c.o_group_rank = 1024; c.window = 128;
    c.compress_ratios.assign(40, 0);
    for (int l = 2; l < 20; ++l) c.compress_ratios[l] = 2;
    for (int l = 20; l < 40; ++l) c.compress_ratios[l] = 1;
    c.kv_source_layers = {2, 8, 14, 20};
    c.index_source_layers = {2, 8, 14, 20, 24, 28, 32, 36};
    c.index_heads = 32; c.index_head_dim = 128; c.index_topk = 512;
    c.candidate_source_layer = 20; c.candidate_blocks = 2048; c.candidate_block_size = 8;
    c.n_routed_experts = 384; c.n_shared_experts = 1; c.experts_per_token = 6; c.moe_inter_dim = 2304;
    c.route_scale = 1.5f; c.swiglu_limit = 10.0f; c.norm_eps = 1e-20f; c.max_seq_len = 1048576;
  } else {
    return false;
  }
  *out = c;
  return true;
}

}  // namespace cedar
