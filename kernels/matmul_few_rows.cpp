// y[b, r] = x[b, :] . w[r, :] for a few rows of x (batched decode, MoE experts with a handful of
// routed rows): every weight is read once from memory for all rows of x, which sgemm's packing
// does not pay back at this size (OpenBLAS ran batch-8 decode's products at ~90 GFLOP/s).
#include <algorithm>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "kernels/cpu_internal.h"
#include "kernels/gemm_rowinv.h"

namespace cedar::kernels::internal {

#if defined(__AVX512F__)
namespace {

// N rows of x against R rows of w, 16 lanes per accumulator. Each output is summed in the same
// order as MatVec's (one 16-lane accumulator over the row, then the lane sum), so a row of a
// batch gets bit for bit what it would get alone.
template <int N, int R>
void Block(const float* x, const float* w, float* y, int in, int y_stride) {
  const int in16 = in / 16 * 16;
  const __mmask16 tail = __mmask16((1u << (in % 16)) - 1u);
  __m512 acc[N][R];
  for (int b = 0; b < N; ++b)
    for (int k = 0; k < R; ++k) acc[b][k] = _mm512_setzero_ps();
  for (int i = 0; i < in16; i += 16) {
    __m512 wv[R];
#pragma GCC unroll 8
    for (int k = 0; k < R; ++k) wv[k] = _mm512_loadu_ps(w + size_t(k) * in + i);
#pragma GCC unroll 8
    for (int b = 0; b < N; ++b) {
      const __m512 xv = _mm512_loadu_ps(x + size_t(b) * in + i);
#pragma GCC unroll 8
      for (int k = 0; k < R; ++k) acc[b][k] = _mm512_fmadd_ps(wv[k], xv, acc[b][k]);
    }
  }
  if (tail) {
    __m512 wv[R];
    for (int k = 0; k < R; ++k) wv[k] = _mm512_maskz_loadu_ps(tail, w + size_t(k) * in + in16);
    for (int b = 0; b < N; ++b) {
      const __m512 xv = _mm512_maskz_loadu_ps(tail, x + size_t(b) * in + in16);
      for (int k = 0; k < R; ++k) acc[b][k] = _mm512_fmadd_ps(wv[k], xv, acc[b][k]);
    }
  }
  for (int b = 0; b < N; ++b)
    for (int k = 0; k < R; ++k) y[size_t(b) * y_stride + k] = _mm512_reduce_add_ps(acc[b][k]);
}

// Up to 24 accumulators: R weight rows side by side for N rows of x.
template <int N>
void Rows(const float* x, const float* w, float* y, int rows, int in, int y_stride) {
  constexpr int R = N <= 2 ? 8 : N <= 4 ? 4 : 3;
  int r = 0;
  for (; r + R <= rows; r += R) Block<N, R>(x, w + size_t(r) * in, y + r, in, y_stride);
  for (; r < rows; ++r) Block<N, 1>(x, w + size_t(r) * in, y + r, in, y_stride);
}

}  // namespace
#endif

void MatmulFewRows(const float* x, const float* w, float* y, int n, int in, int rows, int y_stride) {
#if defined(__AVX512F__)
  // Groups of up to 8 rows of x; the weight rows a group reads stay in L1 for the next group.
  constexpr int kGroup = 8;
  const int blk = 64;  // weight rows per block (64 x in floats: within L2 for in <= 2048)
  for (int r0 = 0; r0 < rows; r0 += blk) {
    const int nr = std::min(blk, rows - r0);
    for (int b0 = 0; b0 < n; b0 += kGroup) {
      const float* xb = x + size_t(b0) * in;
      const float* wr = w + size_t(r0) * in;
      float* yb = y + size_t(b0) * y_stride + r0;
      switch (std::min(kGroup, n - b0)) {
        case 1: Rows<1>(xb, wr, yb, nr, in, y_stride); break;
        case 2: Rows<2>(xb, wr, yb, nr, in, y_stride); break;
        case 3: Rows<3>(xb, wr, yb, nr, in, y_stride); break;
        case 4: Rows<4>(xb, wr, yb, nr, in, y_stride); break;
        case 5: Rows<5>(xb, wr, yb, nr, in, y_stride); break;
        case 6: Rows<6>(xb, wr, yb, nr, in, y_stride); break;
        case 7: Rows<7>(xb, wr, yb, nr, in, y_stride); break;
        default: Rows<8>(xb, wr, yb, nr, in, y_stride); break;
      }
    }
  }
#elif defined(__AVX2__) && defined(__FMA__)
  // From 8 rows the packed GEMM (which reads each weight once for all rows) beats one MatVec per
  // row (bench_gemm at 16 rows: 1.2-1.9x on small's shapes); both sum in the lane-16 order, so
  // the bits are the same either way.
  if (n >= 8) {
    GemmRowInvariant(x, n, F32Panels(w, rows, in), y, y_stride, 0, rows);
    return;
  }
  for (int b = 0; b < n; ++b) MatVec(w, x + size_t(b) * in, y + size_t(b) * y_stride, rows, in);
#else
  for (int b = 0; b < n; ++b) MatVec(w, x + size_t(b) * in, y + size_t(b) * y_stride, rows, in);
#endif
}

}  // namespace cedar::kernels::internal
