// Indexer scores (spec §3.5) for a batch of query rows against pool keys, F32 accumulation:
//   scores[r, j] = Σ_h w[r, h] · ReLU(q[r, h, :] · keys[j, :])
// q: [n_rows, n_heads, head_dim] and keys: [n_keys, head_dim], both of `type` (F32 or BF16);
// w: [n_rows, n_heads] F32 (already scaled by 1/sqrt(head_dim · n_heads)); scores: [n_rows,
// ld_scores] F32, columns [0, n_keys) written. Every key is scored: the caller passes each
// row's visible count to TopK / CandidateBlocks as its length. Equals ref::IndexScores.
//
// How: keys are taken in chunks; per chunk one cuBLAS GEMM writes the per-head dot products
// [n_rows·n_heads, chunk] (F32) to the Blas scratch, then a kernel forms the ReLU-weighted sum.
// The chunk is the largest that fits `scratch_limit_bytes`.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/cuda/common.h"
#include "kernels/cuda/matmul.h"

namespace cedar::kernels::cuda {

struct IndexScoresArgs {
  const void* q = nullptr;       // [n_rows, n_heads, head_dim]
  const void* keys = nullptr;    // [n_keys, head_dim]
  DType type = DType::kF32;      // of q and keys
  const float* w = nullptr;      // [n_rows, n_heads]
  float* scores = nullptr;       // [n_rows, ld_scores]
  int n_rows = 0, n_heads = 0, head_dim = 0, n_keys = 0;
  int64_t ld_scores = 0;         // >= n_keys; 0 means n_keys
  size_t scratch_limit_bytes = size_t(256) << 20;  // bounds the per-chunk dot-product tile
};

Status IndexScores(Blas& blas, const IndexScoresArgs& a, Stream stream);

}  // namespace cedar::kernels::cuda
