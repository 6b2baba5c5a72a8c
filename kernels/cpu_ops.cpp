// Fast CPU kernels: OpenBLAS for the matrix products, vectorised float loops elsewhere.
// Each must agree with its scalar twin in reference_ops.cpp within float tolerance.
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <vector>

#include "kernels/avx2_runtime.h"
#include "kernels/cpu_internal.h"
#include "kernels/exp_avx2.h"
#include "kernels/ops.h"
#include "kernels/thread_pool.h"
#include "kernels/work_counters.h"

namespace cedar::kernels {

namespace internal {
void EnsureBlasSingleThreaded() {
  static const bool once = [] {
    openblas_set_num_threads(1);
    return true;
  }();
  (void)once;
}
}  // namespace internal

namespace {

using internal::EnsureBlasSingleThreaded;

// y[n, out] (+)= x[n, in] w[out, in]^T, split over output columns (each part streams its own
// slice of the weights) or, for narrow outputs, over rows.
void MatmulImpl(const float* x, const float* w, float* y, int n, int in, int out, float beta) {
  EnsureBlasSingleThreaded();
  if (n <= 0 || out <= 0) return;
  if (in <= 0) {
    if (beta == 0.0f) std::fill(y, y + size_t(n) * out, 0.0f);
    return;
  }
  const double work = double(n) * in * out;
  // A few rows (decode, batched decode): the product streams its weights from memory, and
  // splitting 128 KB of them already pays for the hand-off (~1 us); MatmulMany cuts it into
  // claimable slices.
  if (n <= internal::kFewRowsMax && beta == 0.0f && work >= 3e4) {
    const MatmulJob job{x, w, y, n, in, out};
    internal::RunMatmulJobs(&job, 1);
    return;
  }
  if (beta == 0.0f && internal::PrefillRowsJob(MatmulJob{x, w, y, n, in, out})) {
    // Many rows (prefill): blocks of rows on GemmPrefillRows, which writes y directly (sgemm
    // with beta = 0 zeroed y in a pass of its own first).
    const MatmulJob job{x, w, y, n, in, out};
    internal::RunMatmulJobs(&job, 1);
    return;
  }
  if (RowInvariantMatmul() && (n > internal::kFewRowsMax || beta != 0.0f)) {
    // Column slices on the row-invariant GEMM; an accumulate adds the product afterwards (the
    // product's bits do not depend on the rows, so neither does the sum).
    const MatmulJob job{x, w, y, n, in, out};
    if (beta == 0.0f) {
      internal::RunMatmulJobs(&job, 1);
      return;
    }
    std::vector<float> p(size_t(n) * out);
    MatmulJob pj = job;
    pj.y = p.data();
    internal::RunMatmulJobs(&pj, 1);
    for (size_t i = 0; i < p.size(); ++i) y[i] += p[i];
    return;
  }
  const bool few = n <= internal::kFewRowsMax;
  const double split_above = few ? 3e4 : 2e5;  // smaller products stay on one thread
  const int64_t min_cols = work < split_above ? out : (few ? 16 : 64);
  if (out >= 2 * min_cols || few) {
    const MatmulJob job{x, w, y, n, in, out};
    ParallelFor(out, min_cols, [&](int64_t b, int64_t e) {
      const int cols = int(e - b);
      if (beta == 0.0f)
        internal::MatmulColumns(job, int(b), int(e));
      else if (n == 1)
        cblas_sgemv(CblasRowMajor, CblasNoTrans, cols, in, 1.0f, w + size_t(b) * in, in, x, 1, beta, y + b, 1);
      else
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, cols, in, 1.0f, x, in, w + size_t(b) * in, in, beta,
                    y + b, out);
    });
  } else {
    ParallelFor(n, work < split_above ? n : 16, [&](int64_t b, int64_t e) {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(e - b), out, in, 1.0f, x + size_t(b) * in, in, w, in,
                  beta, y + size_t(b) * out, out);
    });
  }
}

}  // namespace

void SetThreads(int n) {
  if (n > 0) SetPoolThreads(n);
}

// MatmulImpl, counted when the work counters are on (time only for top-level calls: nested
// calls run on several threads at once and their times would overlap).
static void CountedMatmul(const float* x, const float* w, float* y, int n, int in, int out, float beta) {
  if (!internal::WorkCountersOn()) return MatmulImpl(x, w, y, n, in, out, beta);
  const bool top = !InPoolJob();
  const auto t0 = std::chrono::steady_clock::now();
  MatmulImpl(x, w, y, n, in, out, beta);
  const double s = top ? std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() : 0.0;
  internal::CountMatmul(2.0 * n * in * out, s, 4.0 * in * out);
}

void Matmul(const float* x, const float* w, float* y, int n, int in, int out) { CountedMatmul(x, w, y, n, in, out, 0.0f); }

void MatmulAccumulate(const float* x, const float* w, float* y, int n, int in, int out) {
  CountedMatmul(x, w, y, n, in, out, 1.0f);
}

float Dot(const float* a, const float* b, int n) {
  float s = 0.0f;
#pragma omp simd reduction(+ : s)
  for (int i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

// Rows per part when an elementwise or per-row kernel splits over the pool: ~16K floats, so a
// prefill's norms, RoPE and SwiGLU use both cores (a serial one leaves the other idle: they
// were ~15% of a 512-token pass's wall time) and decode's few rows stay on the caller.
constexpr int64_t kElementsPerPart = 1 << 14;
int64_t RowsPerPart(int64_t floats_per_row) { return std::max<int64_t>(1, kElementsPerPart / std::max<int64_t>(1, floats_per_row)); }

void RmsNorm(const float* x, const float* weight, float* y, int n, int dim, float eps) {
  ParallelFor(n, RowsPerPart(dim), [&](int64_t r0, int64_t r1) {  // each row on its own: same bits
    for (int64_t r = r0; r < r1; ++r) {
      const float* xr = x + size_t(r) * dim;
      float* yr = y + size_t(r) * dim;
      float ss = Dot(xr, xr, dim);
      float inv = 1.0f / std::sqrt(ss / float(std::max(dim, 1)) + eps);
#pragma omp simd
      for (int i = 0; i < dim; ++i) yr[i] = xr[i] * inv * weight[i];
    }
  });
}

void Rope(float* x, int n_rows, int n_vecs, int vec_dim, int rope_dim, const int64_t* positions,
          float base, int sign) {
  const int half = rope_dim / 2;
  if (half <= 0) return;
  // The frequencies per (base, rope_dim), computed once per thread (a model has one or two bases):
  // a decode step calls Rope 3-5 times per layer with one row each, and the half pows per call
  // showed in its profile (pow + sincos + Rope ~0.6% of int8 decode's samples). Same values as
  // computing them each time. The pool's workers only read the caller's table.
  struct Table {
    float base;
    int dim;
    std::vector<double> freq;
  };
  thread_local std::vector<Table> tables;
  const Table* t = nullptr;
  for (const Table& e : tables)
    if (e.base == base && e.dim == rope_dim) t = &e;
  if (!t) {
    if (tables.size() >= 8) tables.clear();  // bounded (tests vary the base)
    Table e{base, rope_dim, std::vector<double>(size_t(half))};
    for (int i = 0; i < half; ++i) e.freq[size_t(i)] = std::pow(double(base), -2.0 * i / rope_dim);
    tables.push_back(std::move(e));
    t = &tables.back();
  }
  const std::vector<double>& freq = t->freq;
  ParallelFor(n_rows, RowsPerPart(int64_t(n_vecs) * rope_dim), [&](int64_t r0, int64_t r1) {  // rows apart: same bits
    thread_local std::vector<float> cs, sn;
    cs.resize(size_t(half));
    sn.resize(size_t(half));
    for (int64_t r = r0; r < r1; ++r) {
      for (int i = 0; i < half; ++i) {
        double ang = double(positions[r]) * freq[i] * sign;
        cs[i] = float(std::cos(ang));
        sn[i] = float(std::sin(ang));
      }
      for (int v = 0; v < n_vecs; ++v) {
        float* p = x + (size_t(r) * n_vecs + v) * vec_dim + (vec_dim - rope_dim);
        for (int i = 0; i < half; ++i) {
          float x0 = p[2 * i], x1 = p[2 * i + 1];
          p[2 * i] = x0 * cs[i] - x1 * sn[i];
          p[2 * i + 1] = x0 * sn[i] + x1 * cs[i];
        }
      }
    }
  });
}

void Softmax(float* x, int n) {
  if (n <= 0) return;
  float m = *std::max_element(x, x + n), s = 0.0f;
  for (int i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - m);
    s += x[i];
  }
  const float inv = 1.0f / s;
  for (int i = 0; i < n; ++i) x[i] *= inv;
}

#if defined(CEDAR_AVX2_KERNELS)  // AVX2 builds, and portable ones where the CPU has it (Avx2KernelsRun)
namespace {
CEDAR_AVX2_BEGIN
// SwiGLU on 8 lanes: clamps as below, then g / (1 + e^-g) * u with e = e^-|g| from
// ExpNonPositive8 (g >= 0: g / (1 + e); g < 0: g e / (1 + e), the same value as e^-g = 1 / e).
inline void SwiGLU8(const float* g, const float* u, float* out, __m256 lim) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 gv = _mm256_loadu_ps(g), uv = _mm256_loadu_ps(u);
  // (min_ps(a, b) is a < b ? a : b, max_ps(a, b) a > b ? a : b: std::min / std::clamp's
  // choices, a NaN staying NaN.)
  gv = _mm256_min_ps(lim, gv);
  uv = _mm256_max_ps(_mm256_xor_ps(lim, sign), _mm256_min_ps(lim, uv));
  const __m256 neg_abs = _mm256_or_ps(gv, sign);
  const __m256 ex = internal::ExpNonPositive8(_mm256_max_ps(_mm256_set1_ps(-87.0f), neg_abs));
  const __m256 num = _mm256_blendv_ps(gv, _mm256_mul_ps(gv, ex), gv);  // sign bit set: g e
  _mm256_storeu_ps(out, _mm256_mul_ps(_mm256_div_ps(num, _mm256_add_ps(_mm256_set1_ps(1.0f), ex)), uv));
}

// Elements [b, e) of SwiGLU on 8 lanes. std::exp kept this loop scalar (~3.5% of a 512-token
// prefill's samples). A tail of fewer than 8 runs through the same 8-lane code on a padded copy,
// so every element gets the same operations wherever it sits.
void SwiGLUAvx2(const float* g, const float* u, float* out, int64_t b, int64_t e, float lim) {
  const __m256 lv = _mm256_set1_ps(lim);
  int64_t i = b;
  for (; i + 8 <= e; i += 8) SwiGLU8(g + i, u + i, out + i, lv);
  if (i < e) {
    float tg[8] = {}, tu[8] = {}, to[8];
    std::copy(g + i, g + e, tg);
    std::copy(u + i, u + e, tu);
    SwiGLU8(tg, tu, to, lv);
    std::copy(to, to + (e - i), out + i);
  }
}
CEDAR_AVX2_END
}  // namespace
#endif

void SwiGLU(const float* g, const float* u, float* out, int n, float limit) {
  // No limit is a limit of +inf (the same values as no clamp).
  const float lim = limit > 0 ? limit : std::numeric_limits<float>::infinity();
  ParallelFor(n, kElementsPerPart, [&](int64_t b, int64_t e) {  // elementwise: same bits
#if defined(CEDAR_AVX2_KERNELS)
    if (internal::Avx2KernelsRun()) return SwiGLUAvx2(g, u, out, b, e, lim);
#endif
    for (int64_t i = b; i < e; ++i) {
      float gv = std::min(g[i], lim), uv = std::clamp(u[i], -lim, lim);
      out[i] = gv / (1.0f + std::exp(-gv)) * uv;
    }
  });
}

namespace {

#if defined(CEDAR_AVX2_KERNELS)
CEDAR_AVX2_BEGIN
// scores[j] = sum_h w[h] * ReLU(q[h, :] . keys[j, :]) for one query row and keys [j0, j1), 4 heads x 2
// keys at a time (4 keys on AVX-512) (8 lanes over head_dim, finished by one hadd tree per key; head_dim % 8 == 0,
// n_heads % 4 == 0). Decode scores one row per sequence: sgemm packed all the keys for it
// (perf, int8 decode on small: sgemm's copy and kernel 1.6% of the samples, ~20 us per index
// layer); this reads each key once. The heads' terms are added in head order, as below.
// The keys stream from memory (8 MiB a layer at 16K tokens): the hardware prefetcher alone kept
// one thread at ~20 GB/s, so the loops fetch kKeysAhead bytes ahead (one thread, 16384 keys of
// 128 floats from memory: 463 -> 270 us at 4 KiB, 262 at 8 KiB; 2048 keys 59 -> 35 us).
constexpr int kKeysAhead = 4096;
void IndexScoresRowBlock(const float* q, const float* w, const float* keys, int n_heads, int hd, int j0, int j1, float* s) {
  for (int h0 = 0; h0 < n_heads; h0 += 4) {
    const float* q0 = q + size_t(h0) * hd;
    auto finish = [&](__m256 a0, __m256 a1, __m256 a2, __m256 a3, int j) {
      const __m256 t = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
      alignas(16) float d[4];
      _mm_store_ps(d, _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1)));
      float acc = s[j];
      for (int h = 0; h < 4; ++h) acc = std::fma(w[h0 + h], d[h] > 0.0f ? d[h] : 0.0f, acc);  // fused, as GCC contracted it
      s[j] = acc;
    };
    int j = j0;
#if defined(__AVX512F__)
    // Two keys per 512-bit register: lanes 0-7 key j's, lanes 8-15 key j + 1's, each lane the same
    // FMA chain as the 256-bit loop below, so the same bits with half the multiply-adds issued
    // (session 33, medium int8 on BF16 activations, steps alternating in one process: 2.1% a step
    // at 4096 tokens of context, 0.3% at 512; bf16 at 4096 1.1%).
    auto low = [](__m512 v) { return _mm512_castps512_ps256(v); };
    auto high = [](__m512 v) { return _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)); };
    auto pair = [&](const float* k, int i) {
      return _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_loadu_ps(k + i)), _mm256_loadu_ps(k + hd + i), 1);
    };
    for (; j + 4 <= j1; j += 4) {
      const float* k0 = keys + size_t(j) * hd;
      const float* k2 = k0 + 2 * hd;
      __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, b0 = a0, b1 = a0, b2 = a0, b3 = a0;
      for (int i = 0; i < hd; i += 8) {
        // The 4 keys' 16 * hd bytes, kKeysAhead bytes on: two lines an iteration.
        _mm_prefetch(reinterpret_cast<const char*>(k0) + kKeysAhead + 16 * i, _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(k0) + kKeysAhead + 16 * i + 64, _MM_HINT_T0);
        const __m512 e01 = pair(k0, i), e23 = pair(k2, i);
        const __m512 x0 = _mm512_broadcast_f32x8(_mm256_loadu_ps(q0 + i)), x1 = _mm512_broadcast_f32x8(_mm256_loadu_ps(q0 + hd + i));
        const __m512 x2 = _mm512_broadcast_f32x8(_mm256_loadu_ps(q0 + 2 * hd + i)), x3 = _mm512_broadcast_f32x8(_mm256_loadu_ps(q0 + 3 * hd + i));
        a0 = _mm512_fmadd_ps(x0, e01, a0), a1 = _mm512_fmadd_ps(x1, e01, a1), a2 = _mm512_fmadd_ps(x2, e01, a2), a3 = _mm512_fmadd_ps(x3, e01, a3);
        b0 = _mm512_fmadd_ps(x0, e23, b0), b1 = _mm512_fmadd_ps(x1, e23, b1), b2 = _mm512_fmadd_ps(x2, e23, b2), b3 = _mm512_fmadd_ps(x3, e23, b3);
      }
      finish(low(a0), low(a1), low(a2), low(a3), j);
      finish(high(a0), high(a1), high(a2), high(a3), j + 1);
      finish(low(b0), low(b1), low(b2), low(b3), j + 2);
      finish(high(b0), high(b1), high(b2), high(b3), j + 3);
    }
#endif
    for (; j + 2 <= j1; j += 2) {
      const float* k0 = keys + size_t(j) * hd;
      const float* k1 = k0 + hd;
      __m256 a00 = _mm256_setzero_ps(), a01 = a00, a02 = a00, a03 = a00, a10 = a00, a11 = a00, a12 = a00, a13 = a00;
      for (int i = 0; i < hd; i += 8) {
        _mm_prefetch(reinterpret_cast<const char*>(k0) + kKeysAhead + 8 * i, _MM_HINT_T0);  // the 2 keys' bytes: a line an iteration
        const __m256 e0 = _mm256_loadu_ps(k0 + i), e1 = _mm256_loadu_ps(k1 + i);
        const __m256 x0 = _mm256_loadu_ps(q0 + i), x1 = _mm256_loadu_ps(q0 + hd + i);
        const __m256 x2 = _mm256_loadu_ps(q0 + 2 * hd + i), x3 = _mm256_loadu_ps(q0 + 3 * hd + i);
        a00 = _mm256_fmadd_ps(x0, e0, a00), a01 = _mm256_fmadd_ps(x1, e0, a01), a02 = _mm256_fmadd_ps(x2, e0, a02), a03 = _mm256_fmadd_ps(x3, e0, a03);
        a10 = _mm256_fmadd_ps(x0, e1, a10), a11 = _mm256_fmadd_ps(x1, e1, a11), a12 = _mm256_fmadd_ps(x2, e1, a12), a13 = _mm256_fmadd_ps(x3, e1, a13);
      }
      finish(a00, a01, a02, a03, j);
      finish(a10, a11, a12, a13, j + 1);
    }
    for (; j < j1; ++j) {
      const float* k0 = keys + size_t(j) * hd;
      __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
      for (int i = 0; i < hd; i += 8) {
        const __m256 e0 = _mm256_loadu_ps(k0 + i);
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q0 + i), e0, a0), a1 = _mm256_fmadd_ps(_mm256_loadu_ps(q0 + hd + i), e0, a1);
        a2 = _mm256_fmadd_ps(_mm256_loadu_ps(q0 + 2 * hd + i), e0, a2), a3 = _mm256_fmadd_ps(_mm256_loadu_ps(q0 + 3 * hd + i), e0, a3);
      }
      finish(a0, a1, a2, a3, j);
    }
  }
}

void IndexScoresRow(const float* q, const float* w, const float* keys, int n_heads, int hd, int j_begin, int j_end, float* s) {
  std::fill(s + j_begin, s + j_end, 0.0f);
  // Keys in blocks of kKeyBlock (64 keys of 128 floats: 32 KiB, in L1) with every head's group of
  // 4 run over a block before the next: heads-outer streamed all the keys from memory once per
  // group (twice for 8 heads, 16 times for the released 64; one thread, 16384 keys, 8 heads:
  // 449 -> 404 us before the prefetch). Each key's heads are still added in head order: the same
  // bits. Session 33, medium int8 on BF16 activations, decode steps alternating in one process,
  // blocks and prefetch against neither: 15.35 -> 13.66 ms a step at 16384 tokens of context,
  // 17.34 -> 17.05 at 4096.
  constexpr int kKeyBlock = 64;
  for (int jb = j_begin; jb < j_end; jb += kKeyBlock) IndexScoresRowBlock(q, w, keys, n_heads, hd, jb, std::min(j_end, jb + kKeyBlock), s);
}
CEDAR_AVX2_END
#endif

}  // namespace

void IndexScores(const float* q, const float* w, const float* keys, int n_rows, int n_heads,
                 int head_dim, int n_keys, float* scores) {
  if (n_rows <= 0 || n_keys <= 0) return;
  EnsureBlasSingleThreaded();
  if (internal::WorkCountersOn()) internal::CountIndex(2.0 * n_rows * n_keys * n_heads * head_dim);
#if defined(CEDAR_AVX2_KERNELS)
  if (n_rows <= 2 && n_heads % 4 == 0 && head_dim % 8 == 0 && internal::Avx2KernelsRun()) {  // decode: one row per sequence
    // The keys split over the pool: each key's score is its own sum in the same order, so the
    // bits do not depend on the split. Serial, this was the one part of a decode step on one
    // core while the other waited (session 33, medium int8 on BF16 activations, steps
    // alternating in one process: at 512 tokens of context 0.8-1.0% faster a step, at 4096
    // 5.4%, 15.01 -> 14.21 ms). A part is at least 64 keys or 64K multiply-adds (~1 us of hand-off).
    const int64_t grain = std::max<int64_t>(64, (int64_t(1) << 16) / (int64_t(n_heads) * head_dim));
    for (int r = 0; r < n_rows; ++r)
      ParallelFor(n_keys, grain, [&](int64_t j0, int64_t j1) {
        IndexScoresRow(q + size_t(r) * n_heads * head_dim, w + size_t(r) * n_heads, keys, n_heads, head_dim, int(j0), int(j1),
                       scores + size_t(r) * n_keys);
      });
    return;
  }
#endif
  std::fill(scores, scores + size_t(n_rows) * n_keys, 0.0f);
  // q is [n_rows * n_heads, head_dim] row-major, so all heads of a run of rows are one sgemm
  // against the keys; the ReLU-weighted sum over heads follows per row.
  auto rows_part = [&](int64_t r0, int64_t r1) {
    constexpr int64_t kRows = 16;  // bounds the [kRows * n_heads, n_keys] product buffer
    thread_local std::vector<float> tmp;
    for (int64_t a = r0; a < r1; a += kRows) {
      const int nr = int(std::min(kRows, r1 - a));
      tmp.resize(size_t(nr) * n_heads * n_keys);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nr * n_heads, n_keys, head_dim, 1.0f,
                  q + size_t(a) * n_heads * head_dim, head_dim, keys, head_dim, 0.0f, tmp.data(), n_keys);
      for (int r = 0; r < nr; ++r) {
        float* s = scores + size_t(a + r) * n_keys;
        for (int h = 0; h < n_heads; ++h) {
          const float wr = w[size_t(a + r) * n_heads + h];
          const float* t = tmp.data() + (size_t(r) * n_heads + h) * n_keys;
#pragma omp simd
          for (int j = 0; j < n_keys; ++j) s[j] += wr * (t[j] > 0.0f ? t[j] : 0.0f);  // std::max does not vectorise
        }
      }
    }
  };
  const double work = double(n_rows) * n_keys * n_heads * head_dim;
  if (n_rows <= 2) {
    // Decode without the path above (no AVX2 and FMA, or heads / head_dim it does not tile): one
    // sgemm per row, so a row's bits do not depend on how the pool splits the rows (sgemm's did).
    ParallelFor(n_rows, 1, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) rows_part(r, r + 1);
    });
  } else if (work > 2e5) {
    ParallelFor(n_rows, 1, rows_part);
  } else {
    rows_part(0, n_rows);
  }
}

namespace {

// Order-preserving map of a float to an unsigned key (larger float, larger key); -0 and +0
// map to the same key, as they compare equal.
inline uint32_t SortKey(float v) {
  uint32_t u;
  std::memcpy(&u, &v, sizeof u);
  if (u == 0x80000000u) u = 0;
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

}  // namespace

int TopK(const float* scores, int n, int k, int32_t* out) {
  // A radix select: a histogram of the keys' top 11 bits finds the bin holding the k-th
  // largest score, a selection inside that bin finds the score itself, and one scan in index
  // order writes every score above it and the ties with it from the lowest index up (so the
  // output needs no sort). Two light passes over the row instead of nth_element's branchy
  // partitions (TopK was ~10% of a 16K-token prefill).
  if (k <= 0 || n <= 0) return 0;
  const float ninf = -std::numeric_limits<float>::infinity();
  thread_local std::vector<uint32_t> keys, cand;
  // Zeroed once; after each call only the bins it touched are cleared again (a row's scores
  // span a few exponents, and clearing all 8 KB per row showed in profiles).
  thread_local uint32_t hist[2048] = {};
  keys.resize(size_t(n));
  int finite = 0;
  uint32_t lo_bin = 2047, hi_bin = 0;
  const uint32_t ninf_key = SortKey(ninf);
  for (int i = 0; i < n; ++i) {
    const uint32_t key = SortKey(scores[i]);
    keys[size_t(i)] = key;
    if (key != ninf_key) {
      ++hist[key >> 21];
      lo_bin = std::min(lo_bin, key >> 21);
      hi_bin = std::max(hi_bin, key >> 21);
      ++finite;
    }
  }
  struct ClearBins {
    uint32_t lo, hi;
    ~ClearBins() {
      if (lo <= hi) std::fill(hist + lo, hist + hi + 1, 0u);
    }
  } clear{lo_bin, hi_bin};
  int written = 0;
  if (finite <= k) {  // every finite score is chosen
    for (int i = 0; i < n; ++i)
      if (keys[size_t(i)] != ninf_key) out[written++] = i;
    return written;
  }
  int above = 0, bin = int(hi_bin);
  while (above + int(hist[bin]) < k) above += int(hist[bin--]);
  cand.clear();
  for (int i = 0; i < n; ++i)
    if ((keys[size_t(i)] >> 21) == uint32_t(bin) && keys[size_t(i)] != ninf_key) cand.push_back(keys[size_t(i)]);
  const int need = k - above;  // the need-th largest key of the bin is the k-th overall
  std::nth_element(cand.begin(), cand.begin() + (need - 1), cand.end(), std::greater<uint32_t>());
  const uint32_t kth = cand[size_t(need - 1)];
  for (int i = 0; i < need - 1; ++i) above += cand[size_t(i)] > kth;
  int ties = k - above;
  for (int i = 0; i < n && written < k; ++i) {
    const uint32_t key = keys[size_t(i)];
    if (key > kth) out[written++] = i;
    else if (key == kth && ties > 0) {
      out[written++] = i;
      --ties;
    }
  }
  return written;
}

}  // namespace cedar::kernels
