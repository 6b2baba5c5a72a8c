// Candidate blocks (see candidate_blocks.h): block maxima into the workspace, TopK over them
// (radix select, ties toward the lower block), then the newest block appended.
#include <algorithm>

#include "kernels/cuda/candidate_blocks.h"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/topk.h"

namespace cedar::kernels::cuda {

namespace {

int MaxBlocks(int max_len, int block_size) { return (max_len + block_size - 1) / block_size; }

// bmax[r, b] = max(scores[r, b·bs .. (b+1)·bs)) for the full blocks b < n_blocks - 1 of rows
// with more than `keep` blocks; blen[r] = how many block maxima TopK ranks (0: keep all).
__global__ void BlockMaxKernel(const float* __restrict__ scores, int64_t ld_scores, const int32_t* __restrict__ lengths,
                               int block_size, int keep, int max_blocks, float* __restrict__ bmax,
                               int32_t* __restrict__ blen) {
  const int r = blockIdx.y;
  const int n_vis = lengths[r];
  const int n_blocks = (n_vis + block_size - 1) / block_size;
  const bool ranked = n_blocks > keep;
  if (blockIdx.x == 0 && threadIdx.x == 0) blen[r] = ranked ? n_blocks - 1 : 0;
  if (!ranked) return;
  const float* s = scores + size_t(r) * ld_scores;
  for (int b = blockIdx.x * blockDim.x + threadIdx.x; b < n_blocks - 1; b += gridDim.x * blockDim.x) {
    float m = -INFINITY;
    for (int j = b * block_size; j < (b + 1) * block_size; ++j) m = fmaxf(m, s[j]);
    bmax[size_t(r) * max_blocks + b] = m;
  }
}

// Rows with at most `keep` blocks keep all; others get the newest block after their ranked ones.
__global__ void FinishKernel(const int32_t* __restrict__ lengths, int block_size, int keep, int32_t* __restrict__ out,
                             int64_t ld_out, int32_t* __restrict__ counts) {
  const int r = blockIdx.x;
  const int n_blocks = (lengths[r] + block_size - 1) / block_size;
  int32_t* o = out + size_t(r) * ld_out;
  if (n_blocks <= keep) {
    for (int b = threadIdx.x; b < n_blocks; b += blockDim.x) o[b] = b;
    if (threadIdx.x == 0) counts[r] = n_blocks;
  } else if (threadIdx.x == 0) {
    o[counts[r]] = n_blocks - 1;
    counts[r] += 1;
  }
}

__device__ __forceinline__ bool Listed(const int32_t* cand, int n, int32_t b) {
  int lo = 0, hi = n;  // binary search in the ascending list
  while (lo < hi) {
    const int mid = (lo + hi) >> 1;
    if (cand[mid] < b) lo = mid + 1;
    else hi = mid;
  }
  return lo < n && cand[lo] == b;
}

__global__ void MaskKernel(float* __restrict__ scores, int64_t ld_scores, const int32_t* __restrict__ lengths,
                           const int32_t* __restrict__ cand, int64_t ld_cand, const int32_t* __restrict__ cand_counts,
                           int block_size) {
  const int r = blockIdx.y;
  const int n_vis = lengths[r], nk = cand_counts[r];
  const int n_blocks = (n_vis + block_size - 1) / block_size;
  if (nk >= n_blocks) return;  // all blocks kept: unrestricted
  const int32_t* c = cand + size_t(r) * ld_cand;
  float* s = scores + size_t(r) * ld_scores;
  for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < n_vis; j += gridDim.x * blockDim.x)
    if (!Listed(c, nk, j / block_size)) s[j] = -INFINITY;
}

}  // namespace

size_t CandidateBlocksWorkspaceBytes(int n_rows, int max_len, int block_size) {
  if (n_rows <= 0 || block_size <= 0) return 0;
  return size_t(n_rows) * (size_t(MaxBlocks(max_len, block_size)) * sizeof(float) + sizeof(int32_t));
}

Status CandidateBlocks(const float* scores, int64_t ld_scores, const int32_t* lengths, int n_rows, int max_len,
                       int block_size, int keep, void* workspace, int32_t* out, int64_t ld_out, int32_t* counts,
                       Stream stream) {
  if (n_rows < 0 || max_len < 0) return detail::Invalid("CandidateBlocks: negative size");
  if (block_size <= 0 || keep < 1) return detail::Invalid("CandidateBlocks: block_size and keep must be >= 1");
  if (n_rows > 1 && ld_out < keep) return detail::Invalid("CandidateBlocks: ld_out < keep");
  if (n_rows == 0) return {};
  if (n_rows > 65535) return detail::Invalid("CandidateBlocks: more than 65535 rows in one call");
  const int max_blocks = MaxBlocks(max_len, block_size);
  float* bmax = static_cast<float*>(workspace);
  auto* blen = reinterpret_cast<int32_t*>(bmax + size_t(n_rows) * max_blocks);
  const cudaStream_t st = detail::AsCuda(stream);
  const dim3 grid(std::max(1, std::min((max_blocks + 255) / 256, 1024)), n_rows);
  BlockMaxKernel<<<grid, 256, 0, st>>>(scores, ld_scores, lengths, block_size, keep, max_blocks, bmax, blen);
  CEDAR_CUDA_TRY(detail::LaunchStatus());
  CEDAR_CUDA_TRY(TopK(bmax, max_blocks, blen, n_rows, max_blocks, keep - 1, out, ld_out, counts, stream));
  FinishKernel<<<n_rows, 128, 0, st>>>(lengths, block_size, keep, out, ld_out, counts);
  return detail::LaunchStatus();
}

Status MaskToCandidateBlocks(float* scores, int64_t ld_scores, const int32_t* lengths, int n_rows, int max_len,
                             const int32_t* cand, int64_t ld_cand, const int32_t* cand_counts, int block_size,
                             Stream stream) {
  if (n_rows < 0 || max_len < 0) return detail::Invalid("MaskToCandidateBlocks: negative size");
  if (block_size <= 0) return detail::Invalid("MaskToCandidateBlocks: block_size must be >= 1");
  if (n_rows == 0 || max_len == 0) return {};
  if (n_rows > 65535) return detail::Invalid("MaskToCandidateBlocks: more than 65535 rows in one call");
  const dim3 grid(std::max(1, std::min((max_len + 255) / 256, 4096)), n_rows);
  MaskKernel<<<grid, 256, 0, detail::AsCuda(stream)>>>(scores, ld_scores, lengths, cand, ld_cand, cand_counts,
                                                       block_size);
  return detail::LaunchStatus();
}

}  // namespace cedar::kernels::cuda
