// Seeded random-weight models in the standard layout (config.json + model.safetensors).
#pragma once
#include <cstdint>
#include <string>

#include "engine/config.h"

namespace cedar {

// Scaling (keeps activations O(1) through every layer): linear weights ~ N(0, 1/fan_in);
// the two projections that write into the residual stream (attn.wo_b, ffn w2) are further
// scaled by 1/sqrt(2L); embeddings ~ N(0, 1); RMSNorm weights = 1; sinks = 0; router bias
// ~ N(0, 0.01^2). Each tensor draws from its own generator seeded by (seed, name), so a
// tensor's values do not depend on the order of the others.
// Throws std::runtime_error if the config is invalid or the directory cannot be written.
void WriteRandomModel(const ModelConfig& c, uint64_t seed, const std::string& dir, bool bf16 = false);

}  // namespace cedar
