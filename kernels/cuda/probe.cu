// Device ceilings (see probe.h), timed with CUDA events after warm-ups.
#include <algorithm>
#include <vector>

#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/device.h"
#include "kernels/cuda/matmul.h"
#include "kernels/cuda/probe.h"

namespace cedar::kernels::cuda {

namespace {

__global__ void CopyKernel(const float4* __restrict__ src, float4* __restrict__ dst, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = src[i];
}

__global__ void FillBf16Kernel(__nv_bfloat16* p, int64_t n, uint32_t seed) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    uint64_t x = uint64_t(i) * 0x9E3779B97F4A7C15ull + seed;
    x ^= x >> 31, x *= 0xBF58476D1CE4E5B9ull, x ^= x >> 29;
    p[i] = __float2bfloat16_rn(float(x >> 40) / float(1 << 24) * 2.0f - 1.0f);
  }
}

// Median milliseconds of `reps` timed calls of f after 2 warm-ups.
template <typename F>
Status MedianMs(F f, int reps, double* ms) {
  for (int i = 0; i < 2; ++i) CEDAR_CUDA_TRY(f());
  cudaEvent_t a, b;
  CEDAR_CUDA_TRY(detail::FromCuda(cudaEventCreate(&a)));
  CEDAR_CUDA_TRY(detail::FromCuda(cudaEventCreate(&b)));
  std::vector<float> t;
  Status st;
  for (int i = 0; i < std::max(reps, 1) && st.ok(); ++i) {
    cudaEventRecord(a);
    st = f();
    cudaEventRecord(b);
    cudaEventSynchronize(b);
    float x = 0;
    cudaEventElapsedTime(&x, a, b);
    t.push_back(x);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  CEDAR_CUDA_TRY(st);
  CEDAR_CUDA_TRY(detail::FromCuda(cudaGetLastError()));
  std::sort(t.begin(), t.end());
  *ms = t[t.size() / 2];
  return {};
}

}  // namespace

Status MeasureCopyBandwidthGBs(size_t bytes, int reps, double* gb_s) {
  bytes = bytes / 16 * 16;
  DeviceBuffer src, dst;
  CEDAR_CUDA_TRY(src.Allocate(bytes));
  CEDAR_CUDA_TRY(dst.Allocate(bytes));
  CEDAR_CUDA_TRY(MemsetAsync(src.get(), 1, bytes, nullptr));
  const int64_t n = int64_t(bytes / 16);
  double ms = 0;
  CEDAR_CUDA_TRY(MedianMs(
      [&] {
        CopyKernel<<<4096, 256, 0, nullptr>>>(src.as<const float4>(), dst.as<float4>(), n);
        return detail::LaunchStatus();
      },
      reps, &ms));
  *gb_s = 2.0 * double(bytes) / (ms * 1e-3) / 1e9;
  return {};
}

Status MeasureMatmulTflops(int n, int reps, double* tflop_s) {
  Blas blas;
  CEDAR_CUDA_TRY(blas.Init());
  DeviceBuffer x, w, y;
  const int64_t nn = int64_t(n) * n;
  CEDAR_CUDA_TRY(x.Allocate(size_t(nn) * 2));
  CEDAR_CUDA_TRY(w.Allocate(size_t(nn) * 2));
  CEDAR_CUDA_TRY(y.Allocate(size_t(nn) * 4));
  FillBf16Kernel<<<4096, 256, 0, nullptr>>>(x.as<__nv_bfloat16>(), nn, 1);
  FillBf16Kernel<<<4096, 256, 0, nullptr>>>(w.as<__nv_bfloat16>(), nn, 2);
  CEDAR_CUDA_TRY(detail::LaunchStatus());
  double ms = 0;
  CEDAR_CUDA_TRY(MedianMs(
      [&] { return Matmul(blas, x.get(), DType::kBF16, w.get(), DType::kBF16, y.get(), DType::kF32, n, n, n, 0.0f, nullptr); },
      reps, &ms));
  *tflop_s = 2.0 * double(n) * n * n / (ms * 1e-3) / 1e12;
  return {};
}

}  // namespace cedar::kernels::cuda
