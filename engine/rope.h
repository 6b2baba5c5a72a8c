// RoPE per layer (notes §1.1, §2.2; tools/reference/v41/rope.py): plain over rope_theta on
// ratio-0 layers; over compress_rope_theta on compressed layers (ratio > 0), YaRN-corrected when
// rope_factor > 1. Every rotation of a compressed layer uses its table: queries, window entries,
// the output's de-rotation, pool entries, index keys and index queries.
#pragma once
#include <cstdint>
#include <vector>

#include "engine/config.h"

namespace cedar {

// True when `layer` rotates with the YaRN table (ratio > 0, rope_factor > 1, original > 0).
bool UsesYarn(const ModelConfig& c, int layer);

// The YaRN inverse frequencies [r/2] over `base` (rope.py yarn_inv_freq, no attention-scale
// mscale: the V4.1 reading, docs/v41-contract.md): f_i = base^(-2i/r); ramp_i =
// clamp((i - low) / max(high - low, 1e-3), 0, 1) with low/high the floor/ceil of the correction
// dims of beta_fast/beta_slow, clamped to [0, r - 1]; f_i / factor * ramp_i + f_i (1 - ramp_i).
std::vector<double> YarnInvFreq(int r, double base, double factor, int64_t original, double beta_fast, double beta_slow);

// Rot(sign * pos) of the last rope_dim dims of each of n_vecs vectors [vec_dim] per row
// (x [n_rows, n_vecs, vec_dim]) with layer `layer`'s table. Plain layers call kernels::Rope
// itself (bit-identical to before YaRN existed); YaRN layers do the same arithmetic with the
// YaRN frequencies.
void RopeLayer(const ModelConfig& c, int layer, float* x, int n_rows, int n_vecs, int vec_dim,
               const int64_t* positions, int sign);

}  // namespace cedar
