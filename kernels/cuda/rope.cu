// RoPE (see rope.h): one block per row; the row's rope_dim/2 (cos, sin) pairs are computed once
// in double (large positions need it: p · freq reaches 1e6 rad) into shared memory, then every
// vector of the row is rotated from there.
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/rope.h"

namespace cedar::kernels::cuda {

namespace {

template <typename T>
__global__ void RopeKernel(T* x, int n_vecs, int vec_dim, int rope_dim, const int64_t* __restrict__ positions,
                           int64_t pos_first, int64_t pos_step, float base, int sign) {
  extern __shared__ float2 cs[];  // [rope_dim / 2]: (cos, sin)
  const int r = blockIdx.x, half = rope_dim / 2;
  const int64_t pos = positions ? positions[r] : pos_first + int64_t(r) * pos_step;
  for (int i = threadIdx.x; i < half; i += blockDim.x) {
    const double freq = pow(double(base), -2.0 * i / rope_dim);
    double s, c;
    sincos(double(pos) * freq * sign, &s, &c);
    cs[i] = make_float2(float(c), float(s));
  }
  __syncthreads();
  T* row = x + size_t(r) * n_vecs * vec_dim + (vec_dim - rope_dim);
  for (int t = threadIdx.x; t < n_vecs * half; t += blockDim.x) {
    const int v = t / half, i = t - v * half;
    T* p = row + size_t(v) * vec_dim + 2 * i;
    const float x0 = detail::ToF32(p[0]), x1 = detail::ToF32(p[1]);
    const float2 a = cs[i];
    p[0] = detail::FromF32<T>(x0 * a.x - x1 * a.y);
    p[1] = detail::FromF32<T>(x0 * a.y + x1 * a.x);
  }
}

}  // namespace

Status Rope(void* x, DType type, int n_rows, int n_vecs, int vec_dim, int rope_dim, const int64_t* positions,
            int64_t pos_first, int64_t pos_step, float base, int sign, Stream stream) {
  if (n_rows < 0 || n_vecs < 0 || vec_dim < 0 || rope_dim < 0) return detail::Invalid("Rope: negative size");
  if (rope_dim > vec_dim) return detail::Invalid("Rope: rope_dim > vec_dim");
  if (rope_dim % 2 != 0) return detail::Invalid("Rope: odd rope_dim");
  const int half = rope_dim / 2;
  if (n_rows == 0 || n_vecs == 0 || half == 0) return {};
  const int threads = n_vecs * half >= 256 ? 256 : 64;
  return detail::Dispatch(type, [&](auto t) {
    using T = typename decltype(t)::type;
    RopeKernel<T><<<n_rows, threads, size_t(half) * sizeof(float2), detail::AsCuda(stream)>>>(
        static_cast<T*>(x), n_vecs, vec_dim, rope_dim, positions, pos_first, pos_step, base, sign);
    return detail::LaunchStatus();
  });
}

}  // namespace cedar::kernels::cuda
