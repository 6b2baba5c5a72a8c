#include "engine/info.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "engine/kv_precision.h"
#include "engine/model.h"

namespace cedar {

namespace {
int64_t Count(const std::vector<int64_t>& s) {
  int64_t n = 1;
  for (int64_t x : s) n *= x;
  return n;
}
bool Has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }
}  // namespace

double DecodeWeightBytes(const ModelInfo& i, kernels::WeightType t, int64_t cols) {
  const double per = kernels::WeightRowBytes(t, cols) / double(std::max<int64_t>(cols, 1));
  return double(i.matmul_active_per_decode_token) * per + 4.0 * double(i.active_per_decode_token - i.matmul_active_per_decode_token);
}

double RoutedParamsPerDecodeToken(const ModelConfig& c) {
  return c.n_routed_experts > 0 ? double(c.n_layers) * c.experts_per_token * 3.0 * c.moe_inter_dim * c.dim : 0.0;
}

double DecodeWeightBytesHeld(const ModelInfo& i, const ModelConfig& c, double dense_bytes_per_param, double routed_bytes_per_param) {
  const double routed = RoutedParamsPerDecodeToken(c);
  return (double(i.matmul_active_per_decode_token) - routed) * dense_bytes_per_param + routed * routed_bytes_per_param +
         4.0 * double(i.active_per_decode_token - i.matmul_active_per_decode_token);
}

double DecodeWeightBytesReleased(const ModelInfo& i, const ModelConfig& c) {
  auto per = [&](kernels::WeightType t) { return kernels::WeightRowBytes(t, c.dim) / double(std::max(c.dim, 1)); };
  const double routed = RoutedParamsPerDecodeToken(c);
  const double other = double(i.matmul_active_per_decode_token - i.head_params) - routed;
  return routed * per(kernels::WeightType::kFP4) + double(i.head_params) * per(kernels::WeightType::kBF16) +
         other * per(kernels::WeightType::kFP8) + 4.0 * double(i.active_per_decode_token - i.matmul_active_per_decode_token);
}

ModelInfo ComputeInfo(const ModelConfig& c) {
  ModelInfo info;
  const int64_t ffn = 3 * int64_t(c.moe_inter_dim) * c.dim;
  std::vector<int64_t> active(size_t(c.n_layers), 0), matmul(size_t(c.n_layers), 0);
  for (const TensorSpec& t : RequiredTensors(c)) {
    const int64_t n = Count(t.shape);
    info.total_params += n;
    if (t.name == "embed.weight") info.embed_params = n;
    else if (t.name == "head.weight") info.head_params = n;
    else if (t.name.rfind("layers.", 0) == 0) {
      const int l = std::stoi(t.name.substr(7));
      if (!Has(t.name, "ffn.experts.")) {  // routed experts counted below
        active[size_t(l)] += n;
        if (IsMatmulTensor(t.name)) matmul[size_t(l)] += n;
      }
    }
  }
  for (int l = 0; l < c.n_layers; ++l) {
    if (c.n_routed_experts > 0) active[size_t(l)] += int64_t(c.experts_per_token) * ffn;
    if (c.n_routed_experts > 0) matmul[size_t(l)] += int64_t(c.experts_per_token) * ffn;
    info.active_per_layer_max = std::max(info.active_per_layer_max, active[size_t(l)]);
  }
  const int E = c.n_encoder_layers;
  for (int l = 0; l < E; ++l) info.active_per_prefill_token += active[size_t(l)];
  // Layer E's window entry and compressor are projections of H_E that every prompt row needs.
  info.active_per_prefill_token += int64_t(c.head_dim) * c.dim * 2 + int64_t(c.index_head_dim) * c.head_dim;
  for (int l = 0; l < c.n_layers; ++l) info.active_per_decode_token += active[size_t(l)];
  for (int l = 0; l < c.n_layers; ++l) info.matmul_active_per_decode_token += matmul[size_t(l)];
  info.matmul_active_per_decode_token += info.head_params;
  info.active_per_decode_token += info.head_params + c.dim;
  // Stored bytes at the model's kv_dtype (engine/kv_precision.h): F32 rows, or the released forms.
  info.kv_dtype = c.kv_dtype;
  const double window_row = double(WindowRowBytes(c));
  for (int s : c.kv_source_layers) {
    const double b = double(PoolEntryBytes(c) + IndexKeyBytes(c)) / c.RatioOf(s);
    info.pool_bytes_per_token.push_back({s, b});
    info.cached_bytes_per_token += b;
  }
  info.boundary_window_bytes = int64_t(E) * c.window * int64_t(window_row) + int64_t(c.window) * c.ResidualWidth() * 4;
  info.live_decoder_window_bytes = int64_t(c.n_layers - E) * c.window * int64_t(window_row);
  info.decoder_only_bytes_per_token = double(c.n_layers) * window_row;
  return info;
}

nlohmann::json InfoToJson(const ModelInfo& i) {
  nlohmann::json pools = nlohmann::json::array();
  for (auto& [layer, b] : i.pool_bytes_per_token) pools.push_back({{"layer", layer}, {"bytes_per_token", b}});
  return {{"kv_dtype", i.kv_dtype},
          {"total_params", i.total_params},
          {"embed_params", i.embed_params},
          {"head_params", i.head_params},
          {"active_params_per_layer_max", i.active_per_layer_max},
          {"active_params_per_prefill_token", i.active_per_prefill_token},
          {"active_params_per_decode_token", i.active_per_decode_token},
          {"matmul_params_per_decode_token", i.matmul_active_per_decode_token},
          {"pools", pools},
          {"cached_bytes_per_token", i.cached_bytes_per_token},
          {"boundary_window_state_bytes", i.boundary_window_bytes},
          {"live_decoder_window_bytes", i.live_decoder_window_bytes},
          {"decoder_only_kv_bytes_per_token", i.decoder_only_bytes_per_token}};
}

}  // namespace cedar
