// y[b, r] = x[b, :] . w[r, :] for a few rows of x (batched decode, MoE experts with a handful of
// routed rows): every weight is read once from memory for all rows of x, which sgemm's packing
// does not pay back at this size (OpenBLAS ran batch-8 decode's products at ~90 GFLOP/s), and
// every row is summed in MatVec's order, so a row of a batch equals the row alone, bit for bit.
#include <algorithm>

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#include <immintrin.h>
#endif

#include "kernels/cpu_internal.h"
#include "kernels/lane16_avx2.h"

namespace cedar::kernels::internal {

#if defined(__AVX512F__)
namespace {

// N rows of x against R rows of w, 16 lanes per accumulator. Each output is summed in the same
// order as MatVec's (one 16-lane accumulator over the row, then the lane sum), so a row of a
// batch gets bit for bit what it would get alone.
template <int N, int R>
void Block(const float* x, const float* w, float* y, int in, int y_stride, const float* pf_end) {
  const int in16 = in / 16 * 16;
  const __mmask16 tail = __mmask16((1u << (in % 16)) - 1u);
  __m512 acc[N][R];
  for (int b = 0; b < N; ++b)
    for (int k = 0; k < R; ++k) acc[b][k] = _mm512_setzero_ps();
  // The next block's R rows (contiguous after these) requested R lines an iteration, so they are
  // in L1 when it starts, never at or past pf_end (another thread's rows).
  // (Offsets, not pointers: a pointer past the end of the weights would not be valid to form.)
  const size_t pf_limit = size_t(pf_end - w);
  size_t pf = size_t(R) * in;
  for (int i = 0; i < in16; i += 16) {
#pragma GCC unroll 8
    for (int k = 0; k < R; ++k, pf += 16)
      if (pf < pf_limit) _mm_prefetch(reinterpret_cast<const char*>(w + pf), _MM_HINT_T0);
    __m512 wv[R];
#pragma GCC unroll 8
    for (int k = 0; k < R; ++k) {
      wv[k] = _mm512_loadu_ps(w + size_t(k) * in + i);
      if constexpr (N > 1) __asm__("" : "+v"(wv[k]));  // in a register for its N FMAs (below)
    }
#pragma GCC unroll 8
    for (int b = 0; b < N; ++b) {
      __m512 xv = _mm512_loadu_ps(x + size_t(b) * in + i);
      // Held in a register for its R FMAs, as the weights are for their N: left alone, GCC
      // folds a load into every FMA (N * R loads an iteration instead of N + R: 27 for
      // Block<8, 3>'s 24 FMAs, 18 for Block<2, 8>'s 16), and the load ports, not the FMAs, set
      // the pace (Block<8, 3>, one thread, in = 512, weights in L2: 93 -> 186 GFLOP/s;
      // streamed from memory: 40 -> 70).
      __asm__("" : "+v"(xv));
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
void Rows(const float* x, const float* w, float* y, int rows, int in, int y_stride, const float* pf_end) {
  constexpr int R = N <= 2 ? 8 : N <= 4 ? 4 : 3;
  int r = 0;
  for (; r + R <= rows; r += R) Block<N, R>(x, w + size_t(r) * in, y + r, in, y_stride, pf_end);
  for (; r < rows; ++r) Block<N, 1>(x, w + size_t(r) * in, y + r, in, y_stride, pf_end);
}

}  // namespace
#endif

#if !defined(__AVX512F__) && defined(__AVX2__) && defined(__FMA__)
namespace {

constexpr int kAvx2Group = 6;             // rows of x per pass: 12 accumulators + 2 weight halves + x
constexpr int kAvx2BlockBytes = 128 << 10;  // weight rows per block: 128 KiB, re-read from L2 by the next group

// N rows of x against one weight row, in MatVec's AVX2 order (matmul_many.cpp MatVecRows: two
// 8-lane accumulators standing for the 16 lanes, an FMA chain over i = 0, 16, 32, ..., the tail
// as zero-padded lanes, then _mm512_reduce_add_ps's lane sum), so every row of the batch gets
// the bits it gets alone; the weight row is loaded once for all N.
template <int N>
void Row2(const float* x, const float* w, float* y, int in, int y_stride) {
  const int in16 = in / 16 * 16;
  __m256 a[N][2];
  for (int b = 0; b < N; ++b) a[b][0] = a[b][1] = _mm256_setzero_ps();
  for (int i = 0; i < in16; i += 16) {
    const __m256 w0 = _mm256_loadu_ps(w + i), w1 = _mm256_loadu_ps(w + i + 8);
#pragma GCC unroll 8
    for (int b = 0; b < N; ++b) {
      a[b][0] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x + size_t(b) * in + i), a[b][0]);
      a[b][1] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x + size_t(b) * in + i + 8), a[b][1]);
    }
  }
  if (in16 < in) {
    __m256i m0, m1;
    Lane16TailMasks(in - in16, &m0, &m1);
    const __m256 w0 = _mm256_maskload_ps(w + in16, m0), w1 = _mm256_maskload_ps(w + in16 + 8, m1);
    for (int b = 0; b < N; ++b) {
      a[b][0] = _mm256_fmadd_ps(w0, _mm256_maskload_ps(x + size_t(b) * in + in16, m0), a[b][0]);
      a[b][1] = _mm256_fmadd_ps(w1, _mm256_maskload_ps(x + size_t(b) * in + in16 + 8, m1), a[b][1]);
    }
  }
  for (int b = 0; b < N; ++b) y[size_t(b) * y_stride] = Lane16Sum(a[b][0], a[b][1]);
}

template <int N>
void Rows2(const float* x, const float* w, float* y, int rows, int in, int y_stride) {
  for (int r = 0; r < rows; ++r) Row2<N>(x, w + size_t(r) * in, y + r, in, y_stride);
}

}  // namespace
#endif

void MatmulFewRows(const float* x, const float* w, float* y, int n, int in, int rows, int y_stride) {
#if defined(__AVX512F__)
  // Groups of up to 8 rows of x; the weight rows a group reads stay in L1 for the next group.
  constexpr int kGroup = 8;
  const int blk = 64;  // weight rows per block (64 x in floats: within L2 for in <= 2048)
  const float* pf_end = w + size_t(rows) * in;
  for (int r0 = 0; r0 < rows; r0 += blk) {
    const int nr = std::min(blk, rows - r0);
    for (int b0 = 0; b0 < n; b0 += kGroup) {
      const float* xb = x + size_t(b0) * in;
      const float* wr = w + size_t(r0) * in;
      float* yb = y + size_t(b0) * y_stride + r0;
      switch (std::min(kGroup, n - b0)) {
        case 1: Rows<1>(xb, wr, yb, nr, in, y_stride, pf_end); break;
        case 2: Rows<2>(xb, wr, yb, nr, in, y_stride, pf_end); break;
        case 3: Rows<3>(xb, wr, yb, nr, in, y_stride, pf_end); break;
        case 4: Rows<4>(xb, wr, yb, nr, in, y_stride, pf_end); break;
        case 5: Rows<5>(xb, wr, yb, nr, in, y_stride, pf_end); break;
        case 6: Rows<6>(xb, wr, yb, nr, in, y_stride, pf_end); break;
        case 7: Rows<7>(xb, wr, yb, nr, in, y_stride, pf_end); break;
        default: Rows<8>(xb, wr, yb, nr, in, y_stride, pf_end); break;
      }
    }
  }
#elif defined(__AVX2__) && defined(__FMA__)
  // Groups of at most kAvx2Group rows of x, near-equal in size (9 rows: 5 + 4), each over blocks
  // of weight rows small enough to stay in L2 for the next group: the weights come from memory
  // once per product, not once per row (MatVec per row did that: 28% of batch-8 decode's time),
  // and no panel is copied (the packed GEMM's F32 panel copy was another 8-10%).
  const int groups = (n + kAvx2Group - 1) / kAvx2Group;
  const int blk = std::max(8, (kAvx2BlockBytes / int(sizeof(float))) / std::max(in, 1));
  for (int r0 = 0; r0 < rows; r0 += blk) {
    const int nr = std::min(blk, rows - r0);
    for (int g = 0, b0 = 0; g < groups; ++g) {
      const int nb = (n - b0) / (groups - g);
      const float* xb = x + size_t(b0) * in;
      const float* wr = w + size_t(r0) * in;
      float* yb = y + size_t(b0) * y_stride + r0;
      switch (nb) {
        case 1: Rows2<1>(xb, wr, yb, nr, in, y_stride); break;
        case 2: Rows2<2>(xb, wr, yb, nr, in, y_stride); break;
        case 3: Rows2<3>(xb, wr, yb, nr, in, y_stride); break;
        case 4: Rows2<4>(xb, wr, yb, nr, in, y_stride); break;
        case 5: Rows2<5>(xb, wr, yb, nr, in, y_stride); break;
        default: Rows2<6>(xb, wr, yb, nr, in, y_stride); break;
      }
      b0 += nb;
    }
  }
#else
  for (int b = 0; b < n; ++b) MatVec(w, x + size_t(b) * in, y + size_t(b) * y_stride, rows, in);
#endif
}

}  // namespace cedar::kernels::internal
