// SwiGLU (see swiglu.h): elementwise, memory-bound (read g and u, write out).
#include <algorithm>

#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/swiglu.h"

namespace cedar::kernels::cuda {

namespace {

template <typename I, typename O>
__global__ void SwiGluKernel(const I* g, const I* u, O* out, int rows, int cols, int64_t ld_in, int64_t ld_out,
                             float limit) {
  const int64_t n = int64_t(rows) * cols;
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < n; t += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = t / cols, i = t - r * cols;
    float gv = detail::ToF32(g[r * ld_in + i]), uv = detail::ToF32(u[r * ld_in + i]);
    if (limit > 0.0f) {
      gv = fminf(gv, limit);
      uv = fminf(fmaxf(uv, -limit), limit);
    }
    out[r * ld_out + i] = detail::FromF32<O>(gv / (1.0f + expf(-gv)) * uv);
  }
}

}  // namespace

Status SwiGLU(const void* g, const void* u, DType in_type, void* out, DType out_type, int rows, int cols,
              int64_t ld_in, int64_t ld_out, float limit, Stream stream) {
  if (rows < 0 || cols < 0) return detail::Invalid("SwiGLU: negative size");
  if (rows > 1 && (ld_in < cols || ld_out < cols)) return detail::Invalid("SwiGLU: row stride < cols");
  if (rows == 0 || cols == 0) return {};
  const int64_t n = int64_t(rows) * cols;
  const int threads = 256, blocks = int(std::min<int64_t>((n + threads - 1) / threads, 65536));
  return detail::Dispatch(in_type, [&](auto it) {
    return detail::Dispatch(out_type, [&](auto ot) {
      using I = typename decltype(it)::type;
      using O = typename decltype(ot)::type;
      SwiGluKernel<I, O><<<blocks, threads, 0, detail::AsCuda(stream)>>>(
          static_cast<const I*>(g), static_cast<const I*>(u), static_cast<O*>(out), rows, cols, ld_in, ld_out, limit);
      return detail::LaunchStatus();
    });
  });
}

}  // namespace cedar::kernels::cuda
