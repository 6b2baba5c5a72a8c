// MoE router and grouping (see moe_route.h). The router is one warp per row: the scores live in
// shared memory and k rounds of warp arg-max pick the experts (k is small: 6 in V4.1-Flash).
// The grouping is a counting sort: counts by atomics, one block scans the offsets, then one
// block per expert walks the choices in (row, slot) order with a block prefix sum, which keeps
// rows ascending within each expert without sorting.
#include <algorithm>

#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/moe_route.h"

namespace cedar::kernels::cuda {

namespace {

constexpr int kRouteWarps = 4;

__global__ void __launch_bounds__(kRouteWarps * 32) RouteKernel(const float* __restrict__ logits,
                                                                const float* __restrict__ bias, int n_rows, int ne,
                                                                int k, float route_scale, int32_t* __restrict__ experts,
                                                                float* __restrict__ weights) {
  extern __shared__ float sh[];  // per warp: s[ne], choice[ne]
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int r = blockIdx.x * kRouteWarps + warp;
  if (r >= n_rows) return;  // whole warps leave: no block-wide barrier below
  float* s = sh + size_t(warp) * 2 * ne;
  float* choice = s + ne;
  for (int e = lane; e < ne; e += 32) {
    const float x = logits[size_t(r) * ne + e];
    const float sv = sqrtf(x > 20.0f ? x : log1pf(expf(x)));
    s[e] = sv;
    choice[e] = sv + bias[e];
  }
  __syncwarp();
  float sum = 0.0f;
  int mine = 0;  // lane j keeps the j-th choice (k <= 32)
  for (int j = 0; j < k; ++j) {
    float best = 0.0f;
    int bi = -1;
    for (int e = lane; e < ne; e += 32) {
      const float c = choice[e];
      if (c != c) continue;  // NaN marks an expert already taken
      if (bi < 0 || c > best) best = c, bi = e;  // e ascends: ties keep the lower expert
    }
    for (int o = 16; o > 0; o >>= 1) {
      const float ob = __shfl_xor_sync(0xffffffffu, best, o);
      const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
      if (oi >= 0 && (bi < 0 || ob > best || (ob == best && oi < bi))) best = ob, bi = oi;
    }
    if (bi < 0) bi = 0;  // only with NaN scores (unsupported): stay in bounds
    if (lane == j) mine = bi;
    sum += s[bi];
    __syncwarp();
    if (lane == 0) choice[bi] = __int_as_float(0x7fc00000);  // taken
    __syncwarp();
  }
  if (lane < k) {
    experts[size_t(r) * k + lane] = mine;
    weights[size_t(r) * k + lane] = route_scale * s[mine] / sum;
  }
}

__global__ void CountKernel(const int32_t* __restrict__ experts, int64_t n, int32_t* __restrict__ counts) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    atomicAdd(&counts[experts[i]], 1);
}

__global__ void OffsetsKernel(const int32_t* __restrict__ counts, int ne, int32_t* __restrict__ offsets) {
  __shared__ int scratch[33];
  __shared__ int carry;
  if (threadIdx.x == 0) carry = 0;
  for (int base = 0; base < ne; base += blockDim.x) {
    const int e = base + threadIdx.x;
    int total = 0;
    const int ex = detail::BlockExclusiveScan(e < ne ? counts[e] : 0, scratch, &total);
    if (e < ne) offsets[e] = carry + ex;
    __syncthreads();
    if (threadIdx.x == 0) carry += total;
    __syncthreads();
  }
  if (threadIdx.x == 0) offsets[ne] = carry;
}

__global__ void FillKernel(const int32_t* __restrict__ experts, int64_t n, int k, const int32_t* __restrict__ offsets,
                           int32_t* __restrict__ rows, int32_t* __restrict__ position) {
  __shared__ int scratch[33];
  const int e = blockIdx.x;
  int written = offsets[e];  // kept identical in every thread
  for (int64_t base = 0; base < n; base += blockDim.x) {
    const int64_t i = base + threadIdx.x;
    const bool mine = i < n && experts[i] == e;
    int total = 0;
    const int rank = detail::BlockExclusiveScan(mine ? 1 : 0, scratch, &total);
    if (mine) {
      rows[written + rank] = int32_t(i / k);
      position[i] = written + rank;
    }
    written += total;
  }
}

}  // namespace

Status MoeRoute(const float* logits, const float* bias, int n_rows, int n_experts, int k, float route_scale,
                int32_t* experts, float* weights, Stream stream) {
  if (n_rows < 0) return detail::Invalid("MoeRoute: negative size");
  if (k < 1 || k > 32 || k > n_experts) return detail::Invalid("MoeRoute: need 1 <= k <= min(n_experts, 32)");
  if (n_rows == 0) return {};
  const size_t shm = size_t(kRouteWarps) * 2 * n_experts * sizeof(float);
  if (shm > 48 * 1024) return detail::Invalid("MoeRoute: more than 1536 experts");
  const int blocks = (n_rows + kRouteWarps - 1) / kRouteWarps;
  RouteKernel<<<blocks, kRouteWarps * 32, shm, detail::AsCuda(stream)>>>(logits, bias, n_rows, n_experts, k,
                                                                        route_scale, experts, weights);
  return detail::LaunchStatus();
}

Status MoeGroup(const int32_t* experts, int n_rows, int n_experts, int k, int32_t* counts, int32_t* offsets,
                int32_t* rows, int32_t* position, Stream stream) {
  if (n_rows < 0 || n_experts < 1 || k < 1) return detail::Invalid("MoeGroup: bad size");
  const cudaStream_t st = detail::AsCuda(stream);
  const int64_t n = int64_t(n_rows) * k;
  CEDAR_CUDA_TRY(detail::FromCuda(cudaMemsetAsync(counts, 0, size_t(n_experts) * sizeof(int32_t), st)));
  if (n > 0) {
    CountKernel<<<int(std::min<int64_t>((n + 255) / 256, 1024)), 256, 0, st>>>(experts, n, counts);
    CEDAR_CUDA_TRY(detail::LaunchStatus());
  }
  OffsetsKernel<<<1, 1024, 0, st>>>(counts, n_experts, offsets);
  CEDAR_CUDA_TRY(detail::LaunchStatus());
  if (n == 0) return {};
  FillKernel<<<n_experts, 256, 0, st>>>(experts, n, k, offsets, rows, position);
  return detail::LaunchStatus();
}

}  // namespace cedar::kernels::cuda
