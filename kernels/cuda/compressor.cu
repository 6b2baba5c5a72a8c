// Softmax-pair compressor (see compressor.h): one block per group; the combined row is formed
// twice (once for its sum of squares, once to write it) rather than kept in shared memory, so
// any dim works; the second read comes from L1/L2.
#include "kernels/cuda/compressor.h"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/device_math.cuh"

namespace cedar::kernels::cuda {

namespace {

template <typename I>
__device__ __forceinline__ float Combine(const I* c, const I* z, int dim, int i) {
  const float z0 = detail::ToF32(z[i]), z1 = detail::ToF32(z[dim + i]);
  const float mz = fmaxf(z0, z1);
  const float e0 = expf(z0 - mz), e1 = expf(z1 - mz);
  return (e0 * detail::ToF32(c[i]) + e1 * detail::ToF32(c[dim + i])) / (e0 + e1);
}

template <typename I, typename W, typename O>
__global__ void CompressPairsKernel(const I* __restrict__ c, const I* __restrict__ z, const W* __restrict__ w,
                                    O* __restrict__ out, int dim, float eps) {
  __shared__ float scratch[32];
  const size_t j = blockIdx.x;
  const I* cj = c + 2 * j * dim;
  const I* zj = z + 2 * j * dim;
  float ss = 0.0f;
  for (int i = threadIdx.x; i < dim; i += blockDim.x) {
    const float v = Combine(cj, zj, dim, i);
    ss += v * v;
  }
  ss = detail::BlockSum(ss, scratch);
  const float inv = 1.0f / sqrtf(ss / float(max(dim, 1)) + eps);
  for (int i = threadIdx.x; i < dim; i += blockDim.x)
    out[j * dim + i] = detail::FromF32<O>(Combine(cj, zj, dim, i) * inv * detail::ToF32(w[i]));
}

}  // namespace

Status CompressPairs(const void* c, const void* z, DType in_type, const void* norm_weight, DType w_type, void* out,
                     DType out_type, int n_groups, int dim, float eps, Stream stream) {
  if (n_groups < 0 || dim < 0) return detail::Invalid("CompressPairs: negative size");
  if (n_groups == 0 || dim == 0) return {};
  const int threads = dim >= 256 ? 256 : 128;
  return detail::Dispatch(in_type, [&](auto it) {
    return detail::Dispatch(w_type, [&](auto wt) {
      return detail::Dispatch(out_type, [&](auto ot) {
        using I = typename decltype(it)::type;
        using W = typename decltype(wt)::type;
        using O = typename decltype(ot)::type;
        CompressPairsKernel<I, W, O><<<n_groups, threads, 0, detail::AsCuda(stream)>>>(
            static_cast<const I*>(c), static_cast<const I*>(z), static_cast<const W*>(norm_weight),
            static_cast<O*>(out), dim, eps);
        return detail::LaunchStatus();
      });
    });
  });
}

}  // namespace cedar::kernels::cuda
