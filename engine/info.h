// Parameter counts and cache sizes of a config, computed from the shapes alone (no weights).
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "engine/config.h"
#include "kernels/weight_view.h"

namespace cedar {

struct ModelInfo {
  int64_t total_params = 0;             // every tensor
  int64_t embed_params = 0;             // embed.weight
  int64_t head_params = 0;              // head.weight
  int64_t active_per_layer_max = 0;     // largest per-token active count of one layer
  int64_t active_per_prefill_token = 0; // encoder layers + layer E's window/pool projections
  int64_t active_per_decode_token = 0;  // every layer + final norm + head
  int64_t matmul_active_per_decode_token = 0;  // of those, the matmul weights (IsMatmulTensor: --weights applies)
  // Byte counts below are at the config's kv_dtype (engine/kv_precision.h): "f32" rows of 4-byte
  // floats, or "released" rows (window FP8 c + c/32, pool entry c/2 + c/16, index key h/2 + h/32).
  std::string kv_dtype;
  // Bytes per cached token, by pool layer: (entry + index key bytes) / m.
  std::vector<std::pair<int, double>> pool_bytes_per_token;
  double cached_bytes_per_token = 0;         // all pools (890 on flash with released KV)
  int64_t boundary_window_bytes = 0;         // encoder windows E*W rows + H_E tail W*d F32, at P >= W
  int64_t live_decoder_window_bytes = 0;     // (L-E)*W window rows, held only by a live session
  double decoder_only_bytes_per_token = 0;   // a plain decoder caching one window-precision row in all L layers
};

ModelInfo ComputeInfo(const ModelConfig& c);
// Bytes of weights one decode token streams with the matmul weights stored as `t` (scales
// included; every other active parameter F32).
// `cols`: a typical input width (the model dim) for the share of the block scales.
double DecodeWeightBytes(const ModelInfo& i, kernels::WeightType t, int64_t cols);
// The same at --weights fp8-fp4 (ReleasedTypeOf): routed experts FP4, the head BF16, the other
// matmul weights FP8.
double DecodeWeightBytesReleased(const ModelInfo& i, const ModelConfig& c);
// Routed-expert matmul parameters one decode token reads (experts_per_token experts a layer).
double RoutedParamsPerDecodeToken(const ModelConfig& c);
// The same with the bytes per parameter a loaded model holds (Model::dense_matmul_bytes_per_param,
// routed_expert_bytes_per_param): what `cedar bench` divides by on the CPU.
double DecodeWeightBytesHeld(const ModelInfo& i, const ModelConfig& c, double dense_bytes_per_param, double routed_bytes_per_param);
nlohmann::json InfoToJson(const ModelInfo& i);

}  // namespace cedar
