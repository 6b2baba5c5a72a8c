// Uploading the weights (see device_model.h).
#include "engine/cuda/device_model.h"

#include <cmath>
#include <stdexcept>

namespace cedar::gpu {

void Check(const cu::Status& s, const char* what) {
  if (!s.ok()) throw std::runtime_error(std::string("CUDA backend: ") + what + " failed: " + s.ToString());
}

DevWeight DeviceModel::UploadRows(const std::vector<const Weight*>& parts, DType type, float scale) {
  int64_t rows = 0, cols = parts[0]->cols;
  for (const Weight* w : parts) rows += w->rows;
  const size_t n = size_t(rows * cols);
  // F32 first (a staging buffer), then Convert on the device when the target is BF16.
  cu::DeviceBuffer f32;
  CEDAR_GPU(f32.Allocate(n * 4));
  size_t off = 0;
  std::vector<float> scaled;
  for (const Weight* w : parts) {
    const size_t m = size_t(w->rows * w->cols);
    const float* src = w->data;
    if (scale != 1.0f) {
      scaled.assign(src, src + m);
      for (float& x : scaled) x *= scale;
      src = scaled.data();
    }
    CEDAR_GPU(cu::CopyToDevice(f32.as<float>() + off, src, m * 4));
    off += m;
  }
  DevWeight d;
  d.type = type;
  d.rows = rows;
  d.cols = cols;
  if (type == DType::kF32) {
    d.p = f32.get();
    owned_.push_back(std::move(f32));
  } else {
    cu::DeviceBuffer bf;
    CEDAR_GPU(bf.Allocate(n * 2));
    CEDAR_GPU(cu::Convert(f32.get(), DType::kF32, bf.get(), DType::kBF16, int64_t(n), nullptr));
    CEDAR_GPU(cu::Synchronize(nullptr));
    d.p = bf.get();
    owned_.push_back(std::move(bf));
  }
  weight_bytes_ += n * cu::SizeOf(type);
  return d;
}

DevWeight DeviceModel::Matrix(const Weight& w) {
  return w.present() ? UploadRows({&w}, weight_type_, 1.0f) : DevWeight{};
}
DevWeight DeviceModel::Vector(const Weight& w, float scale) {
  return w.present() ? UploadRows({&w}, DType::kF32, scale) : DevWeight{};
}
DevWeight DeviceModel::Stack(const Weight& a, const Weight& b) {
  return a.present() ? UploadRows({&a, &b}, weight_type_, 1.0f) : DevWeight{};
}

std::unique_ptr<DeviceModel> DeviceModel::Create(const Model& host, DType weight_type) {
  if (host.weight_precision() != WeightPrecision::kF32)  // the device uploads F32 host weights (and converts them itself)
    throw std::runtime_error(std::string("cuda: the device backend reads F32 host weights; found --weights ") +
                             WeightPrecisionName(host.weight_precision()) + " (load with --weights f32, or use --device cpu)");
  if (host.expert_cache())  // released layout loaded with experts on demand (--max-ram): host memory only
    throw std::runtime_error("cuda: routed experts read on demand (--max-ram below the expert bytes) run on the CPU backend only; use --device cpu or a larger --max-ram");
  int count = 0;
  const cu::Status st = cu::DeviceCount(&count);
  if (!st.ok() || count == 0)
    throw std::runtime_error("CUDA backend: no CUDA device (" + st.ToString() + ", " + std::to_string(count) + " devices)");
  std::unique_ptr<DeviceModel> m(new DeviceModel);
  m->host_ = &host;
  m->weight_type_ = weight_type;
  m->ws_ = std::make_unique<Workspace>();
  CEDAR_GPU(m->ws_->blas.Init());
  const ModelConfig& c = host.config();
  m->embed_ = m->Matrix(host.embed());
  m->norm_ = m->Vector(host.norm());
  m->head_ = m->Matrix(host.head());
  const float wproj_scale = 1.0f / std::sqrt(float(c.index_head_dim) * float(c.index_heads));
  for (int l = 0; l < c.n_layers; ++l) {
    const LayerWeights& w = host.layer(l);
    DevLayer d;
    d.attn_norm = m->Vector(w.attn_norm);
    d.ffn_norm = m->Vector(w.ffn_norm);
    d.wq_a = m->Matrix(w.wq_a);
    d.q_norm = m->Vector(w.q_norm);
    d.wq_b = m->Matrix(w.wq_b);
    d.wkv = m->Matrix(w.wkv);
    d.kv_norm = m->Vector(w.kv_norm);
    d.sink = m->Vector(w.sink);
    d.wo_a = m->Matrix(w.wo_a);
    d.wo_b = m->Matrix(w.wo_b);
    d.comp_wkv = m->Matrix(w.comp_wkv);
    d.comp_wz = m->Matrix(w.comp_wz);
    d.comp_norm = m->Vector(w.comp_norm);
    d.idx_wk = m->Matrix(w.idx_wk);
    d.idx_k_norm = m->Vector(w.idx_k_norm);
    d.idx_wq_b = m->Matrix(w.idx_wq_b);
    if (w.idx_wproj.present()) d.idx_wproj = m->UploadRows({&w.idx_wproj}, weight_type, wproj_scale);
    d.gate = m->Matrix(w.gate);
    d.gate_bias = m->Vector(w.gate_bias);
    for (const FfnWeights& e : w.experts) d.experts.push_back({m->Stack(e.w1, e.w3), m->Matrix(e.w2)});
    d.shared = {m->Stack(w.shared.w1, w.shared.w3), m->Matrix(w.shared.w2)};
    d.dense = {m->Stack(w.dense.w1, w.dense.w3), m->Matrix(w.dense.w2)};
    m->layers_.push_back(std::move(d));
  }
  return m;
}

}  // namespace cedar::gpu
