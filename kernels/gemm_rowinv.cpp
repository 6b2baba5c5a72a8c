// Row-invariant GEMM (see gemm_rowinv.h for the summation order it keeps).
//
// Blocking: x is packed once per call (tiles of 4 rows over all of K); the weights are decoded
// one panel of kPanelRows rows x all of K at a time (once per panel per call, reused by every
// row of x) and packed in tiles of 3 rows, a column group of panels at a time (kGroupFloats,
// L3); rows of x go in blocks that stay in L2 (kXBlockFloats) while the group's panels stream
// past, K in steps of kKStep. A 4 x 3 register tile holds one 8-lane accumulator per output and
// runs twice per K step: once over the even 8-float chunks (lanes 0-7 of the lane-16 order) and
// once over the odd ones (lanes 8-15), because two accumulator sets at once would need 24 of
// AVX2's 16 registers. Per 16 floats of K a tile does 12 FMAs per half for 7 loads; the
// accumulators live in a small buffer between K steps and are reduced to the output (the
// lane-16 add tree) as soon as a tile's K is done.
//
// AVX-512 builds run a one-pass kernel instead: one 16-lane accumulator per output holds the
// whole lane-16 order, a 4 x 4 tile (16 accumulators, 4 weight vectors, 1 x vector) per 16
// floats of K, tiles packed [K step][16-float block][rows][16], and the add tree run on four
// outputs at once (Reduce4x16). The same bits as the AVX2 kernel and the scalar twin.
#include "kernels/gemm_rowinv.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/avx2_runtime.h"
#if defined(CEDAR_AVX2_KERNELS)  // AVX2 builds, and portable ones where the CPU has it (Avx2KernelsRun)
#define CEDAR_GEMM_AVX2 1
#endif

#if defined(CEDAR_GEMM_AVX2) && defined(__AVX512F__)
#define CEDAR_GEMM_AVX512 1
#endif

#include "kernels/cpu_internal.h"
#include "kernels/hsum_rows_avx512.h"
#include "kernels/thread_pool.h"

namespace cedar::kernels {

namespace {

constexpr int kPanelRows = 48;  // rows of W decoded per panel (multiple of kNr)
constexpr int kKStep = 512;     // floats of K per pass over the tiles (multiple of 16)
constexpr size_t kGroupFloats = size_t(2) << 20;  // packed W per column group (8 MB, L3)
constexpr size_t kXBlockFloats = 32 << 10;        // packed x per row block (128 KB, in L2)
constexpr int kMr = 4;          // rows of x per register tile
#if defined(CEDAR_GEMM_AVX512)
constexpr int kNr = 4;          // rows of W per register tile
constexpr int kTileAcc = kMr * kNr * 16;     // floats of accumulator per tile (one 16-lane vector each)
#else
constexpr int kNr = 3;          // rows of W per register tile
constexpr int kTileAcc = 2 * kMr * kNr * 8;  // floats of accumulator per tile (two 8-lane halves)
#endif

int RoundUp16(int k) { return (k + 15) / 16 * 16; }

void DecodeF32(const WeightPanelSource& s, int row0, int nrows, int k0, int nk, float* dst) {
  const float* w = static_cast<const float*>(s.ctx);
  for (int r = 0; r < nrows; ++r)
    std::memcpy(dst + size_t(r) * nk, w + size_t(row0 + r) * s.in + k0, sizeof(float) * size_t(nk));
}

CEDAR_AVX2_BEGIN
#if defined(CEDAR_GEMM_AVX512)

// MR rows of x against kNr rows of W over nblk16 blocks of 16 floats of K, from packed tiles
// xp[nblk16][MR][16] and wp[nblk16][kNr][16]. acc[MR][kNr][16] is loaded (or zeroed when init)
// and stored back.
template <int MR>
void Tile(const float* xp, const float* wp, int nblk16, float* acc, bool init) {
  __m512 a[MR][kNr];
  for (int b = 0; b < MR; ++b)
    for (int r = 0; r < kNr; ++r) a[b][r] = init ? _mm512_setzero_ps() : _mm512_load_ps(acc + (b * kNr + r) * 16);
#pragma GCC unroll 2
  for (int c = 0; c < nblk16; ++c) {
    __m512 w[kNr];
    for (int r = 0; r < kNr; ++r) w[r] = _mm512_load_ps(wp + (c * kNr + r) * 16);
#pragma GCC unroll 4
    for (int b = 0; b < MR; ++b) {
      const __m512 xv = _mm512_load_ps(xp + (c * MR + b) * 16);
      for (int r = 0; r < kNr; ++r) a[b][r] = _mm512_fmadd_ps(w[r], xv, a[b][r]);
    }
  }
  for (int b = 0; b < MR; ++b)
    for (int r = 0; r < kNr; ++r) _mm512_store_ps(acc + (b * kNr + r) * 16, a[b][r]);
}

// A finished tile's accumulators (acc[mr][kNr][16]) reduced into y: row b0 + b, column col + r
// for r < nc (the tile's valid W rows).
void StoreTile(const float* acc, int mr, float* y, int y_stride, int b0, int col, int nc) {
  for (int b = 0; b < mr; ++b) {
    const float* a = acc + b * kNr * 16;
    alignas(16) float res[4];
    internal::HSum16x4(res, _mm512_load_ps(a), _mm512_load_ps(a + 16), _mm512_load_ps(a + 32), _mm512_load_ps(a + 48));
    for (int r = 0; r < std::min(nc, kNr); ++r) y[size_t(b0 + b) * y_stride + col + r] = res[r];
  }
}

#elif defined(CEDAR_GEMM_AVX2)

// MR rows of x against 3 rows of W over nblk16 blocks of 16 floats of K, from packed tiles:
// xp[2][nblk16][MR][8] and wp[2][nblk16][3][8] (half 0: floats 0-7 of each block, half 1:
// floats 8-15). acc[2][MR][3][8] is loaded (or zeroed when init) and stored back.
template <int MR>
void Tile(const float* xp, const float* wp, int nblk16, float* acc, bool init) {
  for (int h = 0; h < 2; ++h) {
    float* ah = acc + h * MR * kNr * 8;
    __m256 a[MR][kNr];
    for (int b = 0; b < MR; ++b)
      for (int r = 0; r < kNr; ++r) a[b][r] = init ? _mm256_setzero_ps() : _mm256_loadu_ps(ah + (b * kNr + r) * 8);
    const float* xh = xp + size_t(h) * nblk16 * MR * 8;
    const float* wh = wp + size_t(h) * nblk16 * kNr * 8;
#pragma GCC unroll 2
    for (int c = 0; c < nblk16; ++c) {
      const __m256 w0 = _mm256_loadu_ps(wh + c * kNr * 8);
      const __m256 w1 = _mm256_loadu_ps(wh + c * kNr * 8 + 8);
      const __m256 w2 = _mm256_loadu_ps(wh + c * kNr * 8 + 16);
#pragma GCC unroll 4
      for (int b = 0; b < MR; ++b) {
        const __m256 xv = _mm256_loadu_ps(xh + (c * MR + b) * 8);
        a[b][0] = _mm256_fmadd_ps(w0, xv, a[b][0]);
        a[b][1] = _mm256_fmadd_ps(w1, xv, a[b][1]);
        a[b][2] = _mm256_fmadd_ps(w2, xv, a[b][2]);
      }
    }
    for (int b = 0; b < MR; ++b)
      for (int r = 0; r < kNr; ++r) _mm256_storeu_ps(ah + (b * kNr + r) * 8, a[b][r]);
  }
}

// internal::Reduce16 of the two halves lo (lanes 0-7) and hi (lanes 8-15), vectorised.
inline float ReduceHalves(const float* lo, const float* hi) {
  const __m256 t = _mm256_add_ps(_mm256_loadu_ps(lo), _mm256_loadu_ps(hi));
  const __m128 u = _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
  const __m128 v = _mm_add_ps(u, _mm_shuffle_ps(u, u, _MM_SHUFFLE(1, 0, 3, 2)));
  return _mm_cvtss_f32(_mm_add_ss(v, _mm_shuffle_ps(v, v, 1)));
}

// ReduceHalves of four outputs at once: lo[k] / hi[k] are output k's two halves. The same adds
// as ReduceHalves, in the same pairing (t = lo + hi; u = t[0:4] + t[4:8]; v = u[0:2] + u[2:4];
// y = v[0] + v[1]), only four outputs side by side in the lanes.
inline void ReduceHalves4(const float* const lo[4], const float* const hi[4], float out[4]) {
  __m256 t[4];
  for (int k = 0; k < 4; ++k) t[k] = _mm256_add_ps(_mm256_loadu_ps(lo[k]), _mm256_loadu_ps(hi[k]));
  // u01 = [u0 | u1], u23 = [u2 | u3] (one output's 4 u's per 128-bit lane).
  const __m256 u01 = _mm256_add_ps(_mm256_permute2f128_ps(t[0], t[1], 0x20), _mm256_permute2f128_ps(t[0], t[1], 0x31));
  const __m256 u23 = _mm256_add_ps(_mm256_permute2f128_ps(t[2], t[3], 0x20), _mm256_permute2f128_ps(t[2], t[3], 0x31));
  // v: low lane [v0(o0), v1(o0), v0(o2), v1(o2)], high lane the same for o1, o3.
  const __m256 v = _mm256_add_ps(_mm256_shuffle_ps(u01, u23, _MM_SHUFFLE(1, 0, 1, 0)),
                                 _mm256_shuffle_ps(u01, u23, _MM_SHUFFLE(3, 2, 3, 2)));
  // r: low lane [y(o0), y(o2), ...], high lane [y(o1), y(o3), ...].
  const __m256 r = _mm256_add_ps(_mm256_shuffle_ps(v, v, _MM_SHUFFLE(2, 0, 2, 0)), _mm256_shuffle_ps(v, v, _MM_SHUFFLE(3, 1, 3, 1)));
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, r);
  out[0] = lanes[0];
  out[1] = lanes[4];
  out[2] = lanes[1];
  out[3] = lanes[5];
}

// A finished tile's accumulators (acc[2][mr][kNr][8]) reduced into y: row b0 + b, column col + r
// for r < nc (the tile's valid W rows); four outputs (o = b * kNr + r) at a time while they are in
// L1, the rest one by one.
void StoreTile(const float* acc, int mr, float* y, int y_stride, int b0, int col, int nc) {
  const int outs = mr * kNr;
  int o = 0;
  for (; o + 4 <= outs; o += 4) {
    const float* lo[4];
    const float* hi[4];
    float res[4];
    for (int q = 0; q < 4; ++q) {
      lo[q] = acc + (o + q) * 8;
      hi[q] = lo[q] + outs * 8;
    }
    ReduceHalves4(lo, hi, res);
    for (int q = 0; q < 4; ++q) {
      const int b = (o + q) / kNr, r = (o + q) % kNr;
      if (r < nc) y[size_t(b0 + b) * y_stride + col + r] = res[q];
    }
  }
  for (; o < outs; ++o) {
    const int b = o / kNr, r = o % kNr;
    const float* lo = acc + o * 8;
    if (r < nc) y[size_t(b0 + b) * y_stride + col + r] = ReduceHalves(lo, lo + outs * 8);
  }
}

#endif

#if defined(CEDAR_GEMM_AVX2)
// Rows [row0, row0 + nrows) of W, all of K, into panel[round_up(nrows, kNr), kp] with zeros past
// `in` and in the padding rows.
void DecodePanel(const WeightPanelSource& w, int row0, int nrows, int kp, std::vector<float>& panel,
                 std::vector<float>& raw) {
  const int prow = (nrows + kNr - 1) / kNr * kNr;
  panel.resize(size_t(prow) * kp);
  if (kp == w.in) {
    w.decode(w, row0, nrows, 0, w.in, panel.data());
  } else {
    raw.resize(size_t(nrows) * w.in);
    w.decode(w, row0, nrows, 0, w.in, raw.data());
    for (int r = 0; r < nrows; ++r) {
      std::memcpy(panel.data() + size_t(r) * kp, raw.data() + size_t(r) * w.in, sizeof(float) * size_t(w.in));
      std::fill(panel.data() + size_t(r) * kp + w.in, panel.data() + size_t(r + 1) * kp, 0.0f);
    }
  }
  std::fill(panel.data() + size_t(nrows) * kp, panel.data() + size_t(prow) * kp, 0.0f);
}

// Floats of one packed vector: 16 (AVX-512: one accumulator holds the 16 lanes) or 8 (AVX2: the
// lanes in two halves, each packed as a pass of its own).
#if defined(CEDAR_GEMM_AVX512)
constexpr int kLaneW = 16;
#else
constexpr int kLaneW = 8;
#endif

// `rows` rows of src (leading dimension ld, `in` valid floats each, zeros past them) into the
// packed tile layout: for each K step of kKStep floats, [16 / kLaneW][blocks of 16][rows][kLaneW].
// A tile of `rows` rows over all of K takes rows * kp floats.
void PackRows(const float* src, size_t ld, int rows, int in, int kp, float* dst) {
  for (int k0 = 0; k0 < kp; k0 += kKStep) {
    const int nblk16 = std::min(kKStep, kp - k0) / 16;
    for (int h = 0; h < 16 / kLaneW; ++h)
      for (int c = 0; c < nblk16; ++c)
        for (int b = 0; b < rows; ++b) {
          const int k = k0 + 16 * c + kLaneW * h;
          const float* s = src + b * ld + k;
          if (k + kLaneW <= in) {
            std::memcpy(dst, s, kLaneW * sizeof(float));
          } else {
            for (int i = 0; i < kLaneW; ++i) dst[i] = k + i < in ? s[i] : 0.0f;
          }
          dst += kLaneW;
        }
  }
}

// The ISA's Tile for a tile of mr (1-4) rows of x.
void RunTile(int mr, const float* xp, const float* wp, int nblk16, float* acc, bool init) {
  switch (mr) {
    case 1: Tile<1>(xp, wp, nblk16, acc, init); break;
    case 2: Tile<2>(xp, wp, nblk16, acc, init); break;
    case 3: Tile<3>(xp, wp, nblk16, acc, init); break;
    default: Tile<4>(xp, wp, nblk16, acc, init); break;
  }
}
#endif
CEDAR_AVX2_END

}  // namespace

#if !(defined(__AVX2__) && defined(__FMA__))
namespace {
// The build has no AVX2 and FMA (CEDAR_NATIVE=OFF without an -march), and the CPU neither
// (avx2_runtime.h): each output in the lane-16 order by DotLane16Simd (ref's bits).
void GemmRowInvariantPortable(const float* x, int n, const WeightPanelSource& w, float* y, int y_stride, int col0,
                              int col1) {
  thread_local std::vector<float> row;  // one decoded weight row, reused across calls
  row.resize(size_t(std::max(w.in, 0)));
  for (int c = col0; c < col1; ++c) {
    if (w.in > 0) w.decode(w, c, 1, 0, w.in, row.data());
    for (int b = 0; b < n; ++b) y[size_t(b) * y_stride + c] = internal::DotLane16Simd(row.data(), x + size_t(b) * w.in, w.in);
  }
}
}  // namespace
#endif

WeightPanelSource F32Panels(const float* w, int out, int in) {
  WeightPanelSource s;
  s.decode = DecodeF32;
  s.ctx = w;
  s.out = out;
  s.in = in;
  return s;
}

void GemmRowInvariant(const float* x, int n, const WeightPanelSource& w, float* y, int y_stride, int col0,
                      int col1) {
#if !(defined(__AVX2__) && defined(__FMA__))
  if (!internal::Avx2KernelsRun()) return GemmRowInvariantPortable(x, n, w, y, y_stride, col0, col1);
#endif
#if defined(CEDAR_GEMM_AVX2)
  if (n <= 0 || col1 <= col0) return;
  const int in = w.in;
  if (in <= 0) {
    for (int b = 0; b < n; ++b) std::fill(y + size_t(b) * y_stride + col0, y + size_t(b) * y_stride + col1, 0.0f);
    return;
  }
  const int kp = RoundUp16(in);
  thread_local std::vector<float> xpack, panel, raw, wpack, accbuf;  // reused across calls
  // x in tiles of kMr rows, each packed over all of K (a tile's K step k0 starts at k0 * rows).
  const int n_tiles = (n + kMr - 1) / kMr;
  float* const xp0 = internal::Aligned64(xpack, size_t(n_tiles) * kMr * kp);
  for (int it = 0; it < n_tiles; ++it)
    PackRows(x + size_t(it) * kMr * in, size_t(in), std::min(kMr, n - it * kMr), in, kp,
             xp0 + size_t(it) * kMr * kp);
  // Columns in groups whose packed weights (decoded once per panel) stay in L3; rows of x in
  // blocks that stay in L2 while the group's panels stream past them.
  const int group_cols = std::max(kPanelRows, int(kGroupFloats / size_t(kp)) / kPanelRows * kPanelRows);
  const int row_block = std::clamp(int(kXBlockFloats / size_t(kp)) / kMr * kMr, kMr, 256);
  for (int g0 = col0; g0 < col1; g0 += group_cols) {
    const int g1 = std::min(col1, g0 + group_cols);
    const int n_panels = (g1 - g0 + kPanelRows - 1) / kPanelRows;
    const size_t panel_floats = size_t(kPanelRows) * kp;
    float* const wp0 = internal::Aligned64(wpack, size_t(n_panels) * panel_floats);
    for (int p = 0; p < n_panels; ++p) {
      const int jc = g0 + p * kPanelRows, nc = std::min(kPanelRows, g1 - jc);
      DecodePanel(w, jc, nc, kp, panel, raw);
      for (int jt = 0; jt < (nc + kNr - 1) / kNr; ++jt)
        PackRows(panel.data() + size_t(jt) * kNr * kp, size_t(kp), kNr, kp, kp,
                 wp0 + p * panel_floats + size_t(jt) * kNr * kp);
    }
    for (int ic = 0; ic < n; ic += row_block) {
      const int nit = (std::min(row_block, n - ic) + kMr - 1) / kMr;
      for (int p = 0; p < n_panels; ++p) {
        const int jc = g0 + p * kPanelRows, nc = std::min(kPanelRows, g1 - jc);
        const int njt = (nc + kNr - 1) / kNr;
        const float* wp = wp0 + p * panel_floats;
        float* const acc0 = internal::Aligned64(accbuf, size_t(nit) * njt * kTileAcc);
        for (int k0 = 0; k0 < kp; k0 += kKStep) {
          const int nblk16 = std::min(kKStep, kp - k0) / 16;
          const bool last = k0 + kKStep >= kp;
          for (int it = 0; it < nit; ++it) {
            const int b0 = ic + it * kMr;
            const int mr = std::min(kMr, n - b0);
            const float* xp = xp0 + size_t(b0) * kp + size_t(k0) * mr;
            for (int jt = 0; jt < njt; ++jt) {
              float* acc = acc0 + (size_t(it) * njt + jt) * kTileAcc;
              RunTile(mr, xp, wp + size_t(jt) * kNr * kp + size_t(k0) * kNr, nblk16, acc, k0 == 0);
              if (last) StoreTile(acc, mr, y, y_stride, b0, jc + jt * kNr, nc - jt * kNr);
            }
          }
        }
      }
    }
  }
#endif
}

void MatmulRowInvariant(const float* x, const float* w, float* y, int n, int in, int out) {
  const WeightPanelSource src = F32Panels(w, out, in);
  const double work = double(n) * in * out;
  ParallelFor(out, work < 2e5 ? out : kPanelRows, [&](int64_t b, int64_t e) {
    GemmRowInvariant(x, n, src, y, out, int(b), int(e));
  });
}

namespace ref {

float DotLane16(const float* w, const float* x, int in) {
  float acc[16] = {};
  const int kp = RoundUp16(in);
  for (int k = 0; k < kp; ++k) {
    const float wk = k < in ? w[k] : 0.0f, xk = k < in ? x[k] : 0.0f;
    acc[k % 16] = std::fma(wk, xk, acc[k % 16]);
  }
  return internal::Reduce16(acc);
}

void GemmRowInvariant(const float* x, int n, const WeightPanelSource& w, float* y, int y_stride, int col0,
                      int col1) {
  std::vector<float> row(size_t(std::max(w.in, 0)));
  for (int c = col0; c < col1; ++c) {
    if (w.in > 0) w.decode(w, c, 1, 0, w.in, row.data());
    for (int b = 0; b < n; ++b) y[size_t(b) * y_stride + c] = DotLane16(row.data(), x + size_t(b) * w.in, w.in);
  }
}

}  // namespace ref

}  // namespace cedar::kernels
