// Internal device helpers shared by the kernels: loads and stores in F32 whatever the storage
// type, warp and block reductions, a block-wide exclusive scan.
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

namespace cedar::kernels::cuda::detail {

__device__ __forceinline__ float ToF32(float x) { return x; }
__device__ __forceinline__ float ToF32(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename T>
__device__ __forceinline__ T FromF32(float x);
template <>
__device__ __forceinline__ float FromF32<float>(float x) { return x; }
template <>
__device__ __forceinline__ __nv_bfloat16 FromF32<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

__device__ __forceinline__ float WarpSum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Sum over the block, returned to every thread. `scratch` holds 32 floats; blockDim.x is a
// multiple of 32. Contains __syncthreads: every thread of the block must call it.
__device__ __forceinline__ float BlockSum(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
  v = WarpSum(v);
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < n_warps ? scratch[lane] : 0.0f;
  return WarpSum(v);
}

// Exclusive prefix sum of `v` over the block in thread order; *total receives the block's sum.
// `scratch` holds 33 ints; blockDim.x is a multiple of 32 and at most 1024. Contains
// __syncthreads: every thread of the block must call it.
__device__ __forceinline__ int BlockExclusiveScan(int v, int* scratch, int* total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
  int inc = v;
  for (int o = 1; o < 32; o <<= 1) {
    const int t = __shfl_up_sync(0xffffffffu, inc, o);
    if (lane >= o) inc += t;
  }
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 31) scratch[warp] = inc;
  __syncthreads();
  if (warp == 0) {
    int w = lane < n_warps ? scratch[lane] : 0;
    for (int o = 1; o < 32; o <<= 1) {
      const int t = __shfl_up_sync(0xffffffffu, w, o);
      if (lane >= o) w += t;
    }
    if (lane < n_warps) scratch[lane] = w;  // inclusive over warps
    if (lane == 31) scratch[32] = w;
  }
  __syncthreads();
  *total = scratch[32];
  return inc - v + (warp > 0 ? scratch[warp - 1] : 0);
}

}  // namespace cedar::kernels::cuda::detail
