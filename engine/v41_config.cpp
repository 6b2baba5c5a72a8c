#include "engine/v41_config.h"

#include <algorithm>
#include <fstream>
#include <set>
#include <stdexcept>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

namespace cedar {

namespace {

using nlohmann::json;

// Reads keys of one JSON object with the spelling chosen (nested HF name or flat inference name),
// so every message names the key as it appears in the file.
class Reader {
 public:
  Reader(const json& obj, std::string where, std::string prefix, bool flat)
      : obj_(obj), where_(std::move(where)), prefix_(std::move(prefix)), flat_(flat) {}

  const json* Find(const char* nested, const char* flat_name) const {
    const char* key = flat_ ? flat_name : nested;
    if (!key) return nullptr;
    auto it = obj_.find(key);
    return it == obj_.end() ? nullptr : &*it;
  }
  std::string Key(const char* nested, const char* flat_name) const {
    return prefix_ + (flat_ ? flat_name : nested);
  }
  [[noreturn]] void Fail(const std::string& key, const std::string& expected, const json* found) const {
    throw std::invalid_argument(where_ + ": " + key + ": expected " + expected + ", found " + (found ? found->dump() : "nothing (the key is missing)"));
  }
  int64_t Int(const char* nested, const char* flat_name, int64_t min_value, bool required = true, int64_t dflt = 0) const {
    const json* v = Find(nested, flat_name);
    const std::string key = Key(nested, flat_name);
    if (!v) {
      if (required) Fail(key, "an integer >= " + std::to_string(min_value), nullptr);
      return dflt;
    }
    if (!v->is_number_integer() && !(v->is_number_float() && v->get<double>() == double(int64_t(v->get<double>()))))
      Fail(key, "an integer >= " + std::to_string(min_value), v);
    const int64_t x = v->is_number_integer() ? v->get<int64_t>() : int64_t(v->get<double>());
    if (x < min_value) Fail(key, "an integer >= " + std::to_string(min_value), v);
    return x;
  }
  double Num(const char* nested, const char* flat_name, double min_value, bool required = true, double dflt = 0) const {
    const json* v = Find(nested, flat_name);
    const std::string key = Key(nested, flat_name);
    if (!v) {
      if (required) Fail(key, "a number >= " + std::to_string(min_value), nullptr);
      return dflt;
    }
    if (!v->is_number() || v->get<double>() < min_value) Fail(key, "a number >= " + std::to_string(min_value), v);
    return v->get<double>();
  }
  std::string Str(const char* nested, const char* flat_name, bool required = true, const std::string& dflt = "") const {
    const json* v = Find(nested, flat_name);
    if (!v) {
      if (required) Fail(Key(nested, flat_name), "a string", nullptr);
      return dflt;
    }
    if (!v->is_string()) Fail(Key(nested, flat_name), "a string", v);
    return v->get<std::string>();
  }
  bool Bool(const char* nested, const char* flat_name, bool dflt) const {
    const json* v = Find(nested, flat_name);
    if (!v) return dflt;
    if (!v->is_boolean()) Fail(Key(nested, flat_name), "true or false", v);
    return v->get<bool>();
  }
  std::vector<int64_t> Ints(const char* nested, const char* flat_name, int64_t min_value, bool required = true) const {
    const json* v = Find(nested, flat_name);
    const std::string key = Key(nested, flat_name);
    const std::string what = "a list of integers >= " + std::to_string(min_value);
    if (!v) {
      if (required) Fail(key, what, nullptr);
      return {};
    }
    if (!v->is_array()) Fail(key, what, v);
    std::vector<int64_t> out;
    for (const json& e : *v) {
      if (!e.is_number_integer() || e.get<int64_t>() < min_value) Fail(key, what, v);
      out.push_back(e.get<int64_t>());
    }
    return out;
  }
  std::vector<int> SmallInts(const char* nested, const char* flat_name, int64_t min_value, bool required = true) const {
    std::vector<int> out;
    for (int64_t x : Ints(nested, flat_name, min_value, required)) out.push_back(int(x));
    return out;
  }

 private:
  const json& obj_;
  std::string where_, prefix_;
  bool flat_;
};

int LatestAtOrBefore(const std::vector<int>& ids, int l) {
  int best = -1;
  for (int s : ids)
    if (s <= l) best = std::max(best, s);
  return best;
}

}  // namespace

int V41Config::KvSourceOf(int l) const { return LatestAtOrBefore(kv_source_layers, l); }
int V41Config::IndexSourceOf(int l) const { return LatestAtOrBefore(index_source_layers, l); }
bool V41Config::IsKvSource(int l) const { return std::count(kv_source_layers.begin(), kv_source_layers.end(), l) > 0; }
bool V41Config::IsIndexSource(int l) const { return std::count(index_source_layers.begin(), index_source_layers.end(), l) > 0; }
bool V41Config::IsEngramLayer(int l) const { return std::count(engram_layer_ids.begin(), engram_layer_ids.end(), l) > 0; }

bool LooksLikeV41Config(const nlohmann::json& j) {
  if (!j.is_object()) return false;
  if (j.contains("text_config")) return true;
  if (j.value("model_type", "") == "deepseek_v41") return true;
  return j.contains("dim") && j.contains("hc_mult") && j.contains("kv_source_layers");
}

V41Config ParseV41Config(const nlohmann::json& j, const std::string& where) {
  if (!j.is_object()) throw std::invalid_argument(where + ": expected a JSON object, found " + j.dump().substr(0, 80));
  V41Config c;
  const bool nested = j.contains("text_config");
  const bool flat = !nested && j.contains("dim");
  if (!nested && !flat)
    throw std::invalid_argument(where + ": expected the released config.json (with text_config) or inference/config.json (with dim), found neither key");
  c.spelling = nested ? "hf" : "inference";
  if (nested && !j["text_config"].is_object()) throw std::invalid_argument(where + ": text_config: expected an object, found " + j["text_config"].dump().substr(0, 80));
  const json& t = nested ? j["text_config"] : j;
  const Reader r(t, where, nested ? "text_config." : "", flat);
  spdlog::debug("v41 config {}: {} spelling", where, c.spelling);

  c.vocab_size = int(r.Int("vocab_size", "vocab_size", 1));
  c.dim = int(r.Int("hidden_size", "dim", 1));
  c.n_layers = int(r.Int("num_hidden_layers", "n_layers", 1));
  c.n_heads = int(r.Int("num_attention_heads", "n_heads", 1));
  if (nested && r.Find("num_key_value_heads", nullptr) && r.Int("num_key_value_heads", nullptr, 1) != 1)
    r.Fail("text_config.num_key_value_heads", "1 (one shared K=V latent)", r.Find("num_key_value_heads", nullptr));
  c.head_dim = int(r.Int("head_dim", "head_dim", 1));
  c.rope_dim = int(r.Int("qk_rope_head_dim", "rope_head_dim", 0));
  c.q_lora_rank = int(r.Int("q_lora_rank", "q_lora_rank", 1));
  c.o_lora_rank = int(r.Int("o_lora_rank", "o_lora_rank", 1));
  c.o_groups = int(r.Int("o_groups", "o_groups", 1));
  c.window = int(r.Int("sliding_window", "window_size", 1));
  c.norm_eps = r.Num("rms_norm_eps", "norm_eps", 0);
  c.rope_theta = r.Num("rope_theta", "rope_theta", 1);
  c.compress_rope_theta = r.Num("compress_rope_theta", "compress_rope_theta", 1);
  if (nested) {
    const json* rs = r.Find("rope_scaling", nullptr);
    if (rs && !rs->is_null()) {
      if (!rs->is_object()) r.Fail("text_config.rope_scaling", "an object", rs);
      const Reader y(*rs, where, "text_config.rope_scaling.", false);
      const std::string type = y.Str("rope_type", nullptr, false, "yarn");
      if (type != "yarn") y.Fail("text_config.rope_scaling.rope_type", "\"yarn\"", y.Find("rope_type", nullptr));
      c.rope_factor = y.Num("factor", nullptr, 1);
      c.original_seq_len = y.Int("original_max_position_embeddings", nullptr, 1);
      c.beta_fast = y.Num("beta_fast", nullptr, 0);
      c.beta_slow = y.Num("beta_slow", nullptr, 0);
    }
    c.max_positions = r.Int("max_position_embeddings", nullptr, 1);
  } else {
    c.rope_factor = r.Num(nullptr, "rope_factor", 1);
    c.original_seq_len = r.Int(nullptr, "original_seq_len", 0);
    c.beta_fast = r.Num(nullptr, "beta_fast", 0);
    c.beta_slow = r.Num(nullptr, "beta_slow", 0);
    c.max_positions = int64_t(double(c.original_seq_len) * c.rope_factor);
  }
  c.compress_ratios = r.SmallInts("compress_ratios", "compress_ratios", 0);
  c.kv_source_layers = r.SmallInts("kv_source_layer_ids", "kv_source_layers", 0);
  c.index_source_layers = r.SmallInts("index_source_layer_ids", "index_source_layers", 0);
  c.candidate_source_layer = int(r.Int("candidate_source_layer_id", "candidate_source_layer", -1, false, -1));
  c.candidate_topk_blocks = int(r.Int("candidate_topk_blocks", "candidate_topk_blocks", 0, false, 0));
  c.candidate_block_size = int(r.Int("candidate_block_size", "candidate_block_size", 0, false, 0));
  c.index_n_heads = int(r.Int("index_n_heads", "index_n_heads", 1));
  c.index_head_dim = int(r.Int("index_head_dim", "index_head_dim", 1));
  c.index_topk = int(r.Int("index_topk", "index_topk", 1));
  c.hc_mult = int(r.Int("hc_mult", "hc_mult", 1));
  c.hc_sinkhorn_iters = int(r.Int("hc_sinkhorn_iters", "hc_sinkhorn_iters", 0));
  c.hc_eps = r.Num("hc_eps", "hc_eps", 0);
  c.moe_inter_dim = int(r.Int("moe_intermediate_size", "moe_inter_dim", 1));
  c.n_routed_experts = int(r.Int("n_routed_experts", "n_routed_experts", 1));
  c.n_shared_experts = int(r.Int("n_shared_experts", "n_shared_experts", 0));
  c.n_activated_experts = int(r.Int("num_experts_per_tok", "n_activated_experts", 1));
  c.score_func = r.Str("scoring_func", "score_func");
  c.norm_topk_prob = r.Bool("norm_topk_prob", nullptr, true);
  c.route_scale = r.Num("routed_scaling_factor", "route_scale", 0);
  c.swiglu_limit = r.Num("swiglu_limit", "swiglu_limit", 0, false, 0);
  c.engram_layer_ids = r.SmallInts("engram_layer_ids", "engram_layer_ids", 0, false);
  c.engram_num_embeddings = r.Ints("engram_num_embeddings", "engram_num_embeddings", 1, false);
  const bool engram = !c.engram_layer_ids.empty();
  c.engram_max_ngram = int(r.Int("engram_max_ngram_size", "engram_max_ngram_size", 2, engram, 0));
  c.engram_vocab_size = r.Int("engram_vocab_size", "engram_vocab_size", 1, engram, 0);
  c.engram_n_heads = int(r.Int("engram_n_heads", "engram_n_heads", 1, engram, 0));
  c.engram_head_dim = int(r.Int("engram_head_dim", "engram_head_dim", 1, engram, 0));
  c.engram_pad_id = int(r.Int("engram_pad_token_id", "engram_pad_id", 0, engram, 0));
  c.engram_compressed_vocab = r.Int("engram_compressed_vocab_size", "engram_compressed_vocab_size", 1, engram, 0);
  c.n_mtp_layers = int(r.Int("num_nextn_predict_layers", "n_mtp_layers", 0, false, 0));
  const bool dspark = c.n_mtp_layers > 0;
  c.dspark_block_size = int(r.Int("dspark_block_size", "dspark_block_size", 1, dspark, 0));
  c.dspark_noise_token_id = int(r.Int("dspark_noise_token_id", "dspark_noise_token_id", 0, dspark, 0));
  c.dspark_target_layer_ids = r.SmallInts("dspark_target_layer_ids", "dspark_target_layer_ids", 0, dspark);
  c.dspark_markov_rank = int(r.Int("dspark_markov_rank", "dspark_markov_rank", 1, dspark, 0));
  c.dspark_n_routed_experts = int(r.Int("dspark_n_routed_experts", "dspark_n_routed_experts", 1, dspark, 0));
  c.dspark_n_activated_experts = int(r.Int("dspark_num_experts_per_tok", "dspark_n_activated_experts", 1, dspark, 0));

  if (nested) {
    if (j.contains("image_token_id")) c.image_token_id = int(Reader(j, where, "", false).Int("image_token_id", nullptr, 0));
    const auto q = j.find("quantization_config");
    if (q != j.end() && !q->is_null()) {
      if (!q->is_object()) throw std::invalid_argument(where + ": quantization_config: expected an object, found " + q->dump());
      const Reader qr(*q, where, "quantization_config.", false);
      c.weight_dtype = qr.Str("quant_method", nullptr);
      c.expert_dtype = qr.Str("expert_dtype", nullptr, false, "fp8");
      c.scale_fmt = qr.Str("scale_fmt", nullptr, false, "ue8m0");
      const std::vector<int64_t> b = qr.Ints("weight_block_size", nullptr, 1);
      if (b.size() != 2) qr.Fail("quantization_config.weight_block_size", "two block sizes [rows, cols]", qr.Find("weight_block_size", nullptr));
      c.weight_block_rows = int(b[0]);
      c.weight_block_cols = int(b[1]);
    } else {
      // A config without quantization_config describes BF16/F32 weights.
      c.weight_dtype = "bf16";
      c.expert_dtype = "bf16";
    }
  } else {
    c.image_token_id = int(r.Int(nullptr, "image_token_id", 0, false, -1));
    c.weight_dtype = r.Str(nullptr, "dtype", false, "fp8");
    c.expert_dtype = r.Str(nullptr, "expert_dtype", false, c.weight_dtype);
    spdlog::debug("v41 config {}: the flat spelling has no weight_block_size; using the released 32x32", where);
  }
  ValidateV41Config(c, where);
  return c;
}

void ValidateV41Config(const V41Config& c, const std::string& where) {
  const std::string p = c.spelling == "inference" ? "" : "text_config.";
  auto fail = [&](const std::string& key, const std::string& expected, const std::string& found) {
    throw std::invalid_argument(where + ": " + key + ": expected " + expected + ", found " + found);
  };
  auto list = [](const std::vector<int>& v) {
    std::string s = "[";
    for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
    return s + "]";
  };
  const bool flat = c.spelling == "inference";
  const std::string k_ratios = p + "compress_ratios";
  const std::string k_kv = p + (flat ? "kv_source_layers" : "kv_source_layer_ids");
  const std::string k_idx = p + (flat ? "index_source_layers" : "index_source_layer_ids");
  const std::string k_cand = p + (flat ? "candidate_source_layer" : "candidate_source_layer_id");
  const int L = c.n_layers, total = c.n_layers + c.n_mtp_layers;
  if (int(c.compress_ratios.size()) != total && int(c.compress_ratios.size()) != L)
    fail(k_ratios, std::to_string(total) + " entries (layers + DSpark blocks) or " + std::to_string(L), std::to_string(c.compress_ratios.size()));
  for (size_t l = 0; l < c.compress_ratios.size(); ++l)
    if (c.compress_ratios[l] > 1024) fail(k_ratios, "ratios <= 1024", std::to_string(c.compress_ratios[l]) + " at layer " + std::to_string(l));
  if (c.rope_dim > c.head_dim || c.rope_dim % 2) fail(p + (flat ? "rope_head_dim" : "qk_rope_head_dim"), "an even number <= head_dim " + std::to_string(c.head_dim), std::to_string(c.rope_dim));
  if ((int64_t(c.n_heads) * c.head_dim) % c.o_groups || c.n_heads % c.o_groups) fail(p + "o_groups", "a divisor of the head count " + std::to_string(c.n_heads), std::to_string(c.o_groups));
  if (c.n_activated_experts > c.n_routed_experts) fail(p + (flat ? "n_activated_experts" : "num_experts_per_tok"), "<= n_routed_experts " + std::to_string(c.n_routed_experts), std::to_string(c.n_activated_experts));
  if (c.score_func != "sqrtsoftplus" && c.score_func != "sigmoid" && c.score_func != "softmax") fail(p + (flat ? "score_func" : "scoring_func"), "sqrtsoftplus, sigmoid or softmax", "\"" + c.score_func + "\"");
  std::set<int> kv(c.kv_source_layers.begin(), c.kv_source_layers.end()), idx(c.index_source_layers.begin(), c.index_source_layers.end());
  for (int s : c.kv_source_layers) {
    if (s >= L) fail(k_kv, "backbone layer ids < " + std::to_string(L), list(c.kv_source_layers));
    if (c.RatioOf(s) <= 0) fail(k_kv, "layers with a compress ratio > 0", "layer " + std::to_string(s) + " with ratio " + std::to_string(c.RatioOf(s)));
    if (!idx.count(s)) fail(k_idx, "every kv source " + list(c.kv_source_layers) + " to be an index source", list(c.index_source_layers));
  }
  for (int l = 0; l < L; ++l) {
    if (c.RatioOf(l) == 0) continue;
    const int src = c.KvSourceOf(l);
    if (src < 0) fail(k_kv, "a kv source at or before every compressed layer", "layer " + std::to_string(l) + " (ratio " + std::to_string(c.RatioOf(l)) + ") has none in " + list(c.kv_source_layers));
    if (c.RatioOf(src) != c.RatioOf(l)) fail(k_ratios, "layer " + std::to_string(l) + " to share the ratio of its kv source " + std::to_string(src), std::to_string(c.RatioOf(l)) + " vs " + std::to_string(c.RatioOf(src)));
  }
  for (int s : c.index_source_layers) {
    if (s >= L) fail(k_idx, "backbone layer ids < " + std::to_string(L), list(c.index_source_layers));
    if (c.KvSourceOf(s) < 0) fail(k_idx, "index sources at or after a kv source", "layer " + std::to_string(s) + " before any of " + list(c.kv_source_layers));
  }
  if (c.candidate_source_layer >= 0 && !kv.count(c.candidate_source_layer)) fail(k_cand, "a kv source layer of " + list(c.kv_source_layers) + " or -1", std::to_string(c.candidate_source_layer));
  if (c.engram_layer_ids.size() != c.engram_num_embeddings.size())
    fail(p + "engram_num_embeddings", std::to_string(c.engram_layer_ids.size()) + " entries (one per engram_layer_ids)", std::to_string(c.engram_num_embeddings.size()));
  for (int e : c.engram_layer_ids)
    if (e >= L) fail(p + "engram_layer_ids", "backbone layer ids < " + std::to_string(L), list(c.engram_layer_ids));
  for (int t : c.dspark_target_layer_ids)
    if (t >= L) fail(p + "dspark_target_layer_ids", "backbone layer ids < " + std::to_string(L), list(c.dspark_target_layer_ids));
  if (c.weight_block_rows < 1 || c.weight_block_cols < 1) fail("quantization_config.weight_block_size", "positive sizes", std::to_string(c.weight_block_rows) + "x" + std::to_string(c.weight_block_cols));
  if (c.weight_dtype != "fp8" && c.weight_dtype != "bf16") fail(flat ? "dtype" : "quantization_config.quant_method", "fp8 or bf16", "\"" + c.weight_dtype + "\"");
  if (c.expert_dtype != "fp4" && c.expert_dtype != "fp8" && c.expert_dtype != "bf16") fail(flat ? "expert_dtype" : "quantization_config.expert_dtype", "fp4, fp8 or bf16", "\"" + c.expert_dtype + "\"");
  if (c.scale_fmt != "ue8m0") fail("quantization_config.scale_fmt", "\"ue8m0\"", "\"" + c.scale_fmt + "\"");
}

V41Config LoadV41ConfigFile(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw std::invalid_argument(path + ": cannot open");
  nlohmann::json j;
  try {
    f >> j;
  } catch (const std::exception& e) {
    throw std::invalid_argument(path + ": not valid JSON: " + e.what());
  }
  return ParseV41Config(j, path);
}

}  // namespace cedar
