// SinkAttention for one query row on AVX2 + FMA, in groups of 4 heads, with GEMM-like register
// tiles (kernels/attention_row.cpp dispatches here when n_heads % 4 == 0 and dim % 16 == 0).
//
// Why: the per-entry AVX2 path spent a third of its score time in two 8x8 transposes per entry
// and read every entry from L2 once per 16 output dims in its weighted sum (perf on the 512-token
// `full` prefill of `small`: attention ~23% of the prefill, the weighted sum the larger half).
// Here:
//   scores: tiles of 4 heads x 3 entries (12 accumulators, 7 loads per 12 FMAs), each dot one
//     8-lane FMA chain over dim, finished by one hadd tree per entry for the 4 heads; all head
//     groups score one ~96 KiB block of entries before the next (a row of medium reads ~640 KiB);
//   softmax: the 4 heads are the 4 lanes of one vector (p is [n, 4]), so max, exp and the sum
//     are vector operations in entry order;
//   weighted sum: tiles of 4 heads x 24 (or 16) dims over blocks of 32 entries (16 KiB, in L1), the
//     accumulators carried in `out` between blocks.
//
// Row invariance (issue 14): every (head, entry) score, every head's softmax and every (head,
// dim) output is a fixed chain of operations that depends only on that row, that head and the
// row's entries in order, not on the head group's other heads (each is its own lane or its own
// accumulator) nor on other rows, so AttendRows may split a row's heads into groups of 4 or
// give it whole: the bits are the same.
#include "kernels/attention_tiled.h"
#include "kernels/exp_avx2.h"

#include <algorithm>
#include <vector>

namespace cedar::kernels::internal {

#if defined(CEDAR_AVX2_KERNELS)

CEDAR_AVX2_BEGIN

namespace {

constexpr int kGroup = 4;         // heads per group: one lane each in the softmax
constexpr int kEntryBlock = 32;   // entries per weighted-sum block (32 x 128 floats = 16 KiB)
constexpr int kScoreBlockBytes = 96 << 10;  // entries per score block: ~96 KiB of them, in L2

// dst[h] = scale * (the 8 lanes of head h's accumulator summed as ((l0 + l1) + (l2 + l3)) +
// ((l4 + l5) + (l6 + l7))), for the 4 heads of a group and one entry.
inline void StoreScores(__m256 h0, __m256 h1, __m256 h2, __m256 h3, float scale, float* dst) {
  const __m256 t = _mm256_hadd_ps(_mm256_hadd_ps(h0, h1), _mm256_hadd_ps(h2, h3));
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
  _mm_storeu_ps(dst, _mm_mul_ps(s, _mm_set1_ps(scale)));
}

// p[(e0 + j) * 4 + h] = scale * q_h . ent[e0 + j] for h < 4, j < E.
template <int E>
inline void ScoreTile(const float* q, int dim, const float* const* ent, int e0, float scale, float* p) {
  __m256 acc[kGroup][E];
  for (auto& row : acc)
    for (auto& a : row) a = _mm256_setzero_ps();
  for (int i = 0; i < dim; i += 8) {
    __m256 ev[E];
    for (int j = 0; j < E; ++j) {
      ev[j] = _mm256_loadu_ps(ent[e0 + j] + i);
      asm("" : "+x"(ev[j]));  // in a register: GCC otherwise reloads the entry for every head's FMA
    }
    for (int h = 0; h < kGroup; ++h) {
      __m256 qv = _mm256_loadu_ps(q + size_t(h) * dim + i);
      asm("" : "+x"(qv));  // loaded once for the E entries (as memory operands: 15 loads per 12 FMAs)
      for (int j = 0; j < E; ++j) acc[h][j] = _mm256_fmadd_ps(qv, ev[j], acc[h][j]);
    }
  }
  for (int j = 0; j < E; ++j) StoreScores(acc[0][j], acc[1][j], acc[2][j], acc[3][j], scale, p + size_t(e0 + j) * kGroup);
}

// ScoreTile<3> with named registers, the tile every entry but the last one or two of a row
// goes through: GCC kept the array version's three entry vectors in a stack copy as well (three
// dead 32-byte stores per 12 FMAs). The same FMA chains and the same StoreScores: the same bits.
// 15% less time for the whole SinkAttention of medium's shapes (one thread, throwaway driver,
// 16 heads x 256 dims, 512 rows, variants alternating in one process).
inline void ScoreTile3(const float* q, int dim, const float* const* ent, int e0, float scale, float* p) {
  const float *x0 = ent[e0], *x1 = ent[e0 + 1], *x2 = ent[e0 + 2];
  const float *q1 = q + dim, *q2 = q1 + dim, *q3 = q2 + dim;
  __m256 a00 = _mm256_setzero_ps(), a01 = a00, a02 = a00, a10 = a00, a11 = a00, a12 = a00;
  __m256 a20 = a00, a21 = a00, a22 = a00, a30 = a00, a31 = a00, a32 = a00;
  for (int i = 0; i < dim; i += 8) {
    __m256 v0 = _mm256_loadu_ps(x0 + i), v1 = _mm256_loadu_ps(x1 + i), v2 = _mm256_loadu_ps(x2 + i);
    asm("" : "+x"(v0), "+x"(v1), "+x"(v2));  // in registers: GCC otherwise reloads them for every head's FMA
    // Each head's q loaded once for the three entries (GCC otherwise folds it into every FMA).
    __m256 qv = _mm256_loadu_ps(q + i);
    asm("" : "+x"(qv));
    a00 = _mm256_fmadd_ps(qv, v0, a00), a01 = _mm256_fmadd_ps(qv, v1, a01), a02 = _mm256_fmadd_ps(qv, v2, a02);
    qv = _mm256_loadu_ps(q1 + i);
    asm("" : "+x"(qv));
    a10 = _mm256_fmadd_ps(qv, v0, a10), a11 = _mm256_fmadd_ps(qv, v1, a11), a12 = _mm256_fmadd_ps(qv, v2, a12);
    qv = _mm256_loadu_ps(q2 + i);
    asm("" : "+x"(qv));
    a20 = _mm256_fmadd_ps(qv, v0, a20), a21 = _mm256_fmadd_ps(qv, v1, a21), a22 = _mm256_fmadd_ps(qv, v2, a22);
    qv = _mm256_loadu_ps(q3 + i);
    asm("" : "+x"(qv));
    a30 = _mm256_fmadd_ps(qv, v0, a30), a31 = _mm256_fmadd_ps(qv, v1, a31), a32 = _mm256_fmadd_ps(qv, v2, a32);
  }
  float* pe = p + size_t(e0) * kGroup;
  StoreScores(a00, a10, a20, a30, scale, pe);
  StoreScores(a01, a11, a21, a31, scale, pe + kGroup);
  StoreScores(a02, a12, a22, a32, scale, pe + 2 * kGroup);
}

// In place over p [n, 4] (logits -> unnormalised probabilities); returns 1 / denominator per head.
inline __m128 SinkSoftmax4(float* p, int n, const float* sink) {
  const __m128 vsink = _mm_loadu_ps(sink);
  __m128 mx = vsink;
  for (int e = 0; e < n; ++e) mx = _mm_max_ps(mx, _mm_loadu_ps(p + size_t(e) * kGroup));
  __m128 sum = _mm_setzero_ps();
  for (int e = 0; e < n; ++e) {
    const __m128 v = ExpNonPositive4(_mm_sub_ps(_mm_loadu_ps(p + size_t(e) * kGroup), mx));
    _mm_storeu_ps(p + size_t(e) * kGroup, v);
    sum = _mm_add_ps(sum, v);
  }
  return _mm_div_ps(_mm_set1_ps(1.0f), _mm_add_ps(sum, ExpNonPositive4(_mm_sub_ps(vsink, mx))));
}

// WeightedPass3 / WeightedPass2: out[h, i0 .. i0 + 24 or 16) += sum_{e in [e0, e1)} p[e, h] ent[e][i0 ..]
// for a group's 4 heads, 12 or 8 accumulators (12 leave the two FMA ports slack: with 8 the
// chains, one FMA per accumulator and entry, ran exactly at the 4-cycle latency; 24-dim passes
// measured ~5% faster over the whole kernel). A pass reads one or two lines of each entry, and
// the first group's passes miss L1: each entry's ent[e + pf_skip] + pf_off and + pf_off2 are
// prefetched on the way (pf_skip < 0: none). Named accumulators: an array of them was stored to
// the stack on every entry by GCC 12.
#define CEDAR_WP_PREFETCH()                                                                  \
  if (pf_skip >= 0 && e + pf_skip < n) {                                                     \
    _mm_prefetch(reinterpret_cast<const char*>(ent[e + pf_skip] + pf_off), _MM_HINT_T0);     \
    _mm_prefetch(reinterpret_cast<const char*>(ent[e + pf_skip] + pf_off2), _MM_HINT_T0);    \
  }

inline void WeightedPass3(const float* p, int dim, const float* const* ent, int n, int e0, int e1, int i0, int pf_skip, int pf_off,
                          int pf_off2, float* out) {
  float* o0 = out + i0;
  float* o1 = o0 + dim;
  float* o2 = o1 + dim;
  float* o3 = o2 + dim;
  __m256 a00 = _mm256_loadu_ps(o0), a01 = _mm256_loadu_ps(o0 + 8), a02 = _mm256_loadu_ps(o0 + 16);
  __m256 a10 = _mm256_loadu_ps(o1), a11 = _mm256_loadu_ps(o1 + 8), a12 = _mm256_loadu_ps(o1 + 16);
  __m256 a20 = _mm256_loadu_ps(o2), a21 = _mm256_loadu_ps(o2 + 8), a22 = _mm256_loadu_ps(o2 + 16);
  __m256 a30 = _mm256_loadu_ps(o3), a31 = _mm256_loadu_ps(o3 + 8), a32 = _mm256_loadu_ps(o3 + 16);
  for (int e = e0; e < e1; ++e) {
    const float* ev = ent[e] + i0;
    const __m256 v0 = _mm256_loadu_ps(ev), v1 = _mm256_loadu_ps(ev + 8), v2 = _mm256_loadu_ps(ev + 16);
    CEDAR_WP_PREFETCH()
    const float* pe = p + size_t(e) * kGroup;
    __m256 w = _mm256_broadcast_ss(pe);
    a00 = _mm256_fmadd_ps(w, v0, a00), a01 = _mm256_fmadd_ps(w, v1, a01), a02 = _mm256_fmadd_ps(w, v2, a02);
    w = _mm256_broadcast_ss(pe + 1);
    a10 = _mm256_fmadd_ps(w, v0, a10), a11 = _mm256_fmadd_ps(w, v1, a11), a12 = _mm256_fmadd_ps(w, v2, a12);
    w = _mm256_broadcast_ss(pe + 2);
    a20 = _mm256_fmadd_ps(w, v0, a20), a21 = _mm256_fmadd_ps(w, v1, a21), a22 = _mm256_fmadd_ps(w, v2, a22);
    w = _mm256_broadcast_ss(pe + 3);
    a30 = _mm256_fmadd_ps(w, v0, a30), a31 = _mm256_fmadd_ps(w, v1, a31), a32 = _mm256_fmadd_ps(w, v2, a32);
  }
  _mm256_storeu_ps(o0, a00), _mm256_storeu_ps(o0 + 8, a01), _mm256_storeu_ps(o0 + 16, a02);
  _mm256_storeu_ps(o1, a10), _mm256_storeu_ps(o1 + 8, a11), _mm256_storeu_ps(o1 + 16, a12);
  _mm256_storeu_ps(o2, a20), _mm256_storeu_ps(o2 + 8, a21), _mm256_storeu_ps(o2 + 16, a22);
  _mm256_storeu_ps(o3, a30), _mm256_storeu_ps(o3 + 8, a31), _mm256_storeu_ps(o3 + 16, a32);
}

inline void WeightedPass2(const float* p, int dim, const float* const* ent, int n, int e0, int e1, int i0, int pf_skip, int pf_off,
                          int pf_off2, float* out) {
  float* o0 = out + i0;
  float* o1 = o0 + dim;
  float* o2 = o1 + dim;
  float* o3 = o2 + dim;
  __m256 a00 = _mm256_loadu_ps(o0), a01 = _mm256_loadu_ps(o0 + 8), a10 = _mm256_loadu_ps(o1), a11 = _mm256_loadu_ps(o1 + 8);
  __m256 a20 = _mm256_loadu_ps(o2), a21 = _mm256_loadu_ps(o2 + 8), a30 = _mm256_loadu_ps(o3), a31 = _mm256_loadu_ps(o3 + 8);
  for (int e = e0; e < e1; ++e) {
    const float* ev = ent[e] + i0;
    const __m256 v0 = _mm256_loadu_ps(ev), v1 = _mm256_loadu_ps(ev + 8);
    CEDAR_WP_PREFETCH()
    const float* pe = p + size_t(e) * kGroup;
    __m256 w = _mm256_broadcast_ss(pe);
    a00 = _mm256_fmadd_ps(w, v0, a00), a01 = _mm256_fmadd_ps(w, v1, a01);
    w = _mm256_broadcast_ss(pe + 1);
    a10 = _mm256_fmadd_ps(w, v0, a10), a11 = _mm256_fmadd_ps(w, v1, a11);
    w = _mm256_broadcast_ss(pe + 2);
    a20 = _mm256_fmadd_ps(w, v0, a20), a21 = _mm256_fmadd_ps(w, v1, a21);
    w = _mm256_broadcast_ss(pe + 3);
    a30 = _mm256_fmadd_ps(w, v0, a30), a31 = _mm256_fmadd_ps(w, v1, a31);
  }
  _mm256_storeu_ps(o0, a00), _mm256_storeu_ps(o0 + 8, a01), _mm256_storeu_ps(o1, a10), _mm256_storeu_ps(o1 + 8, a11);
  _mm256_storeu_ps(o2, a20), _mm256_storeu_ps(o2 + 8, a21), _mm256_storeu_ps(o3, a30), _mm256_storeu_ps(o3 + 8, a31);
}
#undef CEDAR_WP_PREFETCH

// Dims per pass from i on: 24 (12 chains), except that 32 left go as 16 + 16 rather than 24 + 8
// (4 chains would run at half rate): 128 = 4 x 24 + 2 x 16; with dim % 16 == 0 the width is
// always 24 or 16.
inline int PassWidth(int dim, int i) {
  const int r = dim - i;
  return r <= 16 || r == 32 ? std::min(r, 16) : 24;
}

// Scores of all groups of 4 heads, q [groups * 4, dim] -> p [groups][n, 4] (pn floats apart),
// in blocks of ~96 KiB of entries that every group reads while they are in L2: group by group
// over all of a row's entries (medium: up to ~640 entries of 1 KiB) read them from L3 once per
// group (throwaway driver as above: 8-9% less time). Each score is its own chain: the same bits.
void AllScores(const float* q, int groups, int dim, const float* const* ent, int n, float scale, float* p, size_t pn) {
  const int block = std::max(3, (kScoreBlockBytes / int(sizeof(float)) / dim) / 3 * 3);
  for (int b = 0; b < n; b += block) {
    const int e1 = std::min(n, b + block);
    for (int g = 0; g < groups; ++g) {
      const float* qg = q + size_t(g) * kGroup * dim;
      float* pg = p + pn * g;
      int e = b;
      for (; e + 3 <= e1; e += 3) {
        // Selected pool entries are scattered: the first group fetches the tiles a little ahead.
        if (g == 0)
          for (int j = e + 12; j < std::min(e + 15, n); ++j)
            for (int i = 0; i < dim; i += 16) _mm_prefetch(reinterpret_cast<const char*>(ent[j] + i), _MM_HINT_T0);
        ScoreTile3(qg, dim, ent, e, scale, pg);
      }
      if (e1 - e == 2) ScoreTile<2>(qg, dim, ent, e, scale, pg);
      if (e1 - e == 1) ScoreTile<1>(qg, dim, ent, e, scale, pg);
    }
  }
}

}  // namespace

static bool Tiled(const float* q, int n_heads, int dim, const float* const* ent, int n, const float* sink, float scale, float* out) {
  const int groups = n_heads / kGroup;
  const size_t pn = size_t(std::max(n, 1)) * kGroup;
  thread_local std::vector<float> p, inv;  // p [groups][n, 4]: logits, then unnormalised probabilities
  p.resize(pn * groups);
  inv.resize(size_t(n_heads));
  AllScores(q, groups, dim, ent, n, scale, p.data(), pn);
  for (int g = 0; g < groups; ++g) _mm_storeu_ps(inv.data() + g * kGroup, SinkSoftmax4(p.data() + pn * g, n, sink + g * kGroup));
  // Each (head, dim) output is one FMA chain over the entries in order, from +0; a block of
  // entries (16 KiB) serves every group while it is in L1.
  std::fill(out, out + size_t(n_heads) * dim, 0.0f);
  for (int b = 0; b < n; b += kEntryBlock)
    for (int g = 0; g < groups; ++g)
      for (int i = 0, w; i < dim; i += w) {
        w = PassWidth(dim, i);
        const int next = i + w, e1 = std::min(n, b + kEntryBlock);
        // Prefetch the next pass's lines in the first group, the next block's first lines in the
        // last group's last pass.
        int pf_skip = -1, pf_off = 0, pf_off2 = 0;
        if (next < dim && g == 0) {
          pf_skip = 0, pf_off = next, pf_off2 = next + PassWidth(dim, next) - 1;
        } else if (next == dim && g == groups - 1) {
          pf_skip = kEntryBlock, pf_off = 0, pf_off2 = PassWidth(dim, 0) - 1;
        }
        float* og = out + size_t(g) * kGroup * dim;
        const float* pg = p.data() + pn * g;
        if (w == 24)
          WeightedPass3(pg, dim, ent, n, b, e1, i, pf_skip, pf_off, pf_off2, og);
        else
          WeightedPass2(pg, dim, ent, n, b, e1, i, pf_skip, pf_off, pf_off2, og);
      }
  for (int h = 0; h < n_heads; ++h) {
    const __m256 s = _mm256_set1_ps(inv[size_t(h)]);
    for (int i = 0; i < dim; i += 8) _mm256_storeu_ps(out + size_t(h) * dim + i, _mm256_mul_ps(_mm256_loadu_ps(out + size_t(h) * dim + i), s));
  }
  return true;
}

CEDAR_AVX2_END

bool SinkAttentionTiled(const float* q, int n_heads, int dim, const float* const* ent, int n, const float* sink, float scale,
                        float* out) {
  if (n_heads % kGroup != 0 || dim % 16 != 0 || !Avx2KernelsRun()) return false;
  return Tiled(q, n_heads, dim, ent, n, sink, scale, out);
}

#else

bool SinkAttentionTiled(const float*, int, int, const float* const*, int, const float*, float, float*) { return false; }

#endif

}  // namespace cedar::kernels::internal
