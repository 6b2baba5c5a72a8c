// Internal to kernels/cuda/*.cu (CUDA headers; never include from host-only code): turning
// CUDA and cuBLAS results into Status, the launch check, and the dtype dispatch.
#pragma once
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "kernels/cuda/common.h"

namespace cedar::kernels::cuda::detail {

using bf16 = __nv_bfloat16;

inline Status FromCuda(cudaError_t e) {
  if (e == cudaSuccess) return {};
  return {Status::kCuda, int(e), cudaGetErrorString(e)};
}
inline Status FromCublas(cublasStatus_t e) {
  if (e == CUBLAS_STATUS_SUCCESS) return {};
  return {Status::kCublas, int(e), cublasGetStatusString(e)};
}
inline Status Invalid(const char* what) { return {Status::kInvalidArgument, 0, what}; }
// After a <<<...>>> launch: the launch's own error (bad configuration, no device, ...).
inline Status LaunchStatus() { return FromCuda(cudaGetLastError()); }
inline cudaStream_t AsCuda(Stream s) { return static_cast<cudaStream_t>(s); }

#define CEDAR_CUDA_TRY(expr)                               \
  do {                                                     \
    ::cedar::kernels::cuda::Status st_ = (expr);           \
    if (!st_.ok()) return st_;                             \
  } while (0)

// Calls f(Type<T>{}) with T = float or bf16 for the runtime dtype.
template <typename T>
struct Type {
  using type = T;
};
template <typename F>
Status Dispatch(DType t, F&& f) {
  switch (t) {
    case DType::kF32: return f(Type<float>{});
    case DType::kBF16: return f(Type<bf16>{});
  }
  return Invalid("unknown dtype");
}

inline cudaDataType_t CudaType(DType t) { return t == DType::kF32 ? CUDA_R_32F : CUDA_R_16BF; }

}  // namespace cedar::kernels::cuda::detail
