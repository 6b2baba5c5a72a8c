// Index scores (see index_scores.h). The GEMM is the whole arithmetic (2·rows·heads·dim·keys
// FLOP); the reduction reads the [rows·heads, chunk] tile once, which costs more bytes than the
// keys themselves: a fused kernel (dot products kept in registers) is the later speed-up.
#include <algorithm>

#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/index_scores.h"

namespace cedar::kernels::cuda {

namespace {

// scores[r, j0 + j] = Σ_h w[r, h] · max(dots[(r·H + h)·chunk + j], 0); grid (chunk tiles, rows).
__global__ void WeightedReluSum(const float* __restrict__ dots, const float* __restrict__ w, float* __restrict__ scores,
                                int n_heads, int chunk, int64_t j0, int64_t ld_scores) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  const int r = blockIdx.y;
  if (j >= chunk) return;
  const float* d = dots + size_t(r) * n_heads * chunk + j;
  const float* wr = w + size_t(r) * n_heads;
  float s = 0.0f;
  for (int h = 0; h < n_heads; ++h) s += wr[h] * fmaxf(d[size_t(h) * chunk], 0.0f);
  scores[size_t(r) * ld_scores + j0 + j] = s;
}

}  // namespace

Status IndexScores(Blas& blas, const IndexScoresArgs& a, Stream stream) {
  if (a.n_rows < 0 || a.n_heads < 0 || a.head_dim < 0 || a.n_keys < 0) return detail::Invalid("IndexScores: negative size");
  const int64_t ld = a.ld_scores ? a.ld_scores : a.n_keys;
  if (ld < a.n_keys) return detail::Invalid("IndexScores: ld_scores < n_keys");
  if (a.n_rows == 0 || a.n_keys == 0) return {};
  if (a.n_rows > 65535) return detail::Invalid("IndexScores: more than 65535 rows in one call");
  if (!blas.handle()) return detail::Invalid("IndexScores: Blas::Init() was not called");
  const int64_t qrows = int64_t(a.n_rows) * a.n_heads;
  const int64_t per_key = std::max<int64_t>(qrows, 1) * int64_t(sizeof(float));
  const int chunk = int(std::clamp<int64_t>(int64_t(a.scratch_limit_bytes) / per_key, 1, a.n_keys));
  void* scratch = nullptr;
  CEDAR_CUDA_TRY(blas.Scratch(size_t(per_key) * chunk, &scratch));
  float* dots = static_cast<float*>(scratch);
  auto h = static_cast<cublasHandle_t>(blas.handle());
  CEDAR_CUDA_TRY(detail::FromCublas(cublasSetStream(h, detail::AsCuda(stream))));
  const cudaDataType_t ab = detail::CudaType(a.type);
  const float alpha = 1.0f, beta = 0.0f;
  for (int64_t j0 = 0; j0 < a.n_keys; j0 += chunk) {
    const int nk = int(std::min<int64_t>(chunk, a.n_keys - j0));
    if (qrows > 0 && a.head_dim > 0) {
      // dots[qrows, nk] = q[qrows, head_dim] · keys[j0 : j0 + nk, head_dim]^T (row-major), ldc = nk.
      const char* kp = static_cast<const char*>(a.keys) + size_t(j0) * a.head_dim * SizeOf(a.type);
      CEDAR_CUDA_TRY(detail::FromCublas(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, nk, int(qrows), a.head_dim, &alpha,
                                                     kp, ab, a.head_dim, a.q, ab, a.head_dim, &beta, dots,
                                                     CUDA_R_32F, nk, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT)));
    } else if (qrows > 0) {
      CEDAR_CUDA_TRY(detail::FromCuda(cudaMemsetAsync(dots, 0, size_t(qrows) * nk * sizeof(float), detail::AsCuda(stream))));
    }
    const dim3 grid((nk + 255) / 256, a.n_rows);
    WeightedReluSum<<<grid, 256, 0, detail::AsCuda(stream)>>>(dots, a.w, a.scores, a.n_heads, nk, j0, ld);
    CEDAR_CUDA_TRY(detail::LaunchStatus());
  }
  return {};
}

}  // namespace cedar::kernels::cuda
