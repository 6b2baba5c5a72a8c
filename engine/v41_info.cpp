#include "engine/v41_info.h"

#include <cstdio>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "engine/v41_held.h"

namespace cedar {

int64_t V41TensorSpec::Elements() const {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

int64_t V41TensorSpec::Params() const {
  if (is_scale) return 0;
  return dtype == DType::I8 ? 2 * Elements() : Elements();  // I8 here is always packed FP4
}

int64_t V41TensorSpec::Bytes() const { return Elements() * int64_t(DTypeSize(dtype)); }

namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Collects the tensor list; every rule cites docs/v41-contract.md.
class Builder {
 public:
  explicit Builder(const V41Config& c) : c_(c) {}
  std::vector<V41TensorSpec> out;

  void Plain(const std::string& name, const std::string& family, DType dt, std::vector<int64_t> shape, int64_t count = 1) {
    V41TensorSpec t;
    t.name = name;
    t.family = family;
    t.dtype = dt;
    t.shape = std::move(shape);
    t.count = count;
    t.layer = layer_;
    out.push_back(std::move(t));
  }
  void Scale(const std::string& name, const std::string& family, std::vector<int64_t> shape, int64_t count = 1) {
    Plain(name, family, DType::F8_E8M0, std::move(shape), count);
    out.back().is_scale = true;
  }
  // A dense linear weight [rows, cols]: FP8 E4M3 with 2-D E8M0 block scales when the config says fp8.
  void Dense(const std::string& prefix, const std::string& family, int64_t rows, int64_t cols, int64_t count = 1) {
    if (c_.weight_dtype == "fp8") {
      Plain(prefix + ".weight", family, DType::F8_E4M3, {rows, cols}, count);
      Scale(prefix + ".scale", family, {CeilDiv(rows, c_.weight_block_rows), CeilDiv(cols, c_.weight_block_cols)}, count);
    } else {
      Plain(prefix + ".weight", family, DType::BF16, {rows, cols}, count);
    }
  }
  // A routed expert matrix [rows, cols]: packed FP4 in I8 [rows, cols/2] + E8M0 per 32 along a row.
  void Expert(const std::string& prefix, const std::string& family, int64_t rows, int64_t cols, int64_t count) {
    if (c_.expert_dtype == "fp4") {
      Plain(prefix + ".weight", family, DType::I8, {rows, cols / 2}, count);
      Scale(prefix + ".scale", family, {rows, cols / 32}, count);
    } else {
      Dense(prefix, family, rows, cols, count);
    }
  }

  void Block(const std::string& p, int l, bool mtp) {
    const int64_t d = c_.dim, hc = c_.hc_mult, H = c_.n_heads, hd = c_.head_dim, qr = c_.q_lora_rank;
    const int64_t g = c_.o_groups, orank = c_.o_lora_rank;
    auto F = [&](const char* f) { return mtp ? std::string("dspark") : std::string(f); };
    Plain(p + "attn_norm.weight", F("norms"), DType::BF16, {d});
    Plain(p + "ffn_norm.weight", F("norms"), DType::BF16, {d});
    if (hc > 1) {
      const int64_t mix = (2 + hc) * hc;  // pre (hc) + post (hc) + comb (hc x hc)
      for (const char* s : {"attn", "ffn"}) {
        Plain(p + "hc_" + s + "_fn", F("mhc"), DType::F32, {mix, hc * d});
        Plain(p + "hc_" + s + "_base", F("mhc"), DType::F32, {mix});
        Plain(p + "hc_" + s + "_scale", F("mhc"), DType::F32, {3});
      }
    }
    Dense(p + "attn.wq_a", F("attention"), qr, d);
    Plain(p + "attn.q_norm.weight", F("attention"), DType::BF16, {qr});
    Dense(p + "attn.wq_b", F("attention"), H * hd, qr);
    Dense(p + "attn.wkv", F("attention"), hd, d);
    Plain(p + "attn.kv_norm.weight", F("attention"), DType::BF16, {hd});
    Dense(p + "attn.wo_a", F("attention"), g * orank, H * hd / g);
    Dense(p + "attn.wo_b", F("attention"), d, g * orank);
    Plain(p + "attn.attn_sink", F("attention"), DType::F32, {H});
    if (!mtp && c_.IsKvSource(l)) {
      Plain(p + "attn.compressor.wkv.weight", "compressor", DType::BF16, {hd, d});
      if (c_.RatioOf(l) > 1) Plain(p + "attn.compressor.wgate.weight", "compressor", DType::BF16, {hd, d});
      Plain(p + "attn.compressor.norm.weight", "compressor", DType::BF16, {hd});
    }
    if (!mtp && c_.IsIndexSource(l)) {
      Dense(p + "attn.indexer.wq_b", "indexer", int64_t(c_.index_n_heads) * c_.index_head_dim, qr);
      Plain(p + "attn.indexer.weights_proj.weight", "indexer", DType::BF16, {c_.index_n_heads, d});
      if (c_.IsKvSource(l)) {
        Plain(p + "attn.indexer.wk.weight", "indexer", DType::BF16, {c_.index_head_dim, hd});
        Plain(p + "attn.indexer.k_norm.weight", "indexer", DType::BF16, {c_.index_head_dim});
      }
    }
    const int64_t E = mtp ? c_.dspark_n_routed_experts : c_.n_routed_experts, inter = c_.moe_inter_dim;
    Plain(p + "ffn.gate.weight", F("router"), DType::BF16, {E, d});
    Plain(p + "ffn.gate.bias", F("router"), DType::F32, {E});
    Plain(p + "ffn.gate.bias_vl", F("router"), DType::F32, {E});
    Expert(p + "ffn.experts.{E}.w1", F("routed_experts"), inter, d, E);
    Expert(p + "ffn.experts.{E}.w2", F("routed_experts"), d, inter, E);
    Expert(p + "ffn.experts.{E}.w3", F("routed_experts"), inter, d, E);
    if (c_.n_shared_experts > 0) {
      const int64_t si = inter * c_.n_shared_experts;
      Dense(p + "ffn.shared_experts.w1", F("shared_experts"), si, d);
      Dense(p + "ffn.shared_experts.w2", F("shared_experts"), d, si);
      Dense(p + "ffn.shared_experts.w3", F("shared_experts"), si, d);
    }
    if (!mtp && c_.IsEngramLayer(l)) {
      int idx = 0;
      while (c_.engram_layer_ids[idx] != l) ++idx;
      const int64_t rows = c_.engram_num_embeddings[idx], hdim = c_.engram_head_dim;
      const int64_t cols = int64_t(c_.engram_max_ngram - 1) * c_.engram_n_heads * hdim;  // 24 x 256 = 6144
      Plain(p + "engram.embed.weight", "engram_tables", DType::F8_E4M3, {rows, hdim});
      Scale(p + "engram.embed.scale", "engram_tables", {rows, hdim / 32});
      Plain(p + "engram.q_weight", "engram_proj", DType::BF16, {hc, d});
      Plain(p + "engram.k_weight", "engram_proj", DType::BF16, {hc, d});
      Dense(p + "engram.wkv", "engram_proj", d * (hc + 1), cols);
    }
  }

  void All() {
    const int64_t d = c_.dim, V = c_.vocab_size;
    layer_ = -1;
    Plain("embed.weight", "embed", DType::BF16, {V, d});
    Plain("head.weight", "head", DType::BF16, {V, d});
    Plain("norm.weight", "norms", DType::BF16, {d});
    for (int l = 0; l < c_.n_layers; ++l) {
      layer_ = l;
      Block("layers." + std::to_string(l) + ".", l, false);
    }
    layer_ = -1;
    for (int s = 0; s < c_.n_mtp_layers; ++s) {
      const std::string p = "mtp." + std::to_string(s) + ".";
      Block(p, c_.n_layers + s, true);
      if (s == 0) {
        Dense(p + "main_proj", "dspark", d, d * int64_t(c_.dspark_target_layer_ids.size()));
        Plain(p + "main_norm.weight", "dspark", DType::BF16, {d});
      }
      if (s == c_.n_mtp_layers - 1) {
        Plain(p + "norm.weight", "dspark", DType::BF16, {d});
        Plain(p + "markov_head.embed.weight", "dspark", DType::BF16, {V, c_.dspark_markov_rank});
        Plain(p + "markov_head.head.weight", "dspark", DType::BF16, {V, c_.dspark_markov_rank});
        Plain(p + "confidence_head.proj.weight", "dspark", DType::BF16, {1, d + c_.dspark_markov_rank});
      }
    }
  }

 private:
  const V41Config& c_;
  int layer_ = -1;
};

std::string ParamDType(const V41TensorSpec& t) { return t.dtype == DType::I8 ? "FP4" : DTypeName(t.dtype); }

bool EndsWith(const std::string& s, const std::string& suf) {
  return s.size() >= suf.size() && s.compare(s.size() - suf.size(), suf.size(), suf) == 0;
}

}  // namespace

std::vector<V41TensorSpec> V41Tensors(const V41Config& c) {
  Builder b(c);
  b.All();
  return b.out;
}

V41Info ComputeV41Info(const V41Config& c) {
  V41Info info;
  const std::vector<V41TensorSpec> ts = V41Tensors(c);
  info.active_per_layer.assign(size_t(c.n_layers), 0);
  const int E = c.EncoderLayers();
  int64_t head = 0, final_norm = 0, prefill_boundary = 0, head_bytes = 0, final_norm_bytes = 0;
  const int64_t engram_rows_read = int64_t(c.engram_max_ngram - 1) * c.engram_n_heads;  // per token and table
  for (const V41TensorSpec& t : ts) {
    V41FamilyTotals& f = info.families[t.family];
    for (V41FamilyTotals* tot : {&f, &info.total}) {
      if (!t.is_scale) tot->params[ParamDType(t)] += t.Params() * t.count;
      tot->bytes[DTypeName(t.dtype)] += t.Bytes() * t.count;
      tot->tensors += t.count;
    }
    info.bytes_by_dtype[DTypeName(t.dtype)] += t.Bytes() * t.count;
    if (t.family == "engram_tables") info.engram_table_params += t.Params() * t.count;
    else if (t.family != "dspark") info.backbone_params += t.Params() * t.count;
    if (t.name == "head.weight") head = t.Params(), head_bytes = t.Bytes();
    if (t.name == "norm.weight") final_norm = t.Params(), final_norm_bytes = t.Bytes();
    if (t.layer < 0) continue;
    // A scale tensor is read with its weight: the same share of it (experts: top-k of count;
    // Engram: the rows read of shape[0], the table and its scales both one row per entry).
    int64_t active_bytes = t.Bytes();
    if (t.family == "routed_experts") active_bytes = t.Bytes() * c.n_activated_experts;
    if (t.family == "engram_tables") active_bytes = t.Bytes() / t.shape[0] * engram_rows_read;
    info.active_decode_bytes += active_bytes;
    if (t.is_scale) continue;
    // Per-token active parameters of a backbone layer: all dense weights, n_activated of the
    // routed experts, and of an Engram table only the rows a token reads.
    int64_t active = t.Params();
    if (t.family == "routed_experts") active = t.Params() * c.n_activated_experts;
    if (t.family == "engram_tables") active = int64_t(c.engram_max_ngram - 1) * c.engram_n_heads * c.engram_head_dim;
    info.active_per_layer[size_t(t.layer)] += active;
    // A prompt token at the first decoder layer only feeds the global KV: its attention-norm, the
    // compressor and the index-key projection (CED: nothing else of the decoder runs for it).
    const std::string lp = "layers." + std::to_string(E) + ".";
    if (t.layer == E && (EndsWith(t.name, "attn_norm.weight") || t.family == "compressor" ||
                         t.name == lp + "attn.indexer.wk.weight" || t.name == lp + "attn.indexer.k_norm.weight"))
      prefill_boundary += t.Params();
  }
  for (int l = 0; l < c.n_layers; ++l) {
    if (l < E) info.active_prefill += info.active_per_layer[size_t(l)];
    info.active_decode += info.active_per_layer[size_t(l)];
  }
  info.active_prefill += prefill_boundary;
  info.active_decode += final_norm + head;
  info.active_decode_bytes += final_norm_bytes + head_bytes;
  // Global KV bytes per token as released (main: FP4 + one E4M3 per 16; index keys: MXFP4).
  const double main_entry = c.head_dim / 2.0 + c.head_dim / 16.0;
  const double index_entry = c.index_head_dim / 2.0 + c.index_head_dim / 32.0;
  for (int s : c.kv_source_layers) info.global_kv_bytes_per_token += (main_entry + index_entry) / c.RatioOf(s);
  return info;
}

V41Held ComputeV41Held(const V41Config& c, WeightPrecision p) {
  V41Held h;
  const std::vector<V41TensorSpec> ts = V41Tensors(c);
  const int64_t engram_rows_read = int64_t(c.engram_max_ngram - 1) * c.engram_n_heads;  // per token and table
  for (size_t i = 0; i < ts.size(); ++i) {
    const V41TensorSpec& t = ts[i];
    const bool active = t.layer >= 0 || t.name == "head.weight" || t.name == "norm.weight";
    if (t.family == "engram_tables") {  // read from the shard as stored: codes and scales, one row per entry
      if (active) h.decode_token_bytes += t.Bytes() / t.shape[0] * engram_rows_read;
      continue;
    }
    if (t.is_scale || EndsWith(t.name, "ffn.gate.bias_vl")) continue;  // scales: counted with their weight
    if (t.family == "engram_proj" && !EndsWith(t.name, "engram.wkv.weight")) {  // engine/engram.cpp EngramWeights:
      if (EndsWith(t.name, "engram.k_weight")) continue;  // q_weight * k_weight held as one F32 vector [hc, d]
      h.engram_bytes += t.Elements() * 4;
      if (active) h.decode_token_bytes += t.Elements() * 4;
      continue;
    }
    // [rows, cols] as the loader holds it: a packed FP4 row of cols/2 bytes is cols values.
    const int64_t rows = t.shape[0];
    int64_t cols = t.dtype == DType::I8 ? 2 : 1;
    for (size_t k = 1; k < t.shape.size(); ++k) cols *= t.shape[k];
    const std::vector<int64_t> scale_shape =
        i + 1 < ts.size() && ts[i + 1].is_scale ? ts[i + 1].shape : std::vector<int64_t>{};  // Dense/Expert add it next
    const int64_t bytes = HeldBytes(HeldTypeOf(t.name, t.dtype, scale_shape, rows, cols, p), rows, cols);
    if (t.family == "engram_proj") {  // wkv: held at p beside the arena, each part 64-byte aligned
      h.engram_bytes += bytes;
      if (active) h.decode_token_bytes += bytes;
      continue;
    }
    h.arena_bytes += bytes * t.count;
    const bool routed = t.name.find("ffn.experts.") != std::string::npos;  // the backbone's and DSpark's banks
    if (routed) h.expert_bytes += bytes * t.count;
    if (active) h.decode_token_bytes += bytes * (routed ? c.n_activated_experts : 1);
  }
  return h;
}

nlohmann::json V41InfoToJson(const V41Info& info) {
  nlohmann::json j;
  auto fam = [](const V41FamilyTotals& f) {
    return nlohmann::json{{"params_by_dtype", f.params}, {"bytes_by_dtype", f.bytes}, {"tensors", f.tensors}};
  };
  for (const auto& [name, f] : info.families) j["families"][name] = fam(f);
  j["total"] = fam(info.total);
  j["bytes_by_dtype"] = info.bytes_by_dtype;
  j["backbone_params"] = info.backbone_params;
  j["engram_table_params"] = info.engram_table_params;
  j["active_params_per_prefill_token"] = info.active_prefill;
  j["active_params_per_decode_token"] = info.active_decode;
  j["active_params_per_layer"] = info.active_per_layer;
  j["active_bytes_per_decode_token"] = info.active_decode_bytes;
  j["global_kv_bytes_per_token"] = info.global_kv_bytes_per_token;
  return j;
}

std::string V41InfoText(const V41Config& c, const V41Info& info) {
  std::string s;
  char buf[512];
  auto add = [&](const char* fmt, auto... a) {
    std::snprintf(buf, sizeof buf, fmt, a...);
    s += buf;
  };
  auto B = [](int64_t n) { return double(n) / 1e9; };
  add("DeepSeek-V4.1 (%s spelling): %d layers (encoder %d), d %d, %d heads x %d, %d routed experts (top %d) + %d shared, hc_mult %d\n",
      c.spelling.c_str(), c.n_layers, c.EncoderLayers(), c.dim, c.n_heads, c.head_dim, c.n_routed_experts, c.n_activated_experts,
      c.n_shared_experts, c.hc_mult);
  add("weights: dense %s (%dx%d %s blocks), routed experts %s; Engram at %zu layers; %d DSpark blocks\n", c.weight_dtype.c_str(),
      c.weight_block_rows, c.weight_block_cols, c.scale_fmt.c_str(), c.expert_dtype.c_str(), c.engram_layer_ids.size(), c.n_mtp_layers);
  add("%-16s %9s  %-58s %s\n", "family", "tensors", "parameters (billions) by dtype", "bytes (GB) by stored dtype");
  auto row = [&](const std::string& name, const V41FamilyTotals& f) {
    std::string p, b;
    for (const auto& [dt, n] : f.params) {
      std::snprintf(buf, sizeof buf, "%s %.4f  ", dt.c_str(), B(n));
      p += buf;
    }
    for (const auto& [dt, n] : f.bytes) {
      std::snprintf(buf, sizeof buf, "%s %.4f  ", dt.c_str(), B(n));
      b += buf;
    }
    add("%-16s %9lld  %-58s %s\n", name.c_str(), (long long)f.tensors, p.c_str(), b.c_str());
  };
  for (const auto& [name, f] : info.families) row(name, f);
  row("total", info.total);
  add("backbone parameters %.2fB, Engram tables %.2fB (vision not counted)\n", B(info.backbone_params), B(info.engram_table_params));
  add("active parameters per prefill token %.4fB, per decode token %.4fB (embedding lookup not counted)\n", B(info.active_prefill),
      B(info.active_decode));
  add("weights streamed per decode token as stored: %.2f GB (FP8 / FP4 with their scales; embedding lookup not counted)\n",
      B(info.active_decode_bytes));
  add("global KV as released: %.0f bytes per token\n", info.global_kv_bytes_per_token);
  return s;
}

}  // namespace cedar
