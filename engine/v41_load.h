// Loading a checkpoint in the released DeepSeek-V4.1 layout (issue 21): the released config mapped
// onto ModelConfig, the directory checked against the tensor inventory (engine/v41_checkpoint.h),
// every weight dequantised once into the WeightArena (FP8 32x32 / packed FP4 with E8M0 scales, BF16,
// F32), one tensor at a time from the memory-mapped shards. What loads and what not:
// docs/v41-contract.md §8.
#pragma once
#include <cstdint>
#include <string>

#include "engine/config.h"
#include "engine/v41_config.h"

namespace cedar {

// Maps every released field onto ModelConfig (weight_layout "deepseek_v41", chat_format
// "deepseek_v41", n_encoder_layers = n_layers / 2, compress_ratios trimmed to the backbone,
// o_group_rank = o_lora_rank, candidate -1 -> 0 (off), engram_table_rows = engram_num_embeddings,
// max_seq_len = max_positions, kv_dtype "f32" for now) and validates the result with
// ModelConfig::Validate. Throws std::invalid_argument listing every problem, each naming the key as
// spelled in the released file (`where` prefixes the messages, usually the config path).
ModelConfig ModelConfigFromV41(const V41Config& v, const std::string& where);

// The model fingerprint of a released directory: XXH3-64 over config.json's bytes (or
// inference/config.json's), model.safetensors.index.json's bytes and, for every shard in name order,
// its file name, its size, its header bytes (the 8-byte length + JSON header) and the first and last
// 64 KiB of its data (<= 6 MiB read for the released 48 shards). The rest of the tensor data is not
// read: hashing 510 GB at start-up is not acceptable. The headers pin names, dtypes, shapes and
// offsets, the sizes the data extent, the data ends tell apart checkpoints of one shape with other
// weights (e.g. `cedar init` seeds); a weight changed in the middle of a shard is not detected.
uint64_t ReleasedFingerprint(const std::string& dir, const std::string& config_path);

// Where the released config of `dir` is: DIR/config.json, else DIR/inference/config.json; "" if none.
std::string ReleasedConfigPath(const std::string& dir);

}  // namespace cedar
