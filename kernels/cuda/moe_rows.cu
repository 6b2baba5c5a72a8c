// Gather and scatter of expert rows (see moe_rows.h): one block per row, threads over dim.
#include <algorithm>

#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/moe_rows.h"

namespace cedar::kernels::cuda {

namespace {

template <typename T>
__global__ void GatherKernel(const T* __restrict__ x, const int32_t* __restrict__ rows, int dim, T* __restrict__ xg) {
  const T* src = x + size_t(rows[blockIdx.x]) * dim;
  T* dst = xg + size_t(blockIdx.x) * dim;
  for (int i = threadIdx.x; i < dim; i += blockDim.x) dst[i] = src[i];
}

template <typename Y>
__global__ void ScatterAddKernel(const Y* __restrict__ y, const int32_t* __restrict__ position,
                                 const float* __restrict__ weights, int k, int dim, float* __restrict__ h) {
  const size_t r = blockIdx.x;
  const int32_t* pos = position + r * k;
  const float* wr = weights + r * k;
  float* hr = h + r * dim;
  for (int i = threadIdx.x; i < dim; i += blockDim.x) {
    float acc = 0.0f;
    for (int j = 0; j < k; ++j) acc += wr[j] * detail::ToF32(y[size_t(pos[j]) * dim + i]);
    hr[i] += acc;
  }
}

}  // namespace

Status MoeGather(const void* x, DType type, const int32_t* rows, int n, int dim, void* xg, Stream stream) {
  if (n < 0 || dim < 0) return detail::Invalid("MoeGather: negative size");
  if (n == 0 || dim == 0) return {};
  const int threads = dim >= 512 ? 256 : 128;
  return detail::Dispatch(type, [&](auto t) {
    using T = typename decltype(t)::type;
    GatherKernel<T><<<n, threads, 0, detail::AsCuda(stream)>>>(static_cast<const T*>(x), rows, dim, static_cast<T*>(xg));
    return detail::LaunchStatus();
  });
}

Status MoeScatterAdd(const void* y, DType y_type, const int32_t* position, const float* weights, int n_rows, int k,
                     int dim, float* h, Stream stream) {
  if (n_rows < 0 || k < 0 || dim < 0) return detail::Invalid("MoeScatterAdd: negative size");
  if (n_rows == 0 || k == 0 || dim == 0) return {};
  const int threads = dim >= 512 ? 256 : 128;
  return detail::Dispatch(y_type, [&](auto t) {
    using Y = typename decltype(t)::type;
    ScatterAddKernel<Y><<<n_rows, threads, 0, detail::AsCuda(stream)>>>(static_cast<const Y*>(y), position, weights,
                                                                         k, dim, h);
    return detail::LaunchStatus();
  });
}

}  // namespace cedar::kernels::cuda
