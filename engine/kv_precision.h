// The stored KV precision of a model (ModelConfig::kv_dtype): "f32" keeps every window entry, pool
// entry and index key as computed; "released" rounds them as DeepSeek-V4.1 does, right after they
// are computed, so attention and the indexer read the rounded values (docs/v41-contract.md §3,
// "KV as released"). The cache stores rows in the same precision (cache/state_codec.cpp).
#pragma once
#include <cstddef>
#include <cstdint>

#include "engine/config.h"
#include "kernels/kv_quant.h"

namespace cedar {

bool ReleasedKv(const ModelConfig& c);  // kv_dtype == "released"

// Formats of the three stored row kinds under "released".
constexpr kernels::KvRowFormat kWindowRowFormat = kernels::KvRowFormat::kFp8Ue8m0;  // [c]
constexpr kernels::KvRowFormat kPoolEntryFormat = kernels::KvRowFormat::kFp4E4m3;   // [c]
constexpr kernels::KvRowFormat kIndexKeyFormat = kernels::KvRowFormat::kMxfp4;      // [index_head_dim]
constexpr kernels::KvRowFormat kIndexQueryFormat = kernels::KvRowFormat::kMxfp4;    // per head [index_head_dim]

// Stored bytes of one row at the model's kv_dtype (f32: 4 per value).
size_t WindowRowBytes(const ModelConfig& c);  // released: c + c/32 (528 at c = 512)
size_t PoolEntryBytes(const ModelConfig& c);  // released: c/2 + c/16 (288)
size_t IndexKeyBytes(const ModelConfig& c);   // released: h/2 + h/32 (68 at h = 128)

// No-ops under "f32"; under "released" the quantise-dequantise of each row, in place.
void RoundWindowEntries(const ModelConfig& c, float* e, int64_t rows);   // e [rows, c], after RoPE
void RoundPoolEntries(const ModelConfig& c, float* e, int64_t rows);     // e [rows, c], after RoPE
void RoundIndexKeys(const ModelConfig& c, float* k, int64_t rows);       // k [rows, h], after RoPE
void RoundIndexQueries(const ModelConfig& c, float* q, int64_t rows);    // q [rows, heads, h], after RoPE

}  // namespace cedar
