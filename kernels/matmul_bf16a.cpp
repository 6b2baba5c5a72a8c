// FP8 and FP4 weights times BF16 activations (issue 20, `--bf16-activations`): decode's and
// batched decode's FP8 / FP4 products (the released precisions) on AVX-512 BF16 dot products
// (vdpbf16ps), so a pair of blocks (64 weights) costs two dot-product instructions and a byte
// lookup where the F32-activation kernel (matmul_quant.cpp) spends eight multiplies, four float
// unpacks and a fold: that kernel is compute bound on FP8 and FP4 (docs/WEIGHTS.md).
//
// Every E4M3 and every E2M1 value is a bfloat16 exactly (4 exponent and 3 mantissa bits fit its
// 8 and 7; E4M3's subnormals are bf16 normals), so the weights are exact; only x is rounded, once
// per row of x, to bf16: round to nearest even, and |x| below the smallest normal float (2^-126)
// becomes a zero of its sign (what vcvtne2ps2bf16 does). A product of two bf16 is exact in F32.
//
// The order, which fixes the bits (the same on any ISA and whatever rows share a call):
//   elements go in pairs of blocks (2p, 2p + 1) = 64 elements, as two rows of 32 words X0, X1:
//   X0 holds the pair's elements 0-7, 16-23, 32-39, 48-55 and X1 8-15, 24-31, 40-47, 56-63
//   (PairElement; the order the 8-bit unpacks of the decoded weight bytes give).
//   Lane i (of 16) of a pair: t = 0; for X0 then X1: t = dp(t, word 2i + 1), t = dp(t, word 2i)
//   with dp(t, k) = ftz(t + w_k * x_k) (one rounding to nearest; a result below 2^-126 becomes a
//   zero of its sign), then acc_i = fma(t, scale of block 2p + i / 8, acc_i) (plain F32 FMA).
//   y = HSum16(acc): HSum8(a[0..7] + a[8..15]), HSum8 = ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7)).
// dp is vdpbf16ps's definition (odd word first, each step rounded, denormal inputs read as zero,
// denormal results flushed): on this project's AVX-512 EPYC (Zen 5) the instruction matched a
// scalar model of it on 2M random lanes including underflowing ones, and the two other orders
// (even word first, one rounding for the pair) missed 6% and 5% of them (session 26).
// Only inputs that are a multiple of 64 take this path (Bf16ActivationsApply; others stay F32).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VBMI__) && defined(__AVX512BF16__)
#include <immintrin.h>
#define CEDAR_BF16A_AVX512 1
#endif

#include "kernels/cpu_internal.h"
#include "kernels/quant_formats.h"
#include "kernels/weight_view.h"

namespace cedar::kernels {

namespace internal {
namespace {

std::atomic<bool> bf16_activations{false};

constexpr int B = kQuantBlock;
constexpr int kPair = 2 * B;  // elements per pair of blocks

// The pair element that word q (< 64: X0's words 0-31, then X1's) of a converted row holds.
constexpr int PairElement(int q) { return 16 * ((q % 32) / 8) + 8 * (q / 32) + q % 8; }

// x as the kernels read it (the module comment's rounding).
uint16_t RoundBf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  if (std::fabs(x) < 0x1p-126f) return uint16_t((u >> 16) & 0x8000);
  if (std::isnan(x)) return uint16_t((u >> 16) | 0x0040);
  u += 0x7FFF + ((u >> 16) & 1);
  return uint16_t(u >> 16);
}

// The weight's unscaled value (exact in bf16) and its block's scale. FP8 codes 0x7F / 0xFF (NaN)
// read as +-480, as the F32-activation kernels read them: the released weights have none.
float RawValue(const WeightView& w, int64_t r, int64_t e) {
  if (w.type == WeightType::kFP8) {
    const uint8_t c = static_cast<const uint8_t*>(w.data)[r * w.cols + e];
    return (c & 0x7F) == 0x7F ? (c & 0x80 ? -480.0f : 480.0f) : DecodeE4M3(c);
  }
  const uint8_t byte = static_cast<const uint8_t*>(w.data)[r * (w.cols / 2) + e / 2];
  return DecodeE2M1(e % 2 ? uint8_t(byte >> 4) : uint8_t(byte & 0x0F));
}
const uint8_t* ScaleRow(const WeightView& w, int64_t r) {
  const int64_t nb = w.cols / B;
  const auto* s = static_cast<const uint8_t*>(w.scales);
  return w.type == WeightType::kFP8 ? s + ((w.row0 + r) / B) * nb : s + r * nb;
}

inline float Ftz(float v) { return std::fabs(v) < 0x1p-126f ? std::copysign(0.0f, v) : v; }

// The order above in scalar code: y = x . w[r] for one converted row xr (pair layout).
float DotScalar(const uint16_t* xr, const WeightView& w, int64_t r) {
  const uint8_t* sc = ScaleRow(w, r);
  float acc[16] = {};
  for (int64_t p = 0; p < w.cols / kPair; ++p)
    for (int i = 0; i < 16; ++i) {
      float t = 0.0f;
      for (int k = 0; k < 2; ++k)
        for (int q : {32 * k + 2 * i + 1, 32 * k + 2 * i})
          t = Ftz(std::fma(RawValue(w, r, p * kPair + PairElement(q)), Bf16ToFloat(xr[p * kPair + q]), t));
      acc[i] = std::fma(t, E8m0Floats()[sc[2 * p + i / 8]], acc[i]);
    }
  return HSum16(acc);
}

void ConvertScalar(const float* x, int64_t in, uint16_t* out) {
  for (int64_t p = 0; p < in / kPair; ++p)
    for (int q = 0; q < kPair; ++q) out[p * kPair + q] = RoundBf16(x[p * kPair + PairElement(q)]);
}

#if CEDAR_BF16A_AVX512

// x converted per pair: the element-order bf16 of 32 floats (vcvtne2ps2bf16 puts its second
// operand in the low half), then X0 / X1 gather their 128-bit quarters (PairElement).
void Convert(const float* x, int64_t in, uint16_t* out) {
  const __m512i q0 = _mm512_setr_epi64(0, 1, 4, 5, 8, 9, 12, 13), q1 = _mm512_setr_epi64(2, 3, 6, 7, 10, 11, 14, 15);
  for (int64_t p = 0; p < in / kPair; ++p) {
    const float* s = x + p * kPair;
    const __m512i e0 = (__m512i)_mm512_cvtne2ps_pbh(_mm512_loadu_ps(s + 16), _mm512_loadu_ps(s));
    const __m512i e1 = (__m512i)_mm512_cvtne2ps_pbh(_mm512_loadu_ps(s + 48), _mm512_loadu_ps(s + 32));
    _mm512_store_si512(out + p * kPair, _mm512_permutex2var_epi64(e0, q0, e1));
    _mm512_store_si512(out + p * kPair + 32, _mm512_permutex2var_epi64(e0, q1, e1));
  }
}

inline float Reduce16(__m512 a) {
  alignas(64) float v[16];
  _mm512_store_ps(v, a);
  return HSum16(v);
}

// Weight sources: Pair(row, p, w0, w1) gives pair p's 64 weights as bf16 words in X0's and X1's
// order: w0 / w1 = the 8-bit unpacks (low / high half of each 128-bit lane) of the words' low
// bytes and high bytes in element order, so 128-bit lane L of w0 holds elements 16L..16L+7.
// FP8: the code's low 7 bits index two 128-entry byte tables (vpermi2b) for the bf16's low byte
// and high byte, the sign or-ed into the high byte (the F32 kernel's LoadPair tables).
struct SrcFp8 {
  static constexpr int64_t kPairBytes = 64;
  static const uint8_t* Row(const WeightView& w, int64_t r) { return static_cast<const uint8_t*>(w.data) + r * w.cols; }
  struct Tables {
    alignas(64) uint8_t lo[128], hi[128];
  };
  static const Tables& Lut() {
    static const Tables t = [] {
      Tables u{};
      for (int c = 0; c < 128; ++c) {
        const uint16_t b = RoundBf16(c == 0x7F ? 480.0f : DecodeE4M3(uint8_t(c)));  // exact
        u.lo[c] = uint8_t(b), u.hi[c] = uint8_t(b >> 8);
      }
      return u;
    }();
    return t;
  }
  const Tables& lut = Lut();
  __m512i lo_a = _mm512_load_si512(lut.lo), lo_b = _mm512_load_si512(lut.lo + 64);
  __m512i hi_a = _mm512_load_si512(lut.hi), hi_b = _mm512_load_si512(lut.hi + 64);
  __m512i sign = _mm512_set1_epi8(int8_t(0x80));
  void Pair(const uint8_t* row, int64_t p, __m512i& w0, __m512i& w1) const {
    const __m512i c = _mm512_loadu_si512(row + p * kPairBytes);
    const __m512i lo = _mm512_permutex2var_epi8(lo_a, c, lo_b);
    const __m512i hi = _mm512_ternarylogic_epi32(_mm512_permutex2var_epi8(hi_a, c, hi_b), c, sign, 0xF8);  // hi | (c & sign)
    w0 = _mm512_unpacklo_epi8(lo, hi), w1 = _mm512_unpackhi_epi8(lo, hi);
  }
};
// FP4: the 32 packed bytes spread so that byte e holds byte e / 2 (vpermb), the odd bytes taken
// from that shifted right by 4 within its word (the high nibble, zero above), the even ones as
// they are (the low nibble, and high-nibble bits in bits 4-7): then each byte's low 6 bits index
// 64-entry tables repeating the 16 nibbles' bf16 bytes (vpermb), so the garbage bits 4-5 are ignored.
struct SrcFp4 {
  static constexpr int64_t kPairBytes = 32;
  static const uint8_t* Row(const WeightView& w, int64_t r) { return static_cast<const uint8_t*>(w.data) + r * (w.cols / 2); }
  struct Tables {
    alignas(64) uint8_t lo[64], hi[64], spread[64];
  };
  static const Tables& Lut() {
    static const Tables t = [] {
      Tables u{};
      for (int i = 0; i < 64; ++i) {
        const uint16_t b = RoundBf16(DecodeE2M1(uint8_t(i & 0x0F)));  // exact; nibble 8 is -0
        u.lo[i] = uint8_t(b), u.hi[i] = uint8_t(b >> 8), u.spread[i] = uint8_t(i / 2);
      }
      return u;
    }();
    return t;
  }
  const Tables& lut = Lut();
  __m512i lo_t = _mm512_load_si512(lut.lo), hi_t = _mm512_load_si512(lut.hi), spread = _mm512_load_si512(lut.spread);
  void Pair(const uint8_t* row, int64_t p, __m512i& w0, __m512i& w1) const {
    const __m512i s = _mm512_permutexvar_epi8(spread, _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + p * kPairBytes))));
    const __m512i n = _mm512_mask_blend_epi8(0xAAAAAAAAAAAAAAAAull, s, _mm512_srli_epi16(s, 4));
    const __m512i lo = _mm512_permutexvar_epi8(n, lo_t), hi = _mm512_permutexvar_epi8(n, hi_t);
    w0 = _mm512_unpacklo_epi8(lo, hi), w1 = _mm512_unpackhi_epi8(lo, hi);
  }
};

// Decode (one row of x) reads a thread's slice as kSpreadBf16 parts side by side, each prefetched
// kPrefetchBytes ahead (T0, one prefetch per line). `cedar bench` medium fp8-fp4 decode with BF16
// activations, three rounds alternating (session 26): 2 parts with this prefetch 76.6 / 84.3 /
// 79.2 tok/s, without 72.6 / 73.8 / 76.0, 8 KiB ahead 73.8 / 81.9 / 68.3; in a first sweep 4
// parts, one part, and T1 / T2 hints 4-8 KiB ahead did no better. (In a driver with the matrix
// in L2 the prefetch halved the rate: decode's weights are never there.)
constexpr int kSpreadBf16 = 2;
constexpr int64_t kPrefetchBytes = 4096;

// The E8M0 scales of blocks 16g..16g+15 (fewer at the end of a row: the rest zero) as floats:
// code c as the bits c << 23, 2^(c - 127) for c in 1..254, then code 0 (2^-127, a subnormal) and
// 255 (NaN) put in by mask, so every code gives E8m0Floats' value.
inline __m512 GroupScales(const uint8_t* sc, int64_t g, int64_t nb) {
  const int64_t left = nb - 16 * g;
  const __m512i c = _mm512_cvtepu8_epi32(left >= 16 ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(sc + 16 * g))
                                                    : _mm_maskz_loadu_epi8(__mmask16((1u << left) - 1), sc + 16 * g));
  __m512i bits = _mm512_slli_epi32(c, 23);
  bits = _mm512_mask_mov_epi32(bits, _mm512_cmpeq_epi32_mask(c, _mm512_setzero_si512()), _mm512_set1_epi32(0x00400000));
  bits = _mm512_mask_mov_epi32(bits, _mm512_cmpeq_epi32_mask(c, _mm512_set1_epi32(255)), _mm512_set1_epi32(0x7FC00000));
  return _mm512_castsi512_ps(bits);
}

// N converted rows of x against weight rows [r0, r1), each weight pair decoded once for the N
// rows. With S > 1 (decode, N = 1) rows r + k * rs for k < S run side by side, their outputs at
// y[(r - r0) + k * rs]: every row keeps its own accumulator, so the bits are those of S = 1.
// Scales: 16 blocks' at once (GroupScales), then pair j of the group's block 2j in lanes 0-7 and
// 2j + 1 in 8-15 by one permute (a vmovd, table load, broadcast and insert per pair cost ~30% of
// a one-row FP8 product in L2, session 26).
template <class Src, int N, int S, bool kPrefetch = false>
void RowsBf16(const uint16_t* const* xr, const WeightView& w, int64_t r0, int64_t r1, float* y, int64_t ys, int64_t rs) {
  const Src src;
  const int64_t pairs = w.cols / kPair, nb = w.cols / B;
  const __m512i first = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1), two = _mm512_set1_epi32(2);
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* wr[S];
    const uint8_t* sc[S];
    __m512 acc[N][S];
    for (int k = 0; k < S; ++k) {
      wr[k] = Src::Row(w, r + k * rs);
      sc[k] = ScaleRow(w, r + k * rs);
      for (int n = 0; n < N; ++n) acc[n][k] = _mm512_setzero_ps();
    }
    // One pair: its weights decoded once, its scales from the group's (s16), every row of x.
    auto pair = [&](int64_t p, const __m512 (&s16)[S], __m512i idx) __attribute__((always_inline)) {
      __m512i w0[S], w1[S];
      __m512 s[S];
      for (int k = 0; k < S; ++k) {
        if constexpr (kPrefetch)  // one prefetch per line: every FP8 pair, every other FP4 pair
          if (Src::kPairBytes == 64 || (p & 1)) _mm_prefetch(reinterpret_cast<const char*>(wr[k] + p * Src::kPairBytes + kPrefetchBytes), _MM_HINT_T0);
        src.Pair(wr[k], p, w0[k], w1[k]);
        s[k] = _mm512_permutexvar_ps(idx, s16[k]);
      }
#pragma GCC unroll 8
      for (int n = 0; n < N; ++n) {
        const __m512bh x0 = (__m512bh)_mm512_load_si512(xr[n] + p * kPair), x1 = (__m512bh)_mm512_load_si512(xr[n] + p * kPair + 32);
        for (int k = 0; k < S; ++k) {
          const __m512 t = _mm512_dpbf16_ps(_mm512_dpbf16_ps(_mm512_setzero_ps(), (__m512bh)w0[k], x0), (__m512bh)w1[k], x1);
          acc[n][k] = _mm512_fmadd_ps(t, s[k], acc[n][k]);
        }
      }
    };
    // Whole groups of 8 pairs (16 blocks: one GroupScales each), unrolled, then the rest.
    int64_t g = 0;
    for (; 8 * g + 8 <= pairs; ++g) {
      __m512 s16[S];
      for (int k = 0; k < S; ++k) s16[k] = GroupScales(sc[k], g, nb);
      __m512i idx = first;
#pragma GCC unroll 8
      for (int j = 0; j < 8; ++j, idx = _mm512_add_epi32(idx, two)) pair(8 * g + j, s16, idx);
    }
    if (8 * g < pairs) {
      __m512 s16[S];
      for (int k = 0; k < S; ++k) s16[k] = GroupScales(sc[k], g, nb);
      __m512i idx = first;
      for (int64_t p = 8 * g; p < pairs; ++p, idx = _mm512_add_epi32(idx, two)) pair(p, s16, idx);
    }
    for (int n = 0; n < N; ++n)
      for (int k = 0; k < S; ++k) y[n * ys + (r - r0) + k * rs] = Reduce16(acc[n][k]);
  }
}


template <class Src>
void ConvertedT(const uint16_t* const* xr, int n, const WeightView& w, int64_t r0, int64_t r1, float* y, int64_t ys) {
  for (int b0 = 0; b0 < n; b0 += 8) {  // groups of up to 8 rows of x: 8 accumulators
    const uint16_t* const* xb = xr + b0;
    float* yb = y + int64_t(b0) * ys;
    switch (std::min(8, n - b0)) {
      case 1:
        if (r1 - r0 >= kSpreadBf16 * 16) {
          const int64_t per = (r1 - r0) / kSpreadBf16;
          RowsBf16<Src, 1, kSpreadBf16, true>(xb, w, r0, r0 + per, yb, ys, per);
          RowsBf16<Src, 1, 1>(xb, w, r0 + per * kSpreadBf16, r1, yb + per * kSpreadBf16, ys, 1);
        } else {
          RowsBf16<Src, 1, 1>(xb, w, r0, r1, yb, ys, 1);
        }
        break;
      case 2: RowsBf16<Src, 2, 1>(xb, w, r0, r1, yb, ys, 1); break;
      case 3: RowsBf16<Src, 3, 1>(xb, w, r0, r1, yb, ys, 1); break;
      case 4: RowsBf16<Src, 4, 1>(xb, w, r0, r1, yb, ys, 1); break;
      case 5: RowsBf16<Src, 5, 1>(xb, w, r0, r1, yb, ys, 1); break;
      case 6: RowsBf16<Src, 6, 1>(xb, w, r0, r1, yb, ys, 1); break;
      case 7: RowsBf16<Src, 7, 1>(xb, w, r0, r1, yb, ys, 1); break;
      default: RowsBf16<Src, 8, 1>(xb, w, r0, r1, yb, ys, 1); break;
    }
  }
}

#endif  // CEDAR_BF16A_AVX512

}  // namespace

bool Bf16ActivationsApply(const WeightView& w) {
  if (!bf16_activations.load(std::memory_order_relaxed) || w.cols <= 0 || w.cols % kPair != 0) return false;
  return w.type == WeightType::kFP8 || (w.type == WeightType::kFP4 && !Int8ActivationsApply(w));
}

void ConvertRowsBf16(const float* x, int n, int64_t in, Bf16Rows& rows) {
  if (rows.rows.size() < size_t(n)) rows.rows.resize(size_t(n));
  for (int b = 0; b < n; ++b) {
    LineVector<uint16_t>& out = rows.rows[size_t(b)];
    out.resize(size_t(in / kPair * kPair));
#if CEDAR_BF16A_AVX512
    Convert(x + int64_t(b) * in, in, out.data());
#else
    ConvertScalar(x + int64_t(b) * in, in, out.data());
#endif
  }
}

void Bf16AConverted(const Bf16Rows& rows, int n, const WeightView& w, int64_t r0, int64_t r1, float* y, int64_t ys) {
  if (r0 >= r1) return;
  const uint16_t* xr[kFewRowsMax];
  for (int b = 0; b < n; ++b) xr[b] = rows.rows[size_t(b)].data();
#if CEDAR_BF16A_AVX512
  if (w.type == WeightType::kFP8)
    ConvertedT<SrcFp8>(xr, n, w, r0, r1, y, ys);
  else
    ConvertedT<SrcFp4>(xr, n, w, r0, r1, y, ys);
#else
  for (int64_t r = r0; r < r1; ++r)
    for (int b = 0; b < n; ++b) y[b * ys + (r - r0)] = DotScalar(xr[b], w, r);
#endif
}

void Bf16AFewRows(const float* x, int n, const WeightView& w, int64_t r0, int64_t r1, float* y, int64_t ys) {
  thread_local Bf16Rows rows;
  ConvertRowsBf16(x, n, w.cols, rows);
  Bf16AConverted(rows, n, w, r0, r1, y, ys);
}

}  // namespace internal

namespace ref {
void MatmulBf16A(const float* x, const WeightView& w, float* y, int n) {
  std::vector<uint16_t> xr(size_t(w.cols / internal::kPair * internal::kPair));
  for (int b = 0; b < n; ++b) {
    internal::ConvertScalar(x + int64_t(b) * w.cols, w.cols, xr.data());
    for (int64_t r = 0; r < w.rows; ++r) y[int64_t(b) * w.rows + r] = internal::DotScalar(xr.data(), w, r);
  }
}
}  // namespace ref

void SetBf16Activations(bool on) { internal::bf16_activations.store(on); }
bool Bf16Activations() { return internal::bf16_activations.load(std::memory_order_relaxed); }
bool Bf16ActivationsVectorised() {
#if CEDAR_BF16A_AVX512
  return true;
#else
  return false;
#endif
}

}  // namespace cedar::kernels
