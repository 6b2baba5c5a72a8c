// The many-row F32 product (see gemm_prefill.h for its blocking and summation order).
#include "kernels/gemm_prefill.h"

#include "kernels/cpu_internal.h"
#include "kernels/thread_pool.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/avx2_runtime.h"
#if defined(CEDAR_AVX2_KERNELS)  // AVX2 builds, and portable ones where the CPU has it (Avx2KernelsRun)
#define CEDAR_PREFILL_AVX2 1
#endif
#if defined(CEDAR_PREFILL_AVX2) && defined(__AVX512F__)
#define CEDAR_PREFILL_AVX512 1
#endif

namespace cedar::kernels::internal {

namespace {

#if defined(CEDAR_PREFILL_AVX2)
CEDAR_AVX2_BEGIN

constexpr int kPanel = 16;  // rows of x per packed panel (two 8-lane vectors)
constexpr int kMo = 6;      // outputs per register tile: 6 x 2 accumulators + 2 x + 1 broadcast

// 8 x 8 transpose of r[0..8) in place (r[j] becomes column j).
inline void Transpose8(__m256 r[8]) {
  __m256 t[8], u[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 2; ++i) {
    u[4 * i + 0] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], _MM_SHUFFLE(1, 0, 1, 0));
    u[4 * i + 1] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], _MM_SHUFFLE(3, 2, 3, 2));
    u[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(1, 0, 1, 0));
    u[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int j = 0; j < 4; ++j) {
    r[j] = _mm256_permute2f128_ps(u[j], u[4 + j], 0x20);
    r[4 + j] = _mm256_permute2f128_ps(u[j], u[4 + j], 0x31);
  }
}

// Rows [r0, r0 + nr) of x[., in] (nr <= 16) into p[in][16] (row i at lane i; zeros for i >= nr).
void PackPanel(const float* x, int in, int r0, int nr, float* p) {
  const int in8 = in / 8 * 8;
  for (int g = 0; g < 2; ++g) {  // rows 0-7, then 8-15
    const int base = g * 8;
    for (int k = 0; k < in8; k += 8) {
      __m256 r[8];
      for (int i = 0; i < 8; ++i)
        r[i] = base + i < nr ? _mm256_loadu_ps(x + size_t(r0 + base + i) * in + k) : _mm256_setzero_ps();
      Transpose8(r);
      for (int j = 0; j < 8; ++j) _mm256_store_ps(p + size_t(k + j) * kPanel + base, r[j]);
    }
    for (int k = in8; k < in; ++k)
      for (int i = 0; i < 8; ++i) p[size_t(k) * kPanel + base + i] = base + i < nr ? x[size_t(r0 + base + i) * in + k] : 0.0f;
  }
}

// y[r, o0 + o] for r < nr, o < MO (the last outputs, out % 6 of them): one FMA chain over k
// per output. p: the packed panel
// [in][16]; w: W's row o0 (rows at stride in); y: the panel's first row, stride ys.
template <int MO>
void Tile(const float* p, const float* w, int in, float* y, int ys, int nr) {
  __m256 c0[MO], c1[MO];
  for (int o = 0; o < MO; ++o) c0[o] = c1[o] = _mm256_setzero_ps();
#pragma GCC unroll 4
  for (int k = 0; k < in; ++k) {
    const __m256 x0 = _mm256_load_ps(p + size_t(k) * kPanel), x1 = _mm256_load_ps(p + size_t(k) * kPanel + 8);
#pragma GCC unroll 6
    for (int o = 0; o < MO; ++o) {
      const __m256 b = _mm256_broadcast_ss(w + size_t(o) * in + k);
      c0[o] = _mm256_fmadd_ps(b, x0, c0[o]);
      c1[o] = _mm256_fmadd_ps(b, x1, c1[o]);
    }
  }
  alignas(32) float t[MO][kPanel];
  for (int o = 0; o < MO; ++o) {
    _mm256_store_ps(t[o], c0[o]);
    _mm256_store_ps(t[o] + 8, c1[o]);
  }
  for (int r = 0; r < nr; ++r)
    for (int o = 0; o < MO; ++o) y[size_t(r) * ys + o] = t[o][r];
}

// Tile<6> with its 12 accumulators as named variables: GCC kept the generic template's
// arrays in memory (a store per FMA, a third of the speed).
void Tile6(const float* p, const float* w, int in, float* y, int ys, int nr) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0, a8 = a0, a9 = a0,
         a10 = a0, a11 = a0;
  const float *w0 = w, *w1 = w + in, *w2 = w + 2 * size_t(in), *w3 = w + 3 * size_t(in), *w4 = w + 4 * size_t(in),
              *w5 = w + 5 * size_t(in);
#pragma GCC unroll 4
  for (int k = 0; k < in; ++k) {
    const __m256 x0 = _mm256_load_ps(p + size_t(k) * kPanel), x1 = _mm256_load_ps(p + size_t(k) * kPanel + 8);
    __m256 b = _mm256_broadcast_ss(w0 + k);
    a0 = _mm256_fmadd_ps(b, x0, a0);
    a1 = _mm256_fmadd_ps(b, x1, a1);
    b = _mm256_broadcast_ss(w1 + k);
    a2 = _mm256_fmadd_ps(b, x0, a2);
    a3 = _mm256_fmadd_ps(b, x1, a3);
    b = _mm256_broadcast_ss(w2 + k);
    a4 = _mm256_fmadd_ps(b, x0, a4);
    a5 = _mm256_fmadd_ps(b, x1, a5);
    b = _mm256_broadcast_ss(w3 + k);
    a6 = _mm256_fmadd_ps(b, x0, a6);
    a7 = _mm256_fmadd_ps(b, x1, a7);
    b = _mm256_broadcast_ss(w4 + k);
    a8 = _mm256_fmadd_ps(b, x0, a8);
    a9 = _mm256_fmadd_ps(b, x1, a9);
    b = _mm256_broadcast_ss(w5 + k);
    a10 = _mm256_fmadd_ps(b, x0, a10);
    a11 = _mm256_fmadd_ps(b, x1, a11);
  }
  alignas(32) float t[kMo][kPanel];
  _mm256_store_ps(t[0], a0);
  _mm256_store_ps(t[0] + 8, a1);
  _mm256_store_ps(t[1], a2);
  _mm256_store_ps(t[1] + 8, a3);
  _mm256_store_ps(t[2], a4);
  _mm256_store_ps(t[2] + 8, a5);
  _mm256_store_ps(t[3], a6);
  _mm256_store_ps(t[3] + 8, a7);
  _mm256_store_ps(t[4], a8);
  _mm256_store_ps(t[4] + 8, a9);
  _mm256_store_ps(t[5], a10);
  _mm256_store_ps(t[5] + 8, a11);
  for (int r = 0; r < nr; ++r)
    for (int o = 0; o < kMo; ++o) y[size_t(r) * ys + o] = t[o][r];
}

// The AVX2 build's tile switch (the AVX-512 build's RunBlock runs RunTile512 instead).
[[maybe_unused]] void RunTile(int mo, const float* p, const float* w, int in, float* y, int ys, int nr) {
  switch (mo) {
    case 1: return Tile<1>(p, w, in, y, ys, nr);
    case 2: return Tile<2>(p, w, in, y, ys, nr);
    case 3: return Tile<3>(p, w, in, y, ys, nr);
    case 4: return Tile<4>(p, w, in, y, ys, nr);
    case 5: return Tile<5>(p, w, in, y, ys, nr);
    default: return Tile6(p, w, in, y, ys, nr);
  }
}

#if defined(CEDAR_PREFILL_AVX512)
// The AVX-512 tile: 6 outputs x NP panels (16 rows each, one 16-lane vector per panel), so a
// broadcast weight feeds NP FMAs (18 accumulators + 3 x + 1 broadcast of 32 registers at NP = 3).
// Each output is still one FMA chain over k per row: the same bits as the AVX2 tile and the
// scalar twin, only twice the FMA width (measured ~1.7x the AVX2 FMA rate on this machine's
// cores: bench_gemm).
template <int MO, int NP>
void Tile512(const float* p, size_t panel_floats, const float* w, int in, float* y, int ys, int nr) {
  __m512 c[NP][MO];
  for (int q = 0; q < NP; ++q)
    for (int o = 0; o < MO; ++o) c[q][o] = _mm512_setzero_ps();
  const float* wr[MO];
  for (int o = 0; o < MO; ++o) wr[o] = w + size_t(o) * in;
#pragma GCC unroll 2
  for (int k = 0; k < in; ++k) {
    __m512 xv[NP];
    for (int q = 0; q < NP; ++q) xv[q] = _mm512_load_ps(p + size_t(q) * panel_floats + size_t(k) * kPanel);
#pragma GCC unroll 6
    for (int o = 0; o < MO; ++o) {
      const __m512 b = _mm512_set1_ps(wr[o][k]);
      for (int q = 0; q < NP; ++q) c[q][o] = _mm512_fmadd_ps(b, xv[q], c[q][o]);
    }
  }
  alignas(64) float t[MO][kPanel];
  for (int q = 0; q < NP; ++q) {
    for (int o = 0; o < MO; ++o) _mm512_store_ps(t[o], c[q][o]);
    const int rows = std::min(kPanel, nr - q * kPanel);
    for (int r = 0; r < rows; ++r)
      for (int o = 0; o < MO; ++o) y[size_t(q * kPanel + r) * ys + o] = t[o][r];
  }
}

template <int NP>
void RunTile512Np(int mo, const float* p, size_t pf, const float* w, int in, float* y, int ys, int nr) {
  switch (mo) {
    case 1: return Tile512<1, NP>(p, pf, w, in, y, ys, nr);
    case 2: return Tile512<2, NP>(p, pf, w, in, y, ys, nr);
    case 3: return Tile512<3, NP>(p, pf, w, in, y, ys, nr);
    case 4: return Tile512<4, NP>(p, pf, w, in, y, ys, nr);
    case 5: return Tile512<5, NP>(p, pf, w, in, y, ys, nr);
    default: return Tile512<6, NP>(p, pf, w, in, y, ys, nr);
  }
}

// All panels of a block (1-3) against outputs [o0, o0 + mo): y is the block's first row.
void RunTile512(int mo, int panels, const float* p, size_t pf, const float* w, int in, float* y, int ys, int nr) {
  switch (panels) {
    case 1: return RunTile512Np<1>(mo, p, pf, w, in, y, ys, nr);
    case 2: return RunTile512Np<2>(mo, p, pf, w, in, y, ys, nr);
    default: return RunTile512Np<3>(mo, p, pf, w, in, y, ys, nr);
  }
}
#endif

CEDAR_AVX2_END
#endif

}  // namespace

#if !(defined(__AVX2__) && defined(__FMA__))
namespace {
// GemmPrefillRows where the build has no AVX2 and FMA (CEDAR_NATIVE=OFF without an -march) and
// the CPU neither (avx2_runtime.h): the same FMA chain per output (ref's bits), 8 rows of x at a
// time, transposed so the chains of 8 rows run side by side, so such a build keeps the prefill's
// row invariance without falling back to sgemm.
void GemmPrefillRowsPortable(const float* x, const float* w, float* y, int in, int out, int y_stride, int r0, int r1) {
  constexpr int kRows = 8;
  thread_local std::vector<float> xt;  // [in][kRows]: 8 rows of x, transposed
  xt.resize(size_t(in) * kRows);
  for (int b0 = r0; b0 < r1; b0 += kRows) {
    const int nr = std::min(kRows, r1 - b0);
    for (int k = 0; k < in; ++k)
      for (int i = 0; i < kRows; ++i) xt[size_t(k) * kRows + i] = i < nr ? x[size_t(b0 + i) * in + k] : 0.0f;
    int o = 0;
    for (; o + 4 <= out; o += 4) {  // 4 outputs share each load of x: 4 FMAs per 8 rows of x
      const float* wo = w + size_t(o) * in;
      float a0[kRows] = {}, a1[kRows] = {}, a2[kRows] = {}, a3[kRows] = {};
      for (int k = 0; k < in; ++k) {
        const float w0 = wo[k], w1 = wo[in + k], w2 = wo[2 * size_t(in) + k], w3 = wo[3 * size_t(in) + k];
        const float* xk = xt.data() + size_t(k) * kRows;
#pragma omp simd
        for (int i = 0; i < kRows; ++i) {
          a0[i] = std::fma(w0, xk[i], a0[i]);
          a1[i] = std::fma(w1, xk[i], a1[i]);
          a2[i] = std::fma(w2, xk[i], a2[i]);
          a3[i] = std::fma(w3, xk[i], a3[i]);
        }
      }
      for (int i = 0; i < nr; ++i) {
        float* yr = y + size_t(b0 + i) * y_stride + o;
        yr[0] = a0[i], yr[1] = a1[i], yr[2] = a2[i], yr[3] = a3[i];
      }
    }
    for (; o < out; ++o) {
      const float* wo = w + size_t(o) * in;
      float acc[kRows] = {};
      for (int k = 0; k < in; ++k) {
        const float wk = wo[k];
        const float* xk = xt.data() + size_t(k) * kRows;
#pragma omp simd
        for (int i = 0; i < kRows; ++i) acc[i] = std::fma(wk, xk[i], acc[i]);
      }
      for (int i = 0; i < nr; ++i) y[size_t(b0 + i) * y_stride + o] = acc[i];
    }
  }
}
}  // namespace
#endif

namespace {

#if defined(CEDAR_PREFILL_AVX2)
CEDAR_AVX2_BEGIN
// Rows [b0, b0 + nr) of y (nr <= kPrefillRowBlock) from their `panels` packed panels at p0 (one
// every panel_floats): every output, a tile of 6 at a time.
void RunBlock(const float* p0, size_t panel_floats, int panels, const float* w, float* y, int in, int out, int y_stride,
              int b0, int nr) {
#if defined(CEDAR_PREFILL_AVX512)
  for (int o0 = 0; o0 < out; o0 += kMo)
    RunTile512(std::min(kMo, out - o0), panels, p0, panel_floats, w + size_t(o0) * in, in, y + size_t(b0) * y_stride + o0,
               y_stride, nr);
#else
  for (int o0 = 0; o0 < out; o0 += kMo) {
    const int mo = std::min(kMo, out - o0);
    for (int pi = 0; pi < panels; ++pi)
      RunTile(mo, p0 + size_t(pi) * panel_floats, w + size_t(o0) * in, in, y + size_t(b0 + pi * kPanel) * y_stride + o0,
              y_stride, std::min(kPanel, nr - pi * kPanel));
  }
#endif
}
CEDAR_AVX2_END
#endif

}  // namespace

void GemmPrefillRows(const float* x, const float* w, float* y, int in, int out, int y_stride, int r0, int r1) {
  if (r1 <= r0 || out <= 0) return;
  if (in <= 0) {
    for (int r = r0; r < r1; ++r) std::fill(y + size_t(r) * y_stride, y + size_t(r) * y_stride + out, 0.0f);
    return;
  }
#if !(defined(__AVX2__) && defined(__FMA__))
  if (!Avx2KernelsRun()) return GemmPrefillRowsPortable(x, w, y, in, out, y_stride, r0, r1);
#endif
#if defined(CEDAR_PREFILL_AVX2)
  // Up to kPrefillRowBlock rows at a time: their panels (packed once, reused by every output)
  // and a 6-output weight block that each panel's tile reads in turn.
  thread_local std::vector<float> pack;  // reused across calls
  for (int b0 = r0; b0 < r1; b0 += kPrefillRowBlock) {
    const int b1 = std::min(r1, b0 + kPrefillRowBlock);
    const int panels = (b1 - b0 + kPanel - 1) / kPanel;
    const size_t panel_floats = size_t(in) * kPanel;
    float* p0 = Aligned64(pack, size_t(panels) * panel_floats);
    for (int pi = 0; pi < panels; ++pi)
      PackPanel(x, in, b0 + pi * kPanel, std::min(kPanel, b1 - b0 - pi * kPanel), p0 + size_t(pi) * panel_floats);
    RunBlock(p0, panel_floats, panels, w, y, in, out, y_stride, b0, b1 - b0);
  }
#endif
}

void PackedRows::Pack(const float* x, int n, int in) {
  x_ = x;
  n_ = n;
  in_ = in;
#if defined(CEDAR_PREFILL_AVX2)
  if (!Avx2KernelsRun()) return;  // GemmPackedRows reads x itself
  const int panels = (n + kPanel - 1) / kPanel;
  base_ = Aligned64(buf_, size_t(panels) * panel_floats());
  ParallelFor(panels, 4, [&](int64_t p0, int64_t p1) {
    for (int64_t pi = p0; pi < p1; ++pi)
      PackPanel(x, in, int(pi) * kPanel, std::min(kPanel, n - int(pi) * kPanel), base_ + size_t(pi) * panel_floats());
  });
#endif
}

void GemmPackedRows(const PackedRows& px, const float* w, float* y, int out, int y_stride) {
  if (px.n() <= 0 || out <= 0) return;
#if defined(CEDAR_PREFILL_AVX2)
  if (px.in() <= 0 || !Avx2KernelsRun()) return GemmPrefillRows(px.x(), w, y, px.in(), out, y_stride, 0, px.n());
  for (int b0 = 0; b0 < px.n(); b0 += kPrefillRowBlock) {
    const int nr = std::min(px.n() - b0, kPrefillRowBlock);
    RunBlock(px.panel(b0 / kPanel), px.panel_floats(), (nr + kPanel - 1) / kPanel, w, y, px.in(), out, y_stride, b0, nr);
  }
#else
  GemmPrefillRows(px.x(), w, y, px.in(), out, y_stride, 0, px.n());
#endif
}

namespace ref {

void GemmPrefillRows(const float* x, const float* w, float* y, int in, int out, int y_stride, int r0, int r1) {
  for (int r = r0; r < r1; ++r)
    for (int o = 0; o < out; ++o) {
      float acc = 0.0f;
      for (int k = 0; k < in; ++k) acc = std::fma(w[size_t(o) * in + k], x[size_t(r) * in + k], acc);
      y[size_t(r) * y_stride + o] = acc;
    }
}

}  // namespace ref

}  // namespace cedar::kernels::internal
