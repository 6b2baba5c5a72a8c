// SinkAttention on the CPU for one query row: all heads share the row's entries (they are
// keys and values at once), so the kernel reads each entry for all heads together.
//
// With AVX-512 and dim % 16 == 0 (the model's head_dim is 128): scores in tiles of 4 entries
// x 4 heads (16 accumulators, one transposing reduction per tile), then the weighted sum
// with 8 heads x 32 dims of output in registers per pass over the entries. Measured on the
// small preset's 4096-token prefill this is ~3x the generic loop below. With AVX2 + FMA and
// dim % 16 == 0, heads in groups of 4 go to the tiled kernel (kernels/attention_tiled.cpp: GEMM-like
// register tiles, ~1.5x this file's AVX2 loop); other head counts take SinkAttentionAvx2, which does
// the generic loop's arithmetic bit for bit with the work in registers; the generic loop stays as
// the path for other shapes and builds. Builds without -march compile the AVX2 kernels as well and
// take them on CPUs with AVX2 and FMA (kernels/exp_avx2.h, CEDAR_AVX2_AT_RUNTIME).
#include <algorithm>
#include <vector>

#include "kernels/exp_avx2.h"

#if defined(__AVX512F__) || defined(CEDAR_AVX2_KERNELS)
#include <immintrin.h>
#endif

#include "kernels/attention_tiled.h"
#include "kernels/cpu_internal.h"
#include "kernels/ops.h"
#include "kernels/work_counters.h"

namespace cedar::kernels {

namespace {

// Softmax with a sink over p[h * n + e] (head-major logits, already scaled), in place, leaving
// the probabilities unnormalised; inv[h] = 1 / denominator.
void SinkSoftmax(float* p, int n, int n_heads, const float* sink, float* inv) {
  for (int h = 0; h < n_heads; ++h) {
    float* ph = p + size_t(h) * n;
    float mx = sink[h];
#pragma omp simd reduction(max : mx)
    for (int e = 0; e < n; ++e) mx = std::max(mx, ph[e]);
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int e = 0; e < n; ++e) {
      ph[e] = internal::ExpNonPositive(ph[e] - mx);
      sum += ph[e];
    }
    inv[h] = 1.0f / (sum + internal::ExpNonPositive(sink[h] - mx));
  }
}

#if defined(__AVX512F__)

// The sums of the lanes of v[0..16) (16 dot products finished at once), in one vector: the
// tree leaves the sum of v[4m + j] in lane 4j + m.
inline __m512 Transpose16Sums(const __m512* v) {
  __m512 w[8], x[4], y[2];
  for (int k = 0; k < 8; ++k)
    w[k] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * k], v[2 * k + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_shuffle_f32x4(v[2 * k], v[2 * k + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  for (int k = 0; k < 4; ++k)
    x[k] = _mm512_add_ps(_mm512_shuffle_f32x4(w[2 * k], w[2 * k + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_f32x4(w[2 * k], w[2 * k + 1], _MM_SHUFFLE(3, 1, 3, 1)));
  for (int k = 0; k < 2; ++k)
    y[k] = _mm512_add_ps(_mm512_shuffle_ps(x[2 * k], x[2 * k + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_shuffle_ps(x[2 * k], x[2 * k + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  return _mm512_add_ps(_mm512_shuffle_ps(y[0], y[1], _MM_SHUFFLE(2, 0, 2, 0)),
                       _mm512_shuffle_ps(y[0], y[1], _MM_SHUFFLE(3, 1, 3, 1)));
}

// ExpNonPositive on 16 lanes (same reduction and polynomial; 2^n applied by scalef).
inline __m512 Exp512(__m512 x) {
  x = _mm512_max_ps(x, _mm512_set1_ps(-87.0f));
  const __m512 n = _mm512_roundscale_ps(_mm512_fmadd_ps(x, _mm512_set1_ps(1.44269504088896341f), _mm512_set1_ps(0.5f)),
                                        _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fmadd_ps(n, _mm512_set1_ps(2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(_mm512_mul_ps(p, r), r, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_scalef_ps(p, n);
}

// SinkSoftmax with 16 lanes at a time (the scalar loop does not vectorise).
void SinkSoftmaxAvx512(float* p, int n, int n_heads, const float* sink, float* inv) {
  const __mmask16 tail = __mmask16((1u << (n % 16)) - 1u);
  const int n16 = n / 16 * 16;
  for (int h = 0; h < n_heads; ++h) {
    float* ph = p + size_t(h) * n;
    __m512 vmx = _mm512_set1_ps(sink[h]);
    for (int e = 0; e < n16; e += 16) vmx = _mm512_max_ps(vmx, _mm512_loadu_ps(ph + e));
    if (tail) vmx = _mm512_mask_max_ps(vmx, tail, vmx, _mm512_maskz_loadu_ps(tail, ph + n16));
    const __m512 mx = _mm512_set1_ps(_mm512_reduce_max_ps(vmx));
    __m512 sum = _mm512_setzero_ps();
    for (int e = 0; e < n16; e += 16) {
      const __m512 v = Exp512(_mm512_sub_ps(_mm512_loadu_ps(ph + e), mx));
      _mm512_storeu_ps(ph + e, v);
      sum = _mm512_add_ps(sum, v);
    }
    if (tail) {
      const __m512 v = Exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(tail, ph + n16), mx));
      _mm512_mask_storeu_ps(ph + n16, tail, v);
      sum = _mm512_mask_add_ps(sum, tail, sum, v);
    }
    inv[h] = 1.0f / (_mm512_reduce_add_ps(sum) + internal::ExpNonPositive(sink[h] - _mm512_cvtss_f32(mx)));
  }
}


// p[h * n + e] = scale * q[h] . ent[e] for a tile of 4 entries x 4 heads.
inline void ScoreTile(const float* q, int n, int dim, const float* const* ent, int e0, int h0, float scale, float* p) {
  __m512 acc[16];
  for (auto& a : acc) a = _mm512_setzero_ps();
  for (int i = 0; i < dim; i += 16) {
    __m512 ev[4];
    for (int j = 0; j < 4; ++j) {
      ev[j] = _mm512_loadu_ps(ent[e0 + j] + i);
      asm("" : "+v"(ev[j]));  // in a register: GCC otherwise reloads e (or q) for every FMA
    }
    for (int h = 0; h < 4; ++h) {
      __m512 qv = _mm512_loadu_ps(q + size_t(h0 + h) * dim + i);
      asm("" : "+v"(qv));
      for (int j = 0; j < 4; ++j) acc[j * 4 + h] = _mm512_fmadd_ps(qv, ev[j], acc[j * 4 + h]);
    }
  }
  // acc[j * 4 + h] lands in lane 4h + j: each 128-bit quarter is one head's 4 entries, which
  // are adjacent in p.
  const __m512 z = _mm512_mul_ps(Transpose16Sums(acc), _mm512_set1_ps(scale));
  _mm_storeu_ps(p + size_t(h0) * n + e0, _mm512_extractf32x4_ps(z, 0));
  _mm_storeu_ps(p + size_t(h0 + 1) * n + e0, _mm512_extractf32x4_ps(z, 1));
  _mm_storeu_ps(p + size_t(h0 + 2) * n + e0, _mm512_extractf32x4_ps(z, 2));
  _mm_storeu_ps(p + size_t(h0 + 3) * n + e0, _mm512_extractf32x4_ps(z, 3));
}

inline float DotAvx512(const float* a, const float* b, int dim) {
  __m512 acc = _mm512_setzero_ps();
  for (int i = 0; i < dim; i += 16) acc = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc);
  return _mm512_reduce_add_ps(acc);
}

// out[h0 + h, i0 .. i0 + 16 * C) = inv[h] * sum_e p[h0 + h, e] ent[e][i0 ..] for HB heads.
template <int HB, int C>
void WeightedSumPass(const float* p, int n, int dim, const float* const* ent, int h0, int i0,
                     const float* inv, float* out) {
  __m512 acc[HB][C];
  for (auto& row : acc)
    for (auto& a : row) a = _mm512_setzero_ps();
  for (int e = 0; e < n; ++e) {
    __m512 ev[C];
    for (int c = 0; c < C; ++c) ev[c] = _mm512_loadu_ps(ent[e] + i0 + 16 * c);
    for (int h = 0; h < HB; ++h) {
      const __m512 w = _mm512_set1_ps(p[size_t(h0 + h) * n + e]);
      for (int c = 0; c < C; ++c) acc[h][c] = _mm512_fmadd_ps(w, ev[c], acc[h][c]);
    }
  }
  for (int h = 0; h < HB; ++h)
    for (int c = 0; c < C; ++c)
      _mm512_storeu_ps(out + size_t(h0 + h) * dim + i0 + 16 * c, _mm512_mul_ps(acc[h][c], _mm512_set1_ps(inv[h0 + h])));
}

template <int HB>
void WeightedSum(const float* p, int n, int dim, const float* const* ent, int h0, const float* inv, float* out) {
  int i = 0;
  for (; i + 32 <= dim; i += 32) WeightedSumPass<HB, 2>(p, n, dim, ent, h0, i, inv, out);
  if (i < dim) WeightedSumPass<HB, 1>(p, n, dim, ent, h0, i, inv, out);
}

void SinkAttentionAvx512(const float* q, int n_heads, int dim, const float* const* ent, int n, const float* sink,
                         float scale, float* out) {
  thread_local std::vector<float> p;  // [n_heads, n] logits, then unnormalised probabilities
  thread_local std::vector<float> inv;
  p.resize(size_t(std::max(n, 1)) * n_heads);
  inv.resize(size_t(n_heads));
  const int n4 = n / 4 * 4, h4 = n_heads / 4 * 4;
  for (int e = 0; e < n4; e += 4) {
    // Selected pool entries are scattered (L3 more than L2): fetch a few tiles ahead.
    constexpr int kAhead = 32;
    for (int j = e + kAhead; j < std::min(e + kAhead + 4, n); ++j)
      for (int i = 0; i < dim; i += 16) _mm_prefetch(reinterpret_cast<const char*>(ent[j] + i), _MM_HINT_T0);
    for (int h = 0; h < h4; h += 4) ScoreTile(q, n, dim, ent, e, h, scale, p.data());
  }
  for (int e = 0; e < n; ++e)
    for (int h = (e < n4 ? h4 : 0); h < n_heads; ++h)
      p[size_t(h) * n + e] = scale * DotAvx512(q + size_t(h) * dim, ent[e], dim);
  SinkSoftmaxAvx512(p.data(), n, n_heads, sink, inv.data());
  int h = 0;
  for (; h + 8 <= n_heads; h += 8) WeightedSum<8>(p.data(), n, dim, ent, h, inv.data(), out);
  for (; h + 4 <= n_heads; h += 4) WeightedSum<4>(p.data(), n, dim, ent, h, inv.data(), out);
  for (; h < n_heads; ++h) WeightedSum<1>(p.data(), n, dim, ent, h, inv.data(), out);
}

#endif  // __AVX512F__

// The generic path: one entry at a time, every head's score from one pass over the entry.
constexpr int kHeadBlock = 8;
inline void ScoreAllHeads(const float* q, int n_heads, int dim, const float* e, float* scores) {
  for (int h0 = 0; h0 < n_heads; h0 += kHeadBlock) {
    const int hb = std::min(kHeadBlock, n_heads - h0);
    float acc[kHeadBlock][16] = {};
    int i = 0;
    for (; i + 16 <= dim; i += 16)
      for (int h = 0; h < hb; ++h) {
        const float* qh = q + size_t(h0 + h) * dim + i;
#pragma omp simd
        for (int j = 0; j < 16; ++j) acc[h][j] += qh[j] * e[i + j];
      }
    for (int h = 0; h < hb; ++h) {
      float s = 0.0f;
      for (int j = 0; j < 16; ++j) s += acc[h][j];
      const float* qh = q + size_t(h0 + h) * dim;
      for (int t = i; t < dim; ++t) s += qh[t] * e[t];
      scores[h0 + h] = s;
    }
  }
}

// Builds without AVX2 (no -march) run this path where the AVX2 kernels do not (a CPU without AVX2
// and FMA, or dim % 16 != 0): GCC clones it for x86-64-v3 and picks that clone at load where the CPU
// has AVX2 and FMA (8-lane loops, the products contracted into FMAs as in an AVX2 build). Every
// result in a process comes from the one clone picked, so rows, chunks and head groups still agree
// with each other bit for bit.
#if defined(CEDAR_AVX2_AT_RUNTIME)  // (kernels/exp_avx2.h: GCC, x86-64, no -mavx2)
__attribute__((target_clones("arch=x86-64-v3", "default")))
#endif
void SinkAttentionGeneric(const float* q, int n_heads, int dim, const float* const* ent, int n, const float* sink,
                          float scale, float* out) {
  thread_local std::vector<float> p, inv;
  p.resize(size_t(std::max(n, 1)) * n_heads);
  inv.resize(size_t(n_heads));
  thread_local std::vector<float> scores;
  scores.resize(size_t(n_heads));
  for (int e = 0; e < n; ++e) {
    ScoreAllHeads(q, n_heads, dim, ent[e], scores.data());
    for (int h = 0; h < n_heads; ++h) p[size_t(h) * n + e] = scale * scores[size_t(h)];
  }
  SinkSoftmax(p.data(), n, n_heads, sink, inv.data());
  std::fill(out, out + size_t(n_heads) * dim, 0.0f);
  for (int e = 0; e < n; ++e) {
    const float* ev = ent[e];
    for (int h = 0; h < n_heads; ++h) {
      const float w = p[size_t(h) * n + e];
      float* oh = out + size_t(h) * dim;
#pragma omp simd
      for (int i = 0; i < dim; ++i) oh[i] += w * ev[i];
    }
  }
  for (int h = 0; h < n_heads; ++h)
    for (int i = 0; i < dim; ++i) out[size_t(h) * dim + i] *= inv[size_t(h)];
}

#if !defined(__AVX512F__) && defined(CEDAR_AVX2_KERNELS)

CEDAR_AVX2_BEGIN

// The generic path's arithmetic, bit for bit, with the work in registers (AVX2 machines have no
// tiled path; on this 2-core VM attention was ~30% of decode at 512 tokens of context):
//   scores: per head 16 lane sums over dim in steps of 16 (lanes 0-7 and 8-15 as two 8-lane
//   accumulators, run one after the other), then s = 0 + lane 0 + lane 1 + ... + lane 15 in that
//   order, 8 heads at once after a transpose (the generic loop adds 128 scalars one by one);
//   weighted sum: out[h][i] = fma(p[h][e], e[i], out[h][i]) over e in order from 0, times inv[h],
//   with 4 heads x 16 dims of out in registers per pass over the entries (the generic loop loads
//   and stores out for every entry).

// r[j] lane h <- r[h] lane j (8 x 8).
inline void Transpose8(__m256 r[8]) {
  __m256 t[8], u[8];
  for (int k = 0; k < 4; ++k) {
    t[2 * k] = _mm256_unpacklo_ps(r[2 * k], r[2 * k + 1]);
    t[2 * k + 1] = _mm256_unpackhi_ps(r[2 * k], r[2 * k + 1]);
  }
  for (int k = 0; k < 2; ++k) {
    u[4 * k] = _mm256_shuffle_ps(t[4 * k], t[4 * k + 2], _MM_SHUFFLE(1, 0, 1, 0));
    u[4 * k + 1] = _mm256_shuffle_ps(t[4 * k], t[4 * k + 2], _MM_SHUFFLE(3, 2, 3, 2));
    u[4 * k + 2] = _mm256_shuffle_ps(t[4 * k + 1], t[4 * k + 3], _MM_SHUFFLE(1, 0, 1, 0));
    u[4 * k + 3] = _mm256_shuffle_ps(t[4 * k + 1], t[4 * k + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  // u[0..3]: rows 0-3 with columns (0,4), (1,5), (2,6), (3,7) per 128-bit half; u[4..7]: rows 4-7.
  for (int k = 0; k < 4; ++k) {
    r[k] = _mm256_permute2f128_ps(u[k], u[k + 4], 0x20);
    r[k + 4] = _mm256_permute2f128_ps(u[k], u[k + 4], 0x31);
  }
}

// The 8-lane partial sums of heads h0..h0+7 over lanes [half * 8, half * 8 + 8) of each step of 16.
inline void ScoreHalf(const float* q, int dim, const float* e, int h0, int half, __m256 a[8]) {
  for (int h = 0; h < 8; ++h) a[h] = _mm256_setzero_ps();
  for (int i = half * 8; i < dim; i += 16) {
    const __m256 ev = _mm256_loadu_ps(e + i);
#pragma GCC unroll 8
    for (int h = 0; h < 8; ++h) a[h] = _mm256_fmadd_ps(_mm256_loadu_ps(q + size_t(h0 + h) * dim + i), ev, a[h]);
  }
  Transpose8(a);
}

// p[h * n + e] = scale * (q_h . ent[e]) for every head (dim % 16 == 0): 8 heads at a time, the
// rest one by one (same order, the 16 lane sums added in a scalar loop).
void ScoresAvx2(const float* q, int n_heads, int dim, const float* const* ent, int n, float scale, float* p) {
  const __m256 vs = _mm256_set1_ps(scale);
  const int h8 = n_heads / 8 * 8;
  alignas(32) float sc[16];
  for (int e = 0; e < n; ++e) {
    for (int h0 = 0; h0 < h8; h0 += 8) {
      __m256 a[8], s = _mm256_setzero_ps();
      ScoreHalf(q, dim, ent[e], h0, 0, a);
      for (int j = 0; j < 8; ++j) s = _mm256_add_ps(s, a[j]);
      ScoreHalf(q, dim, ent[e], h0, 1, a);
      for (int j = 0; j < 8; ++j) s = _mm256_add_ps(s, a[j]);
      _mm256_store_ps(sc, _mm256_mul_ps(vs, s));
      for (int h = 0; h < 8; ++h) p[size_t(h0 + h) * n + e] = sc[h];
    }
    for (int h = h8; h < n_heads; ++h) {
      __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
      for (int i = 0; i < dim; i += 16) {
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + size_t(h) * dim + i), _mm256_loadu_ps(ent[e] + i), a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + size_t(h) * dim + i + 8), _mm256_loadu_ps(ent[e] + i + 8), a1);
      }
      _mm256_store_ps(sc, a0);
      _mm256_store_ps(sc + 8, a1);
      float t = 0.0f;
      for (int j = 0; j < 16; ++j) t += sc[j];
      p[size_t(h) * n + e] = scale * t;
    }
  }
}

// out[h0 + h, i0 .. i0 + 8 C) = inv[h] * sum_e p[h0 + h, e] ent[e][i0 ..] for HB heads.
template <int HB, int C>
void WeightedSumPassAvx2(const float* p, int n, int dim, const float* const* ent, int h0, int i0, const float* inv, float* out) {
  __m256 acc[HB][C];
  for (auto& row : acc)
    for (auto& a : row) a = _mm256_setzero_ps();
  for (int e = 0; e < n; ++e) {
    __m256 ev[C];
    for (int c = 0; c < C; ++c) ev[c] = _mm256_loadu_ps(ent[e] + i0 + 8 * c);
    for (int h = 0; h < HB; ++h) {
      const __m256 w = _mm256_broadcast_ss(p + size_t(h0 + h) * n + e);
      for (int c = 0; c < C; ++c) acc[h][c] = _mm256_fmadd_ps(w, ev[c], acc[h][c]);
    }
  }
  for (int h = 0; h < HB; ++h)
    for (int c = 0; c < C; ++c)
      _mm256_storeu_ps(out + size_t(h0 + h) * dim + i0 + 8 * c, _mm256_mul_ps(acc[h][c], _mm256_set1_ps(inv[h0 + h])));
}

// SinkSoftmax with the exponentials 8 at a time (the scalar loop does not vectorise); the
// maximum is order free, and the sum stays one scalar chain in entry order, so the bits are
// SinkSoftmax's.
void SinkSoftmaxAvx2(float* p, int n, int n_heads, const float* sink, float* inv) {
  const int n8 = n / 8 * 8;
  for (int h = 0; h < n_heads; ++h) {
    float* ph = p + size_t(h) * n;
    __m256 vm = _mm256_set1_ps(sink[h]);
    for (int e = 0; e < n8; e += 8) vm = _mm256_max_ps(vm, _mm256_loadu_ps(ph + e));
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, vm);
    float mx = sink[h];
    for (int j = 0; j < 8; ++j) mx = std::max(mx, lanes[j]);
    for (int e = n8; e < n; ++e) mx = std::max(mx, ph[e]);
    const __m256 vmx = _mm256_set1_ps(mx), lo = _mm256_set1_ps(-87.0f);
    for (int e = 0; e < n8; e += 8) {
      const __m256 x = _mm256_sub_ps(_mm256_loadu_ps(ph + e), vmx);
      if (_mm256_movemask_ps(_mm256_cmp_ps(x, lo, _CMP_LT_OQ)) != 0) {
        for (int j = e; j < e + 8; ++j) ph[j] = internal::ExpNonPositive(ph[j] - mx);
      } else {
        _mm256_storeu_ps(ph + e, internal::ExpNonPositive8(x));
      }
    }
    for (int e = n8; e < n; ++e) ph[e] = internal::ExpNonPositive(ph[e] - mx);
    float sum = 0.0f;
    for (int e = 0; e < n; ++e) sum += ph[e];
    inv[h] = 1.0f / (sum + internal::ExpNonPositive(sink[h] - mx));
  }
}

void SinkAttentionAvx2(const float* q, int n_heads, int dim, const float* const* ent, int n, const float* sink, float scale,
                       float* out) {
  thread_local std::vector<float> p, inv;  // [n_heads, n] logits, then unnormalised probabilities
  p.resize(size_t(std::max(n, 1)) * n_heads);
  inv.resize(size_t(n_heads));
  ScoresAvx2(q, n_heads, dim, ent, n, scale, p.data());
  SinkSoftmaxAvx2(p.data(), n, n_heads, sink, inv.data());
  int h = 0;
  for (; h + 4 <= n_heads; h += 4)
    for (int i = 0; i < dim; i += 16) WeightedSumPassAvx2<4, 2>(p.data(), n, dim, ent, h, i, inv.data(), out);
  for (; h < n_heads; ++h)
    for (int i = 0; i < dim; i += 16) WeightedSumPassAvx2<1, 2>(p.data(), n, dim, ent, h, i, inv.data(), out);
}

CEDAR_AVX2_END

#endif

}  // namespace

void SinkAttention(const float* q, int n_heads, int dim, const float* win, int n_win,
                   const float* pool, const int32_t* sel, int n_sel, const float* sink,
                   float scale, float* out) {
  if (n_heads <= 0 || dim <= 0) return;
  const int n = n_win + n_sel;
  if (internal::WorkCountersOn()) internal::CountAttention(4.0 * n_heads * dim * n);
  thread_local std::vector<const float*> ent;  // [n] the row's entries, window first
  ent.resize(size_t(n));
  for (int e = 0; e < n_win; ++e) ent[size_t(e)] = win + size_t(e) * dim;
  for (int e = 0; e < n_sel; ++e) ent[size_t(n_win + e)] = pool + size_t(sel[e]) * dim;
#if defined(__AVX512F__)
  if (dim % 16 == 0) return SinkAttentionAvx512(q, n_heads, dim, ent.data(), n, sink, scale, out);
#elif defined(CEDAR_AVX2_KERNELS)
  if (internal::SinkAttentionTiled(q, n_heads, dim, ent.data(), n, sink, scale, out)) return;
  if (dim % 16 == 0 && internal::Avx2KernelsRun()) return SinkAttentionAvx2(q, n_heads, dim, ent.data(), n, sink, scale, out);
#endif
  SinkAttentionGeneric(q, n_heads, dim, ent.data(), n, sink, scale, out);
}

}  // namespace cedar::kernels
