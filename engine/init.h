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

// The tensors' type on disk (`cedar init --dtype`). The values are drawn in F32 as above, then:
enum class InitDType {
  kF32,   // every tensor F32
  kBF16,  // every tensor BF16 (rounded to nearest even)
  kI8,    // the matmul weights (IsMatmulTensor) INT8: `X.weight` I8 [shape] + `X.scale` BF16 [shape with
          // the last dim ceil(in / 32)], kernels::QuantizeI8's symmetric blocks of 32 along the input
          // (docs/WEIGHTS.md); every other tensor F32. The same bytes `--weights int8` makes of the F32 twin.
};
// Parses `--dtype`; throws std::invalid_argument naming f32, bf16 and int8.
InitDType ParseInitDType(const std::string& s);
void WriteRandomModel(const ModelConfig& c, uint64_t seed, const std::string& dir, InitDType dtype);

}  // namespace cedar
