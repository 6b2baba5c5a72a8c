// Radix-select top-k (see topk.h). Per row: 4 histogram passes + 1 output pass over the row,
// so about 5 reads of 4·n bytes; one block per row, so a batch of rows fills the GPU and a
// single long row uses one multiprocessor (splitting a row over blocks is the later speed-up).
#include <cfloat>

#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/topk.h"

namespace cedar::kernels::cuda {

namespace {

constexpr int kThreads = 512;

// Order-preserving map float -> uint32 (a > b  <=>  Key(a) > Key(b) for non-NaN floats);
// -0 maps like +0, so the two tie as they do in float comparisons.
__device__ __forceinline__ uint32_t Key(float x) {
  const uint32_t b = __float_as_uint(x == 0.0f ? 0.0f : x);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

__global__ void __launch_bounds__(kThreads) TopKKernel(const float* __restrict__ scores, int64_t ld_scores,
                                                       const int32_t* __restrict__ lengths, int n, int k,
                                                       int32_t* __restrict__ out, int64_t ld_out,
                                                       int32_t* __restrict__ counts) {
  __shared__ int hist[256];
  __shared__ int scan_scratch[33];
  __shared__ uint32_t s_prefix;
  __shared__ int s_remaining, s_take_all, s_count, s_eq_seen, s_written;
  const int row = blockIdx.x;
  const float* s = scores + size_t(row) * ld_scores;
  const int len = lengths ? min(max(lengths[row], 0), n) : n;
  int32_t* o = out + size_t(row) * ld_out;

  // Radix select: after the pass at `shift`, the bits of the k-th largest key above `shift` are known.
  uint32_t prefix = 0, mask = 0;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int i = threadIdx.x; i < 256; i += blockDim.x) hist[i] = 0;
    __syncthreads();
    for (int i = threadIdx.x; i < len; i += blockDim.x) {
      const float x = s[i];
      if (x == -INFINITY) continue;
      const uint32_t key = Key(x);
      if ((key & mask) == prefix) atomicAdd(&hist[(key >> shift) & 255u], 1);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      if (shift == 24) {  // the first pass sees every eligible entry: fix k and the mode
        int eligible = 0;
        for (int d = 0; d < 256; ++d) eligible += hist[d];
        s_count = min(k, eligible);
        s_take_all = s_count == eligible;
        s_remaining = s_count;
        s_prefix = 0;
      }
      if (!s_take_all) {
        int above = 0, d = 255;
        for (; d > 0 && above + hist[d] < s_remaining; --d) above += hist[d];
        s_remaining -= above;
        s_prefix = prefix | (uint32_t(d) << shift);
      }
    }
    __syncthreads();
    if (s_take_all) break;
    prefix = s_prefix;
    mask |= 255u << shift;
  }
  const int count = s_count;
  if (threadIdx.x == 0) {
    counts[row] = count;
    s_eq_seen = 0;
    s_written = 0;
  }
  if (count == 0) return;
  const bool take_all = s_take_all;
  const uint32_t thr = s_prefix;
  const int take_eq = s_remaining;  // entries == thr to take, lowest indices first
  __syncthreads();

  // Output in index order: entries > thr, then the first take_eq entries == thr.
  for (int start = 0; start < len; start += blockDim.x) {
    const int i = start + threadIdx.x;
    bool gt = false, eq = false;
    if (i < len) {
      const float x = s[i];
      if (x != -INFINITY) {
        const uint32_t key = Key(x);
        gt = take_all || key > thr;
        eq = !take_all && key == thr;
      }
    }
    int eq_total = 0, take_total = 0;
    const int eq_rank = detail::BlockExclusiveScan(eq ? 1 : 0, scan_scratch, &eq_total);
    const bool take = gt || (eq && s_eq_seen + eq_rank < take_eq);
    const int pos = detail::BlockExclusiveScan(take ? 1 : 0, scan_scratch, &take_total);
    if (take) o[s_written + pos] = i;
    __syncthreads();
    if (threadIdx.x == 0) {
      s_eq_seen += eq_total;
      s_written += take_total;
    }
    __syncthreads();
    if (s_written >= count) break;
  }
}

}  // namespace

Status TopK(const float* scores, int64_t ld_scores, const int32_t* lengths, int n_rows, int n, int k, int32_t* out,
            int64_t ld_out, int32_t* counts, Stream stream) {
  if (n_rows < 0 || n < 0 || k < 0) return detail::Invalid("TopK: negative size");
  if (n_rows > 1 && ld_scores < n) return detail::Invalid("TopK: ld_scores < n");
  if (n_rows > 1 && ld_out < k) return detail::Invalid("TopK: ld_out < k");
  if (n_rows == 0) return {};
  if (k == 0 || n == 0) return detail::FromCuda(cudaMemsetAsync(counts, 0, size_t(n_rows) * sizeof(int32_t), detail::AsCuda(stream)));
  TopKKernel<<<n_rows, kThreads, 0, detail::AsCuda(stream)>>>(scores, ld_scores, lengths, n, k, out, ld_out, counts);
  return detail::LaunchStatus();
}

}  // namespace cedar::kernels::cuda
