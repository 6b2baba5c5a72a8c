// Parameter counts and cache sizes of a config, computed from the shapes alone (no weights).
#pragma once
#include <cstdint>

#include <nlohmann/json_fwd.hpp>

#include "engine/config.h"

namespace cedar {

struct ModelInfo {
  int64_t total_params = 0;             // every tensor
  int64_t embed_params = 0;             // embed.weight
  int64_t head_params = 0;              // head.weight
  int64_t active_per_layer_max = 0;     // largest per-token active count of one layer
  int64_t active_per_prefill_token = 0; // encoder layers + layer E's window/pool projections
  int64_t active_per_decode_token = 0;  // every layer + final norm + head
  // Bytes per cached token, by pool layer (F32 state): (c + index_head_dim) / m * 4.
  std::vector<std::pair<int, double>> pool_bytes_per_token;
  double cached_bytes_per_token = 0;         // all pools
  int64_t boundary_window_bytes = 0;         // encoder windows E*W*c + H_E tail W*d, at P >= W
  int64_t live_decoder_window_bytes = 0;     // (L-E)*W*c, held only by a live session
  double decoder_only_bytes_per_token = 0;   // a plain decoder caching K=V (c) in all L layers
};

ModelInfo ComputeInfo(const ModelConfig& c);
nlohmann::json InfoToJson(const ModelInfo& i);

}  // namespace cedar
