// Interleaved RoPE on the last rope_dim dims of each vector, in place (spec §3, readings #4):
// pair i of the RoPE part, dims (2i, 2i+1), of every vector of row r is rotated by
//   angle = pos_r · base^(-2i/rope_dim) · sign        (sign -1: the inverse rotation)
// x: [n_rows, n_vecs, vec_dim], F32 or BF16. pos_r = positions[r] (device int64 [n_rows]) or,
// when positions is null, pos_first + r · pos_step (index keys: (first_entry + j) · ratio).
// Angles and their sine and cosine are computed in double, the rotation in F32. Equals ref::Rope.
#pragma once
#include <cstdint>

#include "kernels/cuda/common.h"

namespace cedar::kernels::cuda {

Status Rope(void* x, DType type, int n_rows, int n_vecs, int vec_dim, int rope_dim, const int64_t* positions,
            int64_t pos_first, int64_t pos_step, float base, int sign, Stream stream);

}  // namespace cedar::kernels::cuda
