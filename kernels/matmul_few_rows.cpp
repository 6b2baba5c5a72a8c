// y[b, r] = x[b, :] . w[r, :] for a few rows of x (batched decode, MoE experts with a handful of
// routed rows): every weight is read once from memory for all rows of x, which sgemm's packing
// does not pay back at this size (OpenBLAS ran batch-8 decode's products at ~90 GFLOP/s), and
// every row is summed in MatVec's order, so a row of a batch equals the row alone, bit for bit.
#include <algorithm>

#include "kernels/avx2_runtime.h"
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

#if !defined(__AVX512F__) && defined(CEDAR_AVX2_KERNELS)  // AVX2 builds, and portable ones (Avx2KernelsRun)
namespace {
CEDAR_AVX2_BEGIN

constexpr int kAvx2BlockBytes = 128 << 10;  // weight rows per block: 128 KiB, re-read from L2 by the next pass

// One column of 8 floats at i for NH held rows (loaded once into registers) against NS streamed
// rows: a[h][s] += held[h] * streamed[s]. Either set may be the weights (an FMA's two factors
// commute: same bits). Kept in registers for the other set's FMAs: left alone GCC folds a load
// into every FMA, NH * NS loads a column instead of NH + NS.
template <int NH, int NS>
inline void Column(const float* held, size_t held_stride, const float* streamed, size_t streamed_stride, int i,
                   __m256 (&a)[NH][NS]) {
  __m256 hv[NH];
#pragma GCC unroll 8
  for (int h = 0; h < NH; ++h) {
    hv[h] = _mm256_loadu_ps(held + size_t(h) * held_stride + i);
    if constexpr (NS > 1) __asm__("" : "+x"(hv[h]));
  }
#pragma GCC unroll 8
  for (int s = 0; s < NS; ++s) {
    __m256 sv = _mm256_loadu_ps(streamed + size_t(s) * streamed_stride + i);
    if constexpr (NH > 1) __asm__("" : "+x"(sv));
#pragma GCC unroll 8
    for (int h = 0; h < NH; ++h) a[h][s] = _mm256_fmadd_ps(hv[h], sv, a[h][s]);
  }
}

// RX rows of x against RW weight rows (rs floats apart; their outputs yk apart), in MatVec's
// AVX2 order (matmul_many.cpp MatVecRows: an FMA chain over i = 0, 16, 32, ... per 8-lane half
// of the 16 lanes, the tail as zero-padded lanes, then _mm512_reduce_add_ps's lane sum), so
// every row of the batch gets the bits it gets alone. The two halves run as two sweeps so that
// RX x RW pairs fit in 12 accumulators: a sweep loads RX + RW vectors for RX * RW FMAs (4 x 3: 7
// loads for 12 FMAs) where one weight row against all x rows loaded 2 + 2N for 2N, and the load
// ports, not the FMAs, set the pace. The smaller set is held (12 accumulators + it + 1 of 16).
template <int RX, int RW>
void Block2(const float* x, const float* w, size_t rs, float* y, int yk, int in, int y_stride) {
  constexpr bool kHoldWeights = RW <= RX;
  constexpr int NH = kHoldWeights ? RW : RX, NS = kHoldWeights ? RX : RW;
  const float* held = kHoldWeights ? w : x;
  const float* streamed = kHoldWeights ? x : w;
  const size_t held_stride = kHoldWeights ? rs : size_t(in), streamed_stride = kHoldWeights ? size_t(in) : rs;
  const int in16 = in / 16 * 16;
  __m256 acc[2][NH][NS];  // [lanes 0-7 | 8-15][held row][streamed row]
  for (int h = 0; h < 2; ++h) {
    __m256 a[NH][NS];
    for (int p = 0; p < NH; ++p)
      for (int q = 0; q < NS; ++q) a[p][q] = _mm256_setzero_ps();
    for (int i = h * 8; i < in16; i += 16) Column<NH, NS>(held, held_stride, streamed, streamed_stride, i, a);
    if (in16 < in) {
      __m256i mask[2];
      Lane16TailMasks(in - in16, &mask[0], &mask[1]);
      for (int p = 0; p < NH; ++p) {
        const __m256 hv = _mm256_maskload_ps(held + size_t(p) * held_stride + in16 + h * 8, mask[h]);
        for (int q = 0; q < NS; ++q)
          a[p][q] = _mm256_fmadd_ps(hv, _mm256_maskload_ps(streamed + size_t(q) * streamed_stride + in16 + h * 8, mask[h]), a[p][q]);
      }
    }
    for (int p = 0; p < NH; ++p)
      for (int q = 0; q < NS; ++q) acc[h][p][q] = a[p][q];
  }
  for (int b = 0; b < RX; ++b)
    for (int k = 0; k < RW; ++k) {
      const int p = kHoldWeights ? k : b, q = kHoldWeights ? b : k;
      y[size_t(b) * y_stride + size_t(k) * yk] = Lane16Sum(acc[0][p][q], acc[1][p][q]);
    }
}

// The last rows % RW weight rows: one block of that many (RW - 1 at most), not single rows,
// whose lone accumulator pairs wait on the FMA latency.
template <int RX, int RW>
void LeftoverRows(const float* x, const float* w, float* y, int left, int in, int y_stride) {
  if constexpr (RW > 1) {
    if (left == RW - 1) return Block2<RX, RW - 1>(x, w, size_t(in), y, 1, in, y_stride);
    return LeftoverRows<RX, RW - 1>(x, w, y, left, in, y_stride);
  }
}

template <int RX, int RW>
void PartRows(const float* x, const float* w, float* y, int j0, int j1, int part, int in, int y_stride) {
  for (int j = j0; j < j1; ++j) Block2<RX, RW>(x, w + size_t(j) * in, size_t(part) * in, y + j, part, in, y_stride);
}

template <int X, int W>
struct PassShape {
  static constexpr int kX = X;  // rows of x
  static constexpr int kW = W;  // weight rows side by side
};

// Calls f with the shape of a pass of nb rows of x in a product of n: one pass of all n rows up
// to 6 (2 x 6, 3 x 4, 4 x 3, 5 x 2, 6 x 2: 12 accumulators or fewer), near-equal passes of 3 or
// 4 above (x 3), so every pass of a product reads the same RW parts.
template <typename F>
void WithPassShape(int n, int nb, F&& f) {
  if (n > 6) return nb == 3 ? f(PassShape<3, 3>{}) : f(PassShape<4, 3>{});
  switch (nb) {
    case 2: return f(PassShape<2, 6>{});
    case 3: return f(PassShape<3, 4>{});
    case 4: return f(PassShape<4, 3>{});
    case 5: return f(PassShape<5, 2>{});
    default: return f(PassShape<6, 2>{});
  }
}

// 2 <= n <= kFewRowsMax rows of x. The RW weight rows a block reads side by side come from RW
// parts of the rows ([0, part), [part, 2 part), ...), so each is a long stream for the hardware
// prefetcher; RW adjacent rows (RW streams of one row each, 2 KiB at in = 512, restarted every
// block) streamed 0.7-0.8x as fast as the one-row-at-a-time kernel this replaced. Parts go in
// blocks small enough to stay in L2 for the next pass; the last rows % RW rows after them.
void FewRowsAvx2(const float* x, const float* w, float* y, int n, int in, int rows, int y_stride) {
  const int passes = n <= 6 ? 1 : (n + 3) / 4;
  int rw = 0;  // the weight rows side by side, the same in every pass (WithPassShape)
  WithPassShape(n, n <= 6 ? n : 4, [&](auto shape) { rw = decltype(shape)::kW; });
  const int part = rows / rw;
  const int blk = std::max(8, (kAvx2BlockBytes / int(sizeof(float))) / std::max(in, 1) / rw);  // rows per part
  auto each_pass = [&](auto&& run) {
    for (int g = 0, b0 = 0; g < passes; ++g) {
      const int nb = (n - b0) / (passes - g);
      WithPassShape(n, nb, [&](auto shape) { run(shape, x + size_t(b0) * in, y + size_t(b0) * y_stride); });
      b0 += nb;
    }
  };
  for (int j0 = 0; j0 < part; j0 += blk) {
    const int j1 = std::min(part, j0 + blk);
    each_pass([&](auto shape, const float* xb, float* yb) {
      PartRows<decltype(shape)::kX, decltype(shape)::kW>(xb, w, yb, j0, j1, part, in, y_stride);
    });
  }
  const int r = part * rw;
  if (r == rows) return;
  each_pass([&](auto shape, const float* xb, float* yb) {
    LeftoverRows<decltype(shape)::kX, decltype(shape)::kW>(xb, w + size_t(r) * in, yb + r, rows - r, in, y_stride);
  });
}

CEDAR_AVX2_END
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
#else
#if defined(CEDAR_AVX2_KERNELS)
  // Every weight comes from memory once per product, not once per row of x (MatVec per row did
  // that: 28% of batch-8 decode's time), and no panel is copied (the packed GEMM's F32 panel copy
  // was another 8-10%).
  if (n == 1) return MatVec(w, x, y, rows, in);
  if (Avx2KernelsRun()) return FewRowsAvx2(x, w, y, n, in, rows, y_stride);
#endif
  for (int b = 0; b < n; ++b) MatVec(w, x + size_t(b) * in, y + size_t(b) * y_stride, rows, in);
#endif
}

}  // namespace cedar::kernels::internal
