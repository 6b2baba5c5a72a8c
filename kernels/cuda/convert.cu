// Element-type conversion (see convert.h). Memory-bound: one read and one write per element.
#include <algorithm>

#include "kernels/cuda/convert.h"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/device_math.cuh"

namespace cedar::kernels::cuda {

namespace {

template <typename S, typename D>
__global__ void ConvertKernel(const S* __restrict__ src, D* __restrict__ dst, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = detail::FromF32<D>(detail::ToF32(src[i]));
}

}  // namespace

Status Convert(const void* src, DType src_type, void* dst, DType dst_type, int64_t n, Stream stream) {
  if (n < 0) return detail::Invalid("Convert: n < 0");
  if (n == 0) return {};
  if (src_type == dst_type)
    return detail::FromCuda(cudaMemcpyAsync(dst, src, size_t(n) * SizeOf(src_type), cudaMemcpyDeviceToDevice,
                                            detail::AsCuda(stream)));
  const int threads = 256;
  const int blocks = int(std::min<int64_t>((n + threads - 1) / threads, 65536));
  return detail::Dispatch(src_type, [&](auto s) {
    return detail::Dispatch(dst_type, [&](auto d) {
      using S = typename decltype(s)::type;
      using D = typename decltype(d)::type;
      ConvertKernel<S, D><<<blocks, threads, 0, detail::AsCuda(stream)>>>(static_cast<const S*>(src),
                                                                           static_cast<D*>(dst), n);
      return detail::LaunchStatus();
    });
  });
}

}  // namespace cedar::kernels::cuda
