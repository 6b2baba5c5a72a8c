// Sink attention (see sink_attention.h): one block of kWarps warps per (head, row); the warps
// split the row's entries and each keeps its own online softmax (max, sum, F32 accumulator in
// shared memory); the warps and the sink are merged at the end. Entries are read once per head
// (the heads of a row share them through L1/L2); reading each entry once per row for all heads
// (heads in registers, tensor cores for q·e) is the later speed-up.
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/sink_attention.h"

namespace cedar::kernels::cuda {

namespace {

constexpr int kWarps = 4;

size_t SharedBytes(int dim) { return (size_t(1 + kWarps) * dim + 2 * kWarps) * sizeof(float); }

template <typename E>
__global__ void __launch_bounds__(kWarps * 32) SinkAttentionKernel(SinkAttentionArgs a) {
  extern __shared__ float sh[];
  const int h = blockIdx.x, r = blockIdx.y, dim = a.dim;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  float* qs = sh;                                     // [dim]
  float* acc = sh + dim + size_t(warp) * dim;         // [dim] of this warp
  float* wm = sh + size_t(1 + kWarps) * dim;          // [kWarps] running max
  float* wl = wm + kWarps;                            // [kWarps] running sum
  const float* q = a.q + (size_t(r) * a.n_heads + h) * dim;
  for (int i = threadIdx.x; i < dim; i += blockDim.x) qs[i] = q[i];
  for (int i = lane; i < dim; i += 32) acc[i] = 0.0f;
  __syncthreads();

  const E* win = static_cast<const E*>(a.win);
  const E* pool = static_cast<const E*>(a.pool);
  const int nw = a.n_win ? a.n_win[r] : 0, ns = a.n_sel ? a.n_sel[r] : 0;
  const int32_t* sel = a.sel + size_t(r) * a.ld_sel;
  const int64_t first = a.n_win ? a.win_first[r] : 0;
  float m = -INFINITY, l = 0.0f;
  for (int e = warp; e < nw + ns; e += kWarps) {
    int64_t idx;
    const E* ent;
    if (e < nw) {
      idx = first + e;
      if (a.win_capacity > 0) idx %= a.win_capacity;
      ent = win + size_t(idx) * dim;
    } else {
      ent = pool + size_t(sel[e - nw]) * dim;
    }
    float dot = 0.0f;
    for (int i = lane; i < dim; i += 32) dot += qs[i] * detail::ToF32(ent[i]);
    const float s = detail::WarpSum(dot) * a.scale;
    const float m_new = fmaxf(m, s);
    if (m_new == -INFINITY) continue;  // only -inf logits so far: nothing to add
    const float corr = expf(m - m_new), p = expf(s - m_new);
    l = l * corr + p;
    for (int i = lane; i < dim; i += 32) acc[i] = acc[i] * corr + p * detail::ToF32(ent[i]);
    m = m_new;
  }
  if (lane == 0) wm[warp] = m, wl[warp] = l;
  __syncthreads();

  const float sink = a.sink[h];
  float mx = sink;
  for (int w = 0; w < kWarps; ++w) mx = fmaxf(mx, wm[w]);
  float denom = expf(sink - mx), f[kWarps];
#pragma unroll
  for (int w = 0; w < kWarps; ++w) {
    f[w] = wm[w] == -INFINITY ? 0.0f : expf(wm[w] - mx);
    denom += wl[w] * f[w];
  }
  const float inv = 1.0f / denom;
  float* o = a.out + (size_t(r) * a.n_heads + h) * dim;
  const float* acc0 = sh + dim;
  for (int i = threadIdx.x; i < dim; i += blockDim.x) {
    float v = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) v += acc0[size_t(w) * dim + i] * f[w];
    o[i] = v * inv;
  }
}

}  // namespace

Status SinkAttention(const SinkAttentionArgs& a, Stream stream) {
  if (a.n_rows < 0 || a.n_heads < 0 || a.dim < 0) return detail::Invalid("SinkAttention: negative size");
  if (a.n_rows == 0 || a.n_heads == 0 || a.dim == 0) return {};
  if (a.n_rows > 65535) return detail::Invalid("SinkAttention: more than 65535 rows in one call");
  if (a.n_win && !a.win_first) return detail::Invalid("SinkAttention: n_win without win_first");
  if (a.n_sel && !a.sel) return detail::Invalid("SinkAttention: n_sel without sel");
  const size_t shm = SharedBytes(a.dim);
  if (shm > 48 * 1024) return detail::Invalid("SinkAttention: dim too large for shared memory (max ~2400)");
  const dim3 grid(a.n_heads, a.n_rows);
  return detail::Dispatch(a.entry_type, [&](auto t) {
    using E = typename decltype(t)::type;
    SinkAttentionKernel<E><<<grid, kWarps * 32, shm, detail::AsCuda(stream)>>>(a);
    return detail::LaunchStatus();
  });
}

}  // namespace cedar::kernels::cuda
