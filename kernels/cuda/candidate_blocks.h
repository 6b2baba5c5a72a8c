// The indexer's candidate blocks (spec §3.5, docs/spec-readings.md #1), per query row r with
// n_vis = lengths[r] visible scores grouped in blocks of block_size (the last may be partial),
// n_blocks = ceil(n_vis / block_size):
//   - n_blocks <= keep: every block 0 .. n_blocks-1;
//   - else the best keep-1 of blocks 0 .. n_blocks-2 by block score (the max score inside the
//     block; ties toward the lower block; blocks whose max is -inf never), then the newest
//     block n_blocks-1.
// Written ascending to out[r, 0..counts[r]) (ld_out >= keep). Equals engine/indexer.cpp's
// ChooseBlocks (which uses TopK over the block maxima). REQUIRES keep >= 1.
//   scores: [n_rows, ld_scores] F32 (at least the first lengths[r] columns of row r valid);
//   lengths: device int32 [n_rows], each in [0, max_len]; workspace: device memory of
//   CandidateBlocksWorkspaceBytes(n_rows, max_len, block_size) bytes.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/cuda/common.h"

namespace cedar::kernels::cuda {

size_t CandidateBlocksWorkspaceBytes(int n_rows, int max_len, int block_size);

Status CandidateBlocks(const float* scores, int64_t ld_scores, const int32_t* lengths, int n_rows, int max_len,
                       int block_size, int keep, void* workspace, int32_t* out, int64_t ld_out, int32_t* counts,
                       Stream stream);

// Restricts a re-index layer's scores to its candidate blocks (engine/indexer.cpp): for each
// row whose cand_counts[r] < n_blocks(lengths[r]), every score in [0, lengths[r]) whose block
// is not among cand[r, 0..cand_counts[r]) becomes -inf. REQUIRES each cand row sorted
// ascending (as CandidateBlocks writes it).
Status MaskToCandidateBlocks(float* scores, int64_t ld_scores, const int32_t* lengths, int n_rows, int max_len,
                             const int32_t* cand, int64_t ld_cand, const int32_t* cand_counts, int block_size,
                             Stream stream);

}  // namespace cedar::kernels::cuda
