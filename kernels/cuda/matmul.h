// Matrix products through cuBLAS: BF16 (or F32) weights times F32 or BF16 activations, F32
// accumulation (CUBLAS_COMPUTE_32F; TF32 is never used). The projections, the experts and the
// grouped output projection of spec §3 are all one of these two calls.
#pragma once
#include <cstddef>

#include "kernels/cuda/common.h"

namespace cedar::kernels::cuda {

// One cuBLAS handle and a scratch buffer (F32 activations rounded to BF16, index-score tiles).
// Not thread-safe, and its scratch is stream-ordered: use one Blas per stream. Growing the
// scratch frees the old one (cudaFree waits for the device): Reserve() up front in hot paths.
class Blas {
 public:
  Blas() = default;
  ~Blas();
  Blas(const Blas&) = delete;
  Blas& operator=(const Blas&) = delete;

  Status Init();                   // creates the handle; every other call requires it
  Status Reserve(size_t bytes);    // scratch of at least `bytes`
  // Scratch of at least `bytes`, valid until the next Scratch/Reserve call.
  Status Scratch(size_t bytes, void** ptr);
  void* handle() const { return handle_; }  // a cublasHandle_t

 private:
  void* handle_ = nullptr;
  void* scratch_ = nullptr;
  size_t scratch_bytes_ = 0;
};

// y[n, out] = x[n, in] · w[out, in]^T + beta · y   (y read only when beta != 0)
// Types: w F32 needs x F32; w BF16 takes x BF16, or x F32 which is first rounded to BF16 in
// the scratch (n·in·2 bytes). y is F32 or BF16. Equals ref::Matmul (beta 0) and
// ref::MatmulAccumulate (beta 1) up to the rounding of BF16 operands.
Status Matmul(Blas& blas, const void* x, DType x_type, const void* w, DType w_type, void* y, DType y_type, int n,
              int in, int out, float beta, Stream stream);

// Grouped product (spec §3.8, Wo_a): for g < groups,
//   y[:, g·out : (g+1)·out] = x[:, g·in : (g+1)·in] · w[g]^T + beta · y[...]
// x: [n, groups·in], w: [groups, out, in], y: [n, groups·out]. One strided-batched GEMM; types as Matmul.
Status GroupedMatmul(Blas& blas, const void* x, DType x_type, const void* w, DType w_type, void* y, DType y_type,
                     int n, int groups, int in, int out, float beta, Stream stream);

}  // namespace cedar::kernels::cuda
