// The model's weights on a CUDA device (issue 8), uploaded once from a loaded host Model, and
// the per-device scratch every engine call reuses. Host-only: this header and every file of
// engine/cuda/ see kernels/cuda/*.h and no CUDA header.
//
// Weight layout on the device: matrices in the chosen dtype (BF16 normally, F32 for tight
// parity tests), converted on the device by kernels/cuda Convert from the host Model's F32
// data; vectors (norm weights, sinks, the router bias) always F32 (they are tiny and feed
// F32 math). Each FFN's W1 and W3 are stacked into one [2·inter, d] matrix so one product
// gives both halves of the SwiGLU; the indexer's weights_proj is pre-scaled by
// 1/sqrt(index_head_dim · index_heads) (the engine scales the product; the same up to F32
// rounding).
//
// Thread contract: unlike the host Model, a DeviceModel is used by one thread at a time (one
// stream, one cuBLAS handle and one scratch area); the session layer's single engine thread
// fits that.
#pragma once
#include <algorithm>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/model.h"
#include "kernels/cuda/cuda_ops.h"

namespace cedar::gpu {

namespace cu = kernels::cuda;
using cu::DType;

// Throws std::runtime_error naming the failed call when a launcher or copy fails.
void Check(const cu::Status& s, const char* what);
#define CEDAR_GPU(expr) ::cedar::gpu::Check((expr), #expr)

// A device array that grows on demand (never shrinks); Ensure keeps no old contents.
class DevVec {
 public:
  template <typename T = float>
  T* Ensure(size_t n) {
    const size_t bytes = n * sizeof(T);
    if (bytes > buf_.bytes()) CEDAR_GPU(buf_.Allocate(std::max(bytes, buf_.bytes() * 3 / 2)));
    return buf_.as<T>();
  }
  template <typename T = float>
  T* get() const { return buf_.as<T>(); }
  void swap(DevVec& o) { std::swap(buf_, o.buf_); }

 private:
  cu::DeviceBuffer buf_;
};

// Uploads a small host array into `v` (synchronous copy) and returns the device pointer.
template <typename T>
T* UploadSmall(DevVec& v, const std::vector<T>& host) {
  T* p = v.Ensure<T>(std::max<size_t>(host.size(), 1));
  CEDAR_GPU(cu::CopyToDevice(p, host.data(), host.size() * sizeof(T)));
  return p;
}

struct DevWeight {
  const void* p = nullptr;
  DType type = DType::kF32;
  int64_t rows = 0, cols = 0;  // [rows, cols]
  bool present() const { return p != nullptr; }
  const float* f32() const { return static_cast<const float*>(p); }  // REQUIRES type F32
};

struct DevFfn {
  DevWeight w13;  // [2·inter, d]: W1 rows then W3 rows
  DevWeight w2;   // [d, inter]
};

struct DevLayer {
  DevWeight attn_norm, ffn_norm;  // [d] F32
  DevWeight wq_a;                 // [q_rank, d]
  DevWeight q_norm;               // [q_rank] F32
  DevWeight wq_b;                 // [n_heads·c, q_rank]
  DevWeight wkv;                  // [c, d]
  DevWeight kv_norm;              // [c] F32
  DevWeight sink;                 // [n_heads] F32
  DevWeight wo_a;                 // [o_groups, o_group_rank, (n_heads/o_groups)·c]
  DevWeight wo_b;                 // [d, o_groups·o_group_rank]
  DevWeight comp_wkv, comp_wz;    // [c, d] (kv sources; wz for ratio 2)
  DevWeight comp_norm;            // [c] F32
  DevWeight idx_wk;               // [index_head_dim, c]
  DevWeight idx_k_norm;           // [index_head_dim] F32
  DevWeight idx_wq_b;             // [index_heads·index_head_dim, q_rank]
  DevWeight idx_wproj;            // [index_heads, d], pre-scaled (see the file comment)
  DevWeight gate;                 // [n_routed_experts, d]
  DevWeight gate_bias;            // [n_routed_experts] F32
  std::vector<DevFfn> experts;
  DevFfn shared, dense;
};

// Scratch of one device, reused by every call (names say which step writes them).
struct Workspace {
  cu::Blas blas;
  DevVec hout, u, uo, cq, q, o, g, x;       // layer activations
  DevVec pos, win_first, n_win;             // per-row metadata uploaded per layer
  DevVec comp_c, comp_z;                    // compressor inputs with the pending half first
  DevVec iq, iw, scores, lengths, cand_ws;  // indexer
  DevVec gate, experts, weights, counts, offsets, rows, position, xg, t13, act, yg;  // FFN
  DevVec tokens, embed_tmp, logits_x, logits;                                        // embedding, head
};

class DeviceModel {
 public:
  // Uploads every weight of `host` (which must outlive this) as `weight_type`. Throws
  // std::runtime_error when there is no device or an allocation or copy fails.
  static std::unique_ptr<DeviceModel> Create(const Model& host, DType weight_type);

  const Model& host() const { return *host_; }
  const ModelConfig& config() const { return host_->config(); }
  DType weight_type() const { return weight_type_; }
  const DevWeight& embed() const { return embed_; }  // [V, d]
  const DevWeight& norm() const { return norm_; }    // [d] F32
  const DevWeight& head() const { return head_; }    // [V, d]
  const DevLayer& layer(int l) const { return layers_[size_t(l)]; }
  size_t weight_bytes() const { return weight_bytes_; }
  Workspace& ws() const { return *ws_; }  // see the thread contract above
  cu::Stream stream() const { return nullptr; }

 private:
  DeviceModel() = default;
  DevWeight Matrix(const Weight& w);                 // in weight_type_
  DevWeight Vector(const Weight& w, float scale = 1);  // F32
  DevWeight Stack(const Weight& a, const Weight& b);   // [a; b] in weight_type_
  DevWeight UploadRows(const std::vector<const Weight*>& parts, DType type, float scale);

  const Model* host_ = nullptr;
  DType weight_type_ = DType::kBF16;
  std::vector<cu::DeviceBuffer> owned_;
  size_t weight_bytes_ = 0;
  DevWeight embed_, norm_, head_;
  std::vector<DevLayer> layers_;
  std::unique_ptr<Workspace> ws_;
};

}  // namespace cedar::gpu
