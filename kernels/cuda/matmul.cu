// cuBLAS products (see matmul.h). Row-major y[n, out] = x[n, in] · w[out, in]^T is, in cuBLAS's
// column-major terms, y^T[out, n] = op_T(w as [in, out]) · (x as [in, n]).
#include <algorithm>

#include "kernels/cuda/convert.h"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/matmul.h"

namespace cedar::kernels::cuda {

using detail::FromCublas;
using detail::FromCuda;
using detail::Invalid;

Blas::~Blas() {
  if (scratch_) cudaFree(scratch_);
  if (handle_) cublasDestroy(static_cast<cublasHandle_t>(handle_));
}

Status Blas::Init() {
  if (handle_) return {};
  cublasHandle_t h = nullptr;
  CEDAR_CUDA_TRY(FromCublas(cublasCreate(&h)));
  handle_ = h;
  return {};
}

Status Blas::Reserve(size_t bytes) {
  if (bytes <= scratch_bytes_) return {};
  if (scratch_) cudaFree(scratch_);
  scratch_ = nullptr, scratch_bytes_ = 0;
  CEDAR_CUDA_TRY(FromCuda(cudaMalloc(&scratch_, bytes)));
  scratch_bytes_ = bytes;
  return {};
}

Status Blas::Scratch(size_t bytes, void** ptr) {
  CEDAR_CUDA_TRY(Reserve(bytes));
  *ptr = scratch_;
  return {};
}

namespace {

template <typename T>
__global__ void ScaleKernel(T* y, int64_t n, float beta) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    y[i] = detail::FromF32<T>(beta * detail::ToF32(y[i]));
}

// y *= beta over n elements (an empty reduction: in == 0).
Status ScaleOutput(void* y, DType y_type, int64_t n, float beta, Stream stream) {
  if (beta == 1.0f || n == 0) return {};
  if (beta == 0.0f) return FromCuda(cudaMemsetAsync(y, 0, size_t(n) * SizeOf(y_type), detail::AsCuda(stream)));
  return detail::Dispatch(y_type, [&](auto t) {
    using T = typename decltype(t)::type;
    ScaleKernel<T><<<int(std::min<int64_t>((n + 255) / 256, 4096)), 256, 0, detail::AsCuda(stream)>>>(
        static_cast<T*>(y), n, beta);
    return detail::LaunchStatus();
  });
}

// Checks the type combination and, for F32 activations with BF16 weights, rounds x
// (x_elems elements) to BF16 in the scratch. *x_gemm and *ab_type are what cuBLAS gets.
Status PrepareOperands(Blas& blas, const void* x, DType x_type, DType w_type, DType y_type, int64_t x_elems,
                       Stream stream, const void** x_gemm, DType* ab_type) {
  if (!blas.handle()) return Invalid("Matmul: Blas::Init() was not called");
  if (w_type == DType::kF32 && x_type != DType::kF32) return Invalid("Matmul: F32 weights need F32 activations");
  (void)y_type;
  *ab_type = w_type;
  *x_gemm = x;
  if (w_type == DType::kBF16 && x_type == DType::kF32) {
    void* tmp = nullptr;
    CEDAR_CUDA_TRY(blas.Scratch(size_t(x_elems) * 2, &tmp));
    CEDAR_CUDA_TRY(Convert(x, DType::kF32, tmp, DType::kBF16, x_elems, stream));
    *x_gemm = tmp;
  }
  return {};
}

}  // namespace

Status Matmul(Blas& blas, const void* x, DType x_type, const void* w, DType w_type, void* y, DType y_type, int n,
              int in, int out, float beta, Stream stream) {
  if (n < 0 || in < 0 || out < 0) return Invalid("Matmul: negative size");
  if (n == 0 || out == 0) return {};
  if (in == 0) return ScaleOutput(y, y_type, int64_t(n) * out, beta, stream);
  const void* xg = nullptr;
  DType ab = DType::kF32;
  CEDAR_CUDA_TRY(PrepareOperands(blas, x, x_type, w_type, y_type, int64_t(n) * in, stream, &xg, &ab));
  auto h = static_cast<cublasHandle_t>(blas.handle());
  CEDAR_CUDA_TRY(FromCublas(cublasSetStream(h, detail::AsCuda(stream))));
  const float alpha = 1.0f;
  return FromCublas(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, out, n, in, &alpha, w, detail::CudaType(ab), in, xg,
                                 detail::CudaType(ab), in, &beta, y, detail::CudaType(y_type), out,
                                 CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

Status GroupedMatmul(Blas& blas, const void* x, DType x_type, const void* w, DType w_type, void* y, DType y_type,
                     int n, int groups, int in, int out, float beta, Stream stream) {
  if (n < 0 || groups < 0 || in < 0 || out < 0) return Invalid("GroupedMatmul: negative size");
  if (n == 0 || out == 0 || groups == 0) return {};
  if (in == 0) return ScaleOutput(y, y_type, int64_t(n) * groups * out, beta, stream);
  const void* xg = nullptr;
  DType ab = DType::kF32;
  CEDAR_CUDA_TRY(PrepareOperands(blas, x, x_type, w_type, y_type, int64_t(n) * groups * in, stream, &xg, &ab));
  auto h = static_cast<cublasHandle_t>(blas.handle());
  CEDAR_CUDA_TRY(FromCublas(cublasSetStream(h, detail::AsCuda(stream))));
  const float alpha = 1.0f;
  const long long stride_w = (long long)out * in, stride_x = in, stride_y = out;
  return FromCublas(cublasGemmStridedBatchedEx(
      h, CUBLAS_OP_T, CUBLAS_OP_N, out, n, in, &alpha, w, detail::CudaType(ab), in, stride_w, xg, detail::CudaType(ab),
      groups * in, stride_x, &beta, y, detail::CudaType(y_type), groups * out, stride_y, groups, CUBLAS_COMPUTE_32F,
      CUBLAS_GEMM_DEFAULT));
}

}  // namespace cedar::kernels::cuda
