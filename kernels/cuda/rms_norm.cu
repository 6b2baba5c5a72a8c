// RMSNorm (see rms_norm.h): one block per row, two passes over the row (the second usually
// from L1/L2): bytes moved = read x once + write y once, so it runs at memory bandwidth.
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/rms_norm.h"

namespace cedar::kernels::cuda {

namespace {

template <typename X, typename W, typename Y>
__global__ void RmsNormKernel(const X* x, const W* __restrict__ w, Y* y, int dim, float eps) {
  __shared__ float scratch[32];
  const X* xr = x + size_t(blockIdx.x) * dim;
  Y* yr = y + size_t(blockIdx.x) * dim;
  float ss = 0.0f;
  for (int i = threadIdx.x; i < dim; i += blockDim.x) {
    const float v = detail::ToF32(xr[i]);
    ss += v * v;
  }
  ss = detail::BlockSum(ss, scratch);
  const float inv = 1.0f / sqrtf(ss / float(max(dim, 1)) + eps);
  // Each thread rewrites only the elements it read: in place (x == y) is safe.
  for (int i = threadIdx.x; i < dim; i += blockDim.x)
    yr[i] = detail::FromF32<Y>(detail::ToF32(xr[i]) * inv * detail::ToF32(w[i]));
}

}  // namespace

Status RmsNorm(const void* x, DType x_type, const void* weight, DType w_type, void* y, DType y_type, int n, int dim,
               float eps, Stream stream) {
  if (n < 0 || dim < 0) return detail::Invalid("RmsNorm: negative size");
  if (n == 0 || dim == 0) return {};
  if (x == y && x_type != y_type) return detail::Invalid("RmsNorm: in place needs one dtype");
  const int threads = dim >= 1024 ? 512 : dim >= 256 ? 256 : 128;
  return detail::Dispatch(x_type, [&](auto xt) {
    return detail::Dispatch(w_type, [&](auto wt) {
      return detail::Dispatch(y_type, [&](auto yt) {
        using X = typename decltype(xt)::type;
        using W = typename decltype(wt)::type;
        using Y = typename decltype(yt)::type;
        RmsNormKernel<X, W, Y><<<n, threads, 0, detail::AsCuda(stream)>>>(
            static_cast<const X*>(x), static_cast<const W*>(weight), static_cast<Y*>(y), dim, eps);
        return detail::LaunchStatus();
      });
    });
  });
}

}  // namespace cedar::kernels::cuda
