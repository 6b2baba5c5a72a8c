#include "engine/model.h"

#include <xxhash.h>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <filesystem>
#include <map>
#include <sstream>
#include <stdexcept>

#include "kernels/ops.h"

namespace cedar {
namespace {

std::string ShapeStr(const std::vector<int64_t>& s) {
  std::ostringstream o;
  o << "[";
  for (size_t i = 0; i < s.size(); ++i) o << (i ? ", " : "") << s[i];
  o << "]";
  return o.str();
}

void AddFfn(std::vector<TensorSpec>& out, const std::string& p, int64_t inter, int64_t d) {
  out.push_back({p + "w1.weight", {inter, d}});
  out.push_back({p + "w2.weight", {d, inter}});
  out.push_back({p + "w3.weight", {inter, d}});
}

}  // namespace

std::vector<TensorSpec> RequiredTensors(const ModelConfig& c) {
  std::vector<TensorSpec> t;
  const int64_t d = c.dim, hc = int64_t(c.n_heads) * c.head_dim;
  t.push_back({"embed.weight", {c.vocab_size, d}});
  t.push_back({"norm.weight", {d}});
  t.push_back({"head.weight", {c.vocab_size, d}});
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    t.push_back({p + "attn_norm.weight", {d}});
    t.push_back({p + "ffn_norm.weight", {d}});
    t.push_back({p + "attn.wq_a.weight", {c.q_lora_rank, d}});
    t.push_back({p + "attn.q_norm.weight", {c.q_lora_rank}});
    t.push_back({p + "attn.wq_b.weight", {hc, c.q_lora_rank}});
    t.push_back({p + "attn.wkv.weight", {c.head_dim, d}});
    t.push_back({p + "attn.kv_norm.weight", {c.head_dim}});
    t.push_back({p + "attn.sink", {c.n_heads}});
    t.push_back({p + "attn.wo_a.weight", {c.o_groups, c.o_group_rank, hc / c.o_groups}});
    t.push_back({p + "attn.wo_b.weight", {d, int64_t(c.o_groups) * c.o_group_rank}});
    if (c.hc_mult > 1) {  // mHC coefficients: F32, released names without ".weight" (notes §2.1)
      const int64_t m = c.hc_mult, mix = (2 + m) * m;
      for (const char* s : {"attn", "ffn"}) {
        t.push_back({p + "hc_" + s + "_fn", {mix, m * d}});
        t.push_back({p + "hc_" + s + "_base", {mix}});
        t.push_back({p + "hc_" + s + "_scale", {3}});
      }
    }
    if (c.IsKvSource(l)) {
      t.push_back({p + "attn.compressor.wkv.weight", {c.head_dim, d}});
      if (c.RatioOf(l) == 2) t.push_back({p + "attn.compressor.wz.weight", {c.head_dim, d}});
      t.push_back({p + "attn.compressor.norm.weight", {c.head_dim}});
      t.push_back({p + "attn.indexer.wk.weight", {c.index_head_dim, c.head_dim}});
      t.push_back({p + "attn.indexer.k_norm.weight", {c.index_head_dim}});
    }
    if (c.IsIndexSource(l)) {
      t.push_back({p + "attn.indexer.wq_b.weight", {int64_t(c.index_heads) * c.index_head_dim, c.q_lora_rank}});
      t.push_back({p + "attn.indexer.weights_proj.weight", {c.index_heads, d}});
    }
    if (c.n_routed_experts > 0) {
      t.push_back({p + "ffn.gate.weight", {c.n_routed_experts, d}});
      t.push_back({p + "ffn.gate.bias", {c.n_routed_experts}});
      for (int e = 0; e < c.n_routed_experts; ++e) AddFfn(t, p + "ffn.experts." + std::to_string(e) + ".", c.moe_inter_dim, d);
      if (c.n_shared_experts == 1) AddFfn(t, p + "ffn.shared.", c.moe_inter_dim, d);
    } else {
      AddFfn(t, p + "ffn.", c.moe_inter_dim, d);
    }
  }
  return t;
}

Weight Model::Take(const std::string& name, std::vector<int64_t> shape) {
  const TensorInfo* t = file_->Find(name);
  if (!t) throw std::runtime_error("model: " + file_->Path() + ": missing tensor '" + name + "' (expected shape " + ShapeStr(shape) + ")");
  if (t->shape != shape)
    throw std::runtime_error("model: tensor '" + name + "': expected shape " + ShapeStr(shape) + ", found " + ShapeStr(t->shape));
  Weight w;
  w.rows = shape.empty() ? 1 : shape[0];
  w.cols = 1;
  for (size_t i = 1; i < shape.size(); ++i) w.cols *= shape[i];
  if (shape.size() == 3) {  // wo_a: groups stacked along rows
    w.rows = shape[0] * shape[1];
    w.cols = shape[2];
  }
  if (arena_ && (t->dtype == DType::F32 || t->dtype == DType::BF16)) {
    float* dst = arena_->Allocate(size_t(t->NumElements()));
    file_->ReadFloatsInto(name, dst);
    w.data = dst;
  } else if (t->dtype == DType::F32) {
    if (reinterpret_cast<uintptr_t>(t->data) % alignof(float) != 0) {
      owned_.push_back(std::make_unique<std::vector<float>>(file_->ReadFloats(name)));
      w.data = owned_.back()->data();
    } else {
      w.data = reinterpret_cast<const float*>(t->data);
    }
  } else if (t->dtype == DType::BF16) {
    owned_.push_back(std::make_unique<std::vector<float>>(file_->ReadFloats(name)));
    w.data = owned_.back()->data();
  } else {
    throw std::runtime_error("model: tensor '" + name + "': expected dtype F32 or BF16, found " + DTypeName(t->dtype));
  }
  return w;
}

std::unique_ptr<const Model> Model::Load(const std::string& dir, const LoadOptions& options) {
  if (std::filesystem::exists(dir + "/model.safetensors.index.json")) return LoadReleased(dir, options);
  std::unique_ptr<Model> m(new Model());
  m->dir_ = dir;
  m->config_ = LoadConfigFile(dir + "/config.json");
  if (!m->config_.engram_layers.empty())
    throw std::runtime_error("model: " + dir + "/config.json: engram_layers is set, but Engram weights are read only from the "
                             "released layout (FP8 tables with E8M0 scales, read on demand: docs/v41-contract.md section 8); "
                             "found Cedar's single-file layout");
  m->file_ = std::make_unique<SafetensorsFile>(dir + "/model.safetensors");
  const ModelConfig& c = m->config_;
  std::map<std::string, std::vector<int64_t>> shapes;
  size_t floats = 0;  // the arena's size: every required tensor as F32, 64-byte aligned
  for (auto& s : RequiredTensors(c)) {
    shapes[s.name] = s.shape;
    size_t e = 1;
    for (int64_t x : s.shape) e *= size_t(x);
    floats += (e + 15) / 16 * 16;
  }
  if (!options.mmap_weights) m->arena_ = std::make_unique<WeightArena>(floats * sizeof(float));
  auto take = [&](const std::string& n) { return m->Take(n, shapes.at(n)); };
  m->precision_ = options.weights;
  // The matmul weights, at the chosen precision (engine/model_precision.cpp).
  auto takem = [&](const std::string& n) { return m->TakeMatmul(n, shapes.at(n), options.weights); };
  m->embed_ = take("embed.weight");
  m->norm_ = take("norm.weight");
  m->head_ = takem("head.weight");
  m->layers_.resize(size_t(c.n_layers));
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    LayerWeights& w = m->layers_[size_t(l)];
    w.attn_norm = take(p + "attn_norm.weight");
    w.ffn_norm = take(p + "ffn_norm.weight");
    w.wq_a = takem(p + "attn.wq_a.weight");
    w.q_norm = take(p + "attn.q_norm.weight");
    w.wq_b = takem(p + "attn.wq_b.weight");
    w.wkv = takem(p + "attn.wkv.weight");
    w.kv_norm = take(p + "attn.kv_norm.weight");
    w.sink = take(p + "attn.sink");
    w.wo_a = takem(p + "attn.wo_a.weight");
    w.wo_b = takem(p + "attn.wo_b.weight");
    if (c.hc_mult > 1) {
      w.hc_attn_fn = take(p + "hc_attn_fn");
      w.hc_attn_base = take(p + "hc_attn_base");
      w.hc_attn_scale = take(p + "hc_attn_scale");
      w.hc_ffn_fn = take(p + "hc_ffn_fn");
      w.hc_ffn_base = take(p + "hc_ffn_base");
      w.hc_ffn_scale = take(p + "hc_ffn_scale");
    }
    if (c.IsKvSource(l)) {
      w.comp_wkv = takem(p + "attn.compressor.wkv.weight");
      if (c.RatioOf(l) == 2) w.comp_wz = takem(p + "attn.compressor.wz.weight");
      w.comp_norm = take(p + "attn.compressor.norm.weight");
      w.idx_wk = takem(p + "attn.indexer.wk.weight");
      w.idx_k_norm = take(p + "attn.indexer.k_norm.weight");
    }
    if (c.IsIndexSource(l)) {
      w.idx_wq_b = takem(p + "attn.indexer.wq_b.weight");
      w.idx_wproj = takem(p + "attn.indexer.weights_proj.weight");
    }
    auto ffn = [&](const std::string& q) { return FfnWeights{takem(q + "w1.weight"), takem(q + "w2.weight"), takem(q + "w3.weight")}; };
    if (c.n_routed_experts > 0) {
      w.gate = take(p + "ffn.gate.weight");
      w.gate_bias = take(p + "ffn.gate.bias");
      for (int e = 0; e < c.n_routed_experts; ++e) w.experts.push_back(ffn(p + "ffn.experts." + std::to_string(e) + "."));
      if (c.n_shared_experts == 1) w.shared = ffn(p + "ffn.shared.");
    } else {
      w.dense = ffn(p + "ffn.");
    }
  }
  // Fingerprint: config JSON + every tensor's bytes, in name order.
  XXH3_state_t* st = XXH3_createState();
  XXH3_64bits_reset(st);
  const std::string cj = ConfigToJson(c).dump();
  XXH3_64bits_update(st, cj.data(), cj.size());
  for (const auto& [name, t] : m->file_->Tensors()) {
    XXH3_64bits_update(st, name.data(), name.size());
    XXH3_64bits_update(st, t.data, t.nbytes);
  }
  // Another precision computes other numbers: its cache entries must not be taken for F32's
  // (F32 keeps the fingerprint it always had). So do 8-bit activations (kernels::
  // SetInt8Activations, set before the load by the flags that take it) and BF16 ones.
  if (options.weights != WeightPrecision::kF32) {
    const std::string tag = std::string("weights=") + WeightPrecisionName(options.weights) +
                            (kernels::Int8Activations() ? "+int8-activations" : "") +
                            (kernels::Bf16Activations() ? "+bf16-activations" : "");
    XXH3_64bits_update(st, tag.data(), tag.size());
  }
  m->fingerprint_ = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  if (m->arena_) {
    m->file_->ReleasePages();  // every weight lives in the arena now
    spdlog::debug("model {}: weights copied into a {} MiB arena (huge pages {})", dir, (floats * sizeof(float)) >> 20,
                  m->arena_->huge_pages_requested() ? "requested" : "refused");
  }
  return m;
}

}  // namespace cedar
