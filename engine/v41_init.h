// Seeded random models in EXACTLY the released DeepSeek-V4.1 layout (issue 21): config.json in the
// HF spelling (nested text_config, quantization_config), every tensor of the inventory
// (engine/v41_info.h) with its released dtype (FP8 E4M3 + 32x32 E8M0 scales, FP4 experts packed two
// per I8 byte + one E8M0 per 32, BF16, F32), one shard per backbone layer like the release plus
// embed / DSpark / Engram / head shards, and model.safetensors.index.json with total_size. So every
// test runs the real loading code (engine/v41_load.cpp).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "engine/v41_config.h"

namespace cedar {

// Reduced released configs:
//   "v41-tiny"        d 64, 6 layers (E = 3): 0 SWA-only, 1 ratio-2 kv source, 2 ratio-2 reuse, 3 ratio-1
//                     source at E (candidate source), 4 ratio-1 reuse, 5 re-index layer with candidates;
//                     hc_mult 4, YaRN, 4 experts + 1 shared, one DSpark block, vocab 129280 (the released
//                     tokenizer), no Engram (engram_layer_ids [] so the loader can load it).
//   "v41-tiny-engram" v41-tiny with an Engram before layer 1 (small tables), as the release has.
//   "v41-small"       d 512, 24 layers (E = 12), 8 experts: the benchmark shape of Cedar's "small".
bool V41PresetConfig(const std::string& name, V41Config* out);
std::vector<std::string> V41PresetNames();

// The released config.json (HF spelling) for `c`; ParseV41Config reads it back to `c`.
nlohmann::json V41ConfigToHfJson(const V41Config& c);

// Writes config.json, the shards and the index into `dir` (created). Values: embeddings N(0, 1);
// linear weights N(0, 1/fan_in), wo_b and w2 further / sqrt(2 L); norms 1; attn_sink N(0, 0.5^2);
// router bias N(0, 0.01^2); mHC fn N(0, 1/(hc d)), scale U(0.05, 0.15), base N(0, 0.3^2) with +4 on
// the comb diagonal (comb starts near the identity, as a trained mHC does); Engram and DSpark
// tensors like the dense ones. Each tensor draws from its own generator seeded by (seed, name), then
// is quantised with kernels/quant_formats.h (the released rounding rules).
// Returns the bytes written (the index's total_size). Throws std::runtime_error on I/O failure.
int64_t WriteReleasedModel(const V41Config& c, uint64_t seed, const std::string& dir);

}  // namespace cedar
