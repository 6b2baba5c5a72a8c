// Batched top-k (spec §3: every ranking breaks ties toward the lower index):
// for each row r, the indices of the k largest scores[r, 0..len_r), ties toward the lower
// index, written sorted ascending to out[r, 0..counts[r]); counts[r] = min(k, number of entries
// != -inf). Entries equal to -inf are never chosen (masked or invisible entries).
//   scores: [n_rows, ld_scores] F32; len_r = lengths[r] (device int32 [n_rows], each in [0, n])
//   or n when lengths is null; out: [n_rows, ld_out] int32 with ld_out >= k; counts: [n_rows].
// Any k (the indexer's 512, the candidate blocks' 2047) and n up to 2^31 - 1. NaN scores are
// unsupported. Equals ref::TopK per row.
//
// How: one block per row; a 4-pass radix select (8 bits a pass on the order-preserving integer
// image of each float) finds the k-th largest value T and how many entries equal to T to take;
// a last pass walks the row in index order and writes every entry > T and the first such
// entries == T through block-wide prefix sums, which yields the ascending order for free.
#pragma once
#include <cstdint>

#include "kernels/cuda/common.h"

namespace cedar::kernels::cuda {

Status TopK(const float* scores, int64_t ld_scores, const int32_t* lengths, int n_rows, int n, int k, int32_t* out,
            int64_t ld_out, int32_t* counts, Stream stream);

}  // namespace cedar::kernels::cuda
