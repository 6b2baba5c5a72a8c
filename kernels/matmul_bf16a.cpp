// FP8, FP4 and INT8 weights times BF16 activations (issue 20, `--bf16-activations`): decode's and
// batched decode's FP8 / FP4 products (the released precisions) and INT8 ones on AVX-512 BF16 dot
// products (vdpbf16ps), so a pair of blocks (64 weights) costs two dot-product instructions and a
// byte lookup where the F32-activation kernel (matmul_quant.cpp) spends eight multiplies, four
// float conversions and a fold: that kernel is compute bound on FP8, FP4 and INT8 (docs/WEIGHTS.md).
//
// Every E4M3 and every E2M1 value is a bfloat16 exactly (4 exponent and 3 mantissa bits fit its
// 8 and 7; E4M3's subnormals are bf16 normals), and so is every integer of magnitude up to 256, so
// the weights are exact; only x is rounded, once
// per row of x, to bf16: round to nearest even, and |x| below the smallest normal float (2^-126)
// becomes a zero of its sign (what vcvtne2ps2bf16 does). A product of two bf16 is exact in F32.
// INT8's code -128 (0x80), outside its symmetric format (|q| <= 127: what QuantizeI8 writes and
// the loader checks in INT8 files), reads as -0 here, as FP8's NaN codes read as +-480.
//
// The order, which fixes the bits (the same on any ISA and whatever rows share a call):
//   elements go in steps of K * 32 (K = 2 for FP8 and INT8: pairs of blocks; K = 4 for FP4: quads
//   of blocks), as K rows of 32 words X0 .. X{K-1} (StepElement, the order the kernel's weight
//   decoding gives): FP8's (and INT8's) X0 holds a pair's elements 0-7, 16-23, 32-39, 48-55 and X1 8-15, 24-31,
//   40-47, 56-63 (the 8-bit unpacks of the decoded weight bytes); FP4's Xk holds a quad's
//   elements k, 4 + k, 8 + k, ..., 124 + k (the nibble at bit 4k of each 16-bit word of packed
//   bytes). An FP4 row of 64 mod 128 elements ends in a half quad padded with zero weights and x.
//   Lane i (of 16) of a step: t = 0; for X0 .. X{K-1}: t = dp(t, word 2i + 1), t = dp(t, word 2i)
//   with dp(t, k) = ftz(t + w_k * x_k) (one rounding to nearest; a result below 2^-126 becomes a
//   zero of its sign), then acc_i = fma(t, scale of block K * step + i / (16 / K), acc_i) (plain
//   F32 FMA; a padded block's scale is E8M0 code 0's; INT8's are its bfloat16 ones, as floats).
//   y = HSum16(acc): HSum8(a[0..7] + a[8..15]), HSum8 = ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7)).
// dp is vdpbf16ps's definition (odd word first, each step rounded, denormal inputs read as zero,
// denormal results flushed): on this project's AVX-512 EPYC (Zen 5) the instruction matched a
// scalar model of it on 2M random lanes including underflowing ones, and the two other orders
// (even word first, one rounding for the pair) missed 6% and 5% of them (session 26).
// Only inputs that are a multiple of 64 take this path (Bf16ActivationsApply; others stay F32).
// FP4's quads (session 27) take one vpermw per 32 weights where pairs took a byte spread, two
// table lookups and two unpacks per 64: FP4 was bound by the shuffle unit (docs/WEIGHTS.md).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <vector>

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VBMI__) && defined(__AVX512BF16__)
#include <immintrin.h>
#define CEDAR_BF16A_AVX512 1
#endif

#include "kernels/cpu_internal.h"
#include "kernels/hsum_rows_avx512.h"
#include "kernels/quant_formats.h"
#include "kernels/weight_view.h"

namespace cedar::kernels {

namespace internal {
namespace {

std::atomic<bool> bf16_activations{false};

constexpr int B = kQuantBlock;
constexpr int kPair = 2 * B;  // elements per pair of blocks

// Word vectors per step (the module comment's K): FP8 and INT8 read pairs of blocks, FP4 quads.
constexpr int StepVectors(WeightType t) { return t == WeightType::kFP4 ? 4 : 2; }

// The step element that word q (< 32 K: X0's words 0-31, then X1's, ...) of a converted row holds.
template <int K>
constexpr int StepElement(int q) {
  if constexpr (K == 2) return 16 * ((q % 32) / 8) + 8 * (q / 32) + q % 8;
  else return 4 * (q % 32) + q / 32;
}
// Words of a converted row of `in` elements (whole steps, zero padded).
constexpr int64_t ConvertedWords(int64_t in, int k) { return (in + 32 * k - 1) / (32 * k) * (32 * k); }

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
// read as +-480, as the F32-activation kernels read them: the released weights have none. INT8's
// -128 reads as -0 (module comment).
float RawValue(const WeightView& w, int64_t r, int64_t e) {
  if (w.type == WeightType::kI8) {
    const int8_t q = static_cast<const int8_t*>(w.data)[r * w.cols + e];
    return q == -128 ? -0.0f : float(q);
  }
  if (w.type == WeightType::kFP8) {
    const uint8_t c = static_cast<const uint8_t*>(w.data)[r * w.cols + e];
    return (c & 0x7F) == 0x7F ? (c & 0x80 ? -480.0f : 480.0f) : DecodeE4M3(c);
  }
  const uint8_t byte = static_cast<const uint8_t*>(w.data)[r * (w.cols / 2) + e / 2];
  return DecodeE2M1(e % 2 ? uint8_t(byte >> 4) : uint8_t(byte & 0x0F));
}
// FP8 / FP4: row r's E8M0 codes; INT8: its bfloat16 scales.
const void* ScaleRow(const WeightView& w, int64_t r) {
  const int64_t nb = w.cols / B;
  if (w.type == WeightType::kI8) return static_cast<const uint16_t*>(w.scales) + r * nb;
  const auto* s = static_cast<const uint8_t*>(w.scales);
  return w.type == WeightType::kFP8 ? s + ((w.row0 + r) / B) * nb : s + r * nb;
}
// Block b's scale from a ScaleRow (b < nb; a padded block's is E8M0 code 0's).
float BlockScale(const WeightView& w, const void* sc, int64_t b, int64_t nb) {
  if (w.type == WeightType::kI8) return I8ScaleAt(sc, b);
  return E8m0Floats()[b < nb ? static_cast<const uint8_t*>(sc)[b] : 0];
}

inline float Ftz(float v) { return std::fabs(v) < 0x1p-126f ? std::copysign(0.0f, v) : v; }

// The order above in scalar code: y = x . w[r] for one converted row xr (step layout).
template <int K>
float DotScalar(const uint16_t* xr, const WeightView& w, int64_t r) {
  const void* sc = ScaleRow(w, r);
  const int64_t nb = w.cols / B, step = 32 * K;
  float acc[16] = {};
  for (int64_t p = 0; p < ConvertedWords(w.cols, K) / step; ++p)
    for (int i = 0; i < 16; ++i) {
      float t = 0.0f;
      for (int k = 0; k < K; ++k)
        for (int q : {32 * k + 2 * i + 1, 32 * k + 2 * i}) {
          const int64_t e = p * step + StepElement<K>(q);
          t = Ftz(std::fma(e < w.cols ? RawValue(w, r, e) : 0.0f, Bf16ToFloat(xr[p * step + q]), t));
        }
      const int64_t block = K * p + i / (16 / K);
      acc[i] = std::fma(t, BlockScale(w, sc, block, nb), acc[i]);
    }
  return HSum16(acc);
}
float DotScalar(const uint16_t* xr, const WeightView& w, int64_t r) {
  return StepVectors(w.type) == 4 ? DotScalar<4>(xr, w, r) : DotScalar<2>(xr, w, r);
}

template <int K>
void ConvertScalar(const float* x, int64_t in, uint16_t* out) {
  for (int64_t p = 0; p < ConvertedWords(in, K); p += 32 * K)
    for (int q = 0; q < 32 * K; ++q) {
      const int64_t e = p + StepElement<K>(q);
      out[p + q] = e < in ? RoundBf16(x[e]) : 0;
    }
}
void ConvertScalar(const float* x, int64_t in, int k, uint16_t* out) {
  if (k == 4) ConvertScalar<4>(x, in, out);
  else ConvertScalar<2>(x, in, out);
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

// x converted per quad: the element-order bf16 of 128 floats, then Xk = words k, 4 + k, ... (a
// 4-way de-interleave: two word permutes of 64 words each, joined). A half quad at the end of a
// row goes through ConvertScalar (the padding).
void ConvertQuads(const float* x, int64_t in, uint16_t* out) {
  alignas(64) static const uint16_t kIdx[4][32] = {
#define CEDAR_Q(k) {k, 4 + k, 8 + k, 12 + k, 16 + k, 20 + k, 24 + k, 28 + k, 32 + k, 36 + k, 40 + k, 44 + k, 48 + k, 52 + k, 56 + k, 60 + k, \
                    k, 4 + k, 8 + k, 12 + k, 16 + k, 20 + k, 24 + k, 28 + k, 32 + k, 36 + k, 40 + k, 44 + k, 48 + k, 52 + k, 56 + k, 60 + k}
      CEDAR_Q(0), CEDAR_Q(1), CEDAR_Q(2), CEDAR_Q(3)};
#undef CEDAR_Q
  const int64_t quads = in / 128;
  for (int64_t p = 0; p < quads; ++p) {
    const float* s = x + p * 128;
    __m512i e[4];
    for (int h = 0; h < 4; ++h) e[h] = (__m512i)_mm512_cvtne2ps_pbh(_mm512_loadu_ps(s + 32 * h + 16), _mm512_loadu_ps(s + 32 * h));
    for (int k = 0; k < 4; ++k) {
      const __m512i idx = _mm512_load_si512(kIdx[k]);
      const __m512i lo = _mm512_permutex2var_epi16(e[0], idx, e[1]), hi = _mm512_permutex2var_epi16(e[2], idx, e[3]);
      _mm512_store_si512(out + p * 128 + 32 * k, _mm512_inserti64x4(lo, _mm512_castsi512_si256(hi), 1));
    }
  }
  if (quads * 128 < in) ConvertScalar<4>(x + quads * 128, in - quads * 128, out + quads * 128);
}

// Decode (one row of x) reads a thread's slice as kSpread parts side by side, each prefetched
// kPrefetchBytes ahead (NTA, one prefetch per line), and with each row's block scales where they
// are a stream of their own (Src::kGroupScaleBytes: INT8's bfloat16 scales, 6% of its bytes; FP4's
// E8M0 codes, 6%), one prefetch per 16 blocks as far ahead in blocks. Session 32, medium decode
// steps alternating one by one in one process (a driver over the engine), step time against the
// previous reading (2 parts, T0, 4 KiB, no scales):
//   INT8: 4 parts, NTA, 2 KiB, scales 4 KiB ahead 0.905 / 0.917; without the scales' prefetch
//   0.972 / 0.994; 4 parts with the old prefetch 1.046 / 1.097. Against the first: 1 KiB ahead
//   1.007 / 0.993, 3 KiB 1.060 / 1.043, T0 1.008 / 0.996, 2 parts 1.105 / 1.089, 3 parts 1.053 /
//   1.039, the F32-activation INT8 kernel 1.035 / 1.019; the scales as far ahead as the weights
//   (kept) 0.982 / 0.986, the F32-activation kernel with its scales prefetched 1.020 / 1.027.
//   fp8-fp4: FP8 and FP4 read so, FP4's scales prefetched, 0.980 / 0.960 / 0.954 (FP4's scales
//   not prefetched 0.990 / 0.966 / 0.966, 0.963 / 0.971; FP8 alone 0.980 / 0.971; FP8 at 2 parts
//   NTA 2 KiB 1.006 / 1.024, 4 KiB 0.979 / 0.978; FP4 alone 0.989 / 0.992).
// Before: (session 26) `cedar bench` medium fp8-fp4, three rounds alternating, 2 parts with the
// 4 KiB T0 prefetch 76.6 / 84.3 / 79.2 tok/s, without 72.6 / 73.8 / 76.0, 8 KiB ahead 73.8 / 81.9 /
// 68.3; 3 or 4 parts with T0 4 KiB 8-10% slower (session 31). (In a driver with the matrix in L2
// the prefetch halved the rate: decode's weights are never there.) A part's prefetches stop at its
// end, as the F32-activation kernels' stop at their slice's (session 32: running 2 KiB past it,
// into lines another part had read, cost INT8 7-8% of the step, 0.925 -> 0.854 and 0.968 -> 0.909
// of the F32-activation kernel's, and fp8-fp4 0.962 / 0.948).
constexpr int kSpread = 4;
constexpr int64_t kPrefetchBytes = 2048;

// The E8M0 scales of blocks 16g..16g+15 (fewer at the end of a row: the rest zero) as floats:
// code c as the bits c << 23, 2^(c - 127) for c in 1..254, then code 0 (2^-127, a subnormal) and
// 255 (NaN) put in by mask, so every code gives E8m0Floats' value.
inline __m512 E8m0GroupScales(const uint8_t* sc, int64_t g, int64_t nb) {
  const int64_t left = nb - 16 * g;
  const __m512i c = _mm512_cvtepu8_epi32(left >= 16 ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(sc + 16 * g))
                                                    : _mm_maskz_loadu_epi8(__mmask16((1u << left) - 1), sc + 16 * g));
  __m512i bits = _mm512_slli_epi32(c, 23);
  bits = _mm512_mask_mov_epi32(bits, _mm512_cmpeq_epi32_mask(c, _mm512_setzero_si512()), _mm512_set1_epi32(0x00400000));
  bits = _mm512_mask_mov_epi32(bits, _mm512_cmpeq_epi32_mask(c, _mm512_set1_epi32(255)), _mm512_set1_epi32(0x7FC00000));
  return _mm512_castsi512_ps(bits);
}

// Weight sources: Step(row, p, w) gives step p's K * 32 weights as bf16 words in X0 .. X{K-1}'s
// order (StepElement).
// FP8 (K = 2): w[0] / w[1] = the 8-bit unpacks (low / high half of each 128-bit lane) of the
// words' low bytes and high bytes in element order, so 128-bit lane L of w[0] holds elements
// 16L..16L+7. The code's low 7 bits index two 128-entry byte tables (vpermi2b) for the bf16's low
// byte and high byte, the sign or-ed into the high byte (the F32 kernel's LoadPair tables).
struct SrcFp8 {
  static constexpr int K = 2;
  static constexpr int64_t kGroupScaleBytes = 0;  // a 32 x 32 block's scale: few
  static const uint8_t* Row(const WeightView& w, int64_t r) { return static_cast<const uint8_t*>(w.data) + r * w.cols; }
  static __m512 GroupScales(const void* sc, int64_t g, int64_t nb) { return E8m0GroupScales(static_cast<const uint8_t*>(sc), g, nb); }
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
  template <bool kHalf = false>
  void Step(const uint8_t* row, int64_t p, __m512i (&w)[K]) const {
    const __m512i c = _mm512_loadu_si512(row + p * 64);
    const __m512i lo = _mm512_permutex2var_epi8(lo_a, c, lo_b);
    const __m512i hi = _mm512_ternarylogic_epi32(_mm512_permutex2var_epi8(hi_a, c, hi_b), c, sign, 0xF8);  // hi | (c & sign)
    w[0] = _mm512_unpacklo_epi8(lo, hi), w[1] = _mm512_unpackhi_epi8(lo, hi);
  }
};
// INT8 (K = 2): FP8's order. |q| (vpabsb) indexes two 128-entry byte tables for bf16(|q|)'s low
// and high byte, q's sign or-ed into the high byte; -128, whose |q| wraps to index 0, reads as -0
// (module comment). Its bfloat16 scales, 16 blocks' at once (fewer at the end of a row: the rest
// zero), widened to floats by a shift.
struct SrcI8 {
  static constexpr int K = 2;
  static constexpr int64_t kGroupScaleBytes = 32;  // 16 bfloat16 scales
  static const uint8_t* Row(const WeightView& w, int64_t r) { return static_cast<const uint8_t*>(w.data) + r * w.cols; }
  static __m512 GroupScales(const void* sc, int64_t g, int64_t nb) {
    const uint16_t* h = static_cast<const uint16_t*>(sc) + 16 * g;
    const int64_t left = nb - 16 * g;
    const __m256i c = left >= 16 ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(h))
                                 : _mm256_maskz_loadu_epi16(__mmask16((1u << left) - 1), h);
    return Bf16x16ToFloats(c);
  }
  static const SrcFp8::Tables& Lut() {
    static const SrcFp8::Tables t = [] {
      SrcFp8::Tables u{};
      for (int c = 0; c < 128; ++c) {
        const uint16_t b = RoundBf16(float(c));  // exact
        u.lo[c] = uint8_t(b), u.hi[c] = uint8_t(b >> 8);
      }
      return u;
    }();
    return t;
  }
  const SrcFp8::Tables& lut = Lut();
  __m512i lo_a = _mm512_load_si512(lut.lo), lo_b = _mm512_load_si512(lut.lo + 64);
  __m512i hi_a = _mm512_load_si512(lut.hi), hi_b = _mm512_load_si512(lut.hi + 64);
  __m512i sign = _mm512_set1_epi8(int8_t(0x80));
  template <bool kHalf = false>
  void Step(const uint8_t* row, int64_t p, __m512i (&w)[K]) const {
    const __m512i c = _mm512_loadu_si512(row + p * 64), a = _mm512_abs_epi8(c);
    const __m512i lo = _mm512_permutex2var_epi8(lo_a, a, lo_b);
    const __m512i hi = _mm512_ternarylogic_epi32(_mm512_permutex2var_epi8(hi_a, a, hi_b), c, sign, 0xF8);  // hi | (c & sign)
    w[0] = _mm512_unpacklo_epi8(lo, hi), w[1] = _mm512_unpackhi_epi8(lo, hi);
  }
};
// FP4 (K = 4): the quad's 64 packed bytes as 32 16-bit words, each holding elements 4j .. 4j + 3
// in its nibbles from bit 0 up; w[k] = the words shifted right by 4k, each looked up (vpermw) in
// a 32-entry table that repeats the 16 nibbles' bf16 words, so the bits above the nibble are
// ignored. A half quad (kHalf, the end of a row of 64 mod 128 elements) loads its 32 bytes and
// zeros (nibble 0 is +0).
struct SrcFp4 {
  static constexpr int K = 4;
  static constexpr int64_t kGroupScaleBytes = 16;  // 16 E8M0 codes
  static const uint8_t* Row(const WeightView& w, int64_t r) { return static_cast<const uint8_t*>(w.data) + r * (w.cols / 2); }
  static __m512 GroupScales(const void* sc, int64_t g, int64_t nb) { return E8m0GroupScales(static_cast<const uint8_t*>(sc), g, nb); }
  static const uint16_t* Lut() {
    alignas(64) static const struct Table {
      uint16_t v[32];
      Table() {
        for (int i = 0; i < 32; ++i) v[i] = RoundBf16(DecodeE2M1(uint8_t(i & 0x0F)));  // exact; nibble 8 is -0
      }
    } t;
    return t.v;
  }
  __m512i table = _mm512_load_si512(Lut());
  template <bool kHalf = false>
  void Step(const uint8_t* row, int64_t p, __m512i (&w)[K]) const {
    const __m512i c = kHalf ? _mm512_maskz_loadu_epi8(0xFFFFFFFFull, row + p * 64) : _mm512_loadu_si512(row + p * 64);
    w[0] = _mm512_permutexvar_epi16(c, table);
    w[1] = _mm512_permutexvar_epi16(_mm512_srli_epi16(c, 4), table);
    w[2] = _mm512_permutexvar_epi16(_mm512_srli_epi16(c, 8), table);
    w[3] = _mm512_permutexvar_epi16(_mm512_srli_epi16(c, 12), table);
  }
};

// Few-row products whose converted x (rows x columns x 2 bytes) exceeds kChunkXBytes go over the
// columns in chunks of kChunkGroups groups of 16 blocks, kChunkRows weight rows at a time
// (RowsBf16Wide). Session 29: in cache, one thread, 8 rows x 4096 columns FP8 74-77 -> 90-105 GB/s
// (row-bytes), FP4 48 -> 64-68 (at 2048 columns, 32 KiB of x, chunking was 5-12% slower, hence the
// threshold); medium fp8-fp4 decode at batch 8, steps alternating in one process, Wo_b (2048 x 4096)
// 739 -> 604 us and the step 58.0 -> 56.5 / 54.2 -> 52.5 ms (without the next block's prefetch
// the chunked step was 3.5% slower: 55.9 -> 58.0, 54.7 -> 56.8 ms).
constexpr int64_t kChunkXBytes = 32 * 1024;
constexpr int kChunkGroups = 2;
constexpr int kChunkRows = 16;


// N converted rows of x against weight rows [r0, r1), each weight step decoded once for the N
// rows. With S > 1 (decode, N = 1) rows r + k * rs for k < S run side by side, their outputs at
// y[(r - r0) + k * rs]: every row keeps its own accumulator, so the bits are those of S = 1.
// Scales: 16 blocks' at once (GroupScales), then step j of the group's blocks in their lanes by
// one permute (a vmovd, table load, broadcast and insert per pair cost ~30% of a one-row FP8
// product in L2, session 26; a masked broadcast from a row of float scales ran slower still).
// Not inlined into ConvertedT: inlined there, FP8's 4-row product ran 5% slower (session 27).
// kHeld (RowsBf16Wide): only groups [g0, g1) of 16 blocks, each row's accumulators read from and
// written back to held[r - r0] instead of starting at zero and ending in y.
template <class Src, int N, int S, bool kPrefetch = false, bool kHeld = false>
__attribute__((noinline)) void RowsBf16(const uint16_t* const* xr, const WeightView& w, int64_t r0, int64_t r1, float* y, int64_t ys, int64_t rs,
                                        int64_t g0 = 0, int64_t g1 = 0, __m512 (*held)[N] = nullptr) {
  constexpr int K = Src::K, kStep = 32 * K, kGroup = 16 / K;  // words per step, steps per 16 blocks
  const Src src;
  const int64_t steps = ConvertedWords(w.cols, K) / kStep, whole = w.cols / kStep, nb = w.cols / B;
  const __m512i first = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1), quad_first = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
  const __m512i idx0 = K == 2 ? first : quad_first, inc = _mm512_set1_epi32(K);
  RowSums16 sums;  // HSum16 of 16 finished rows at a time (few-row products; see hsum_rows_avx512.h)
  const uint8_t* part_end[S];  // rows r0 + k * rs .. r0 + (k + 1) * rs - 1 are part k
  for (int k = 0; k < S; ++k) part_end[k] = Src::Row(w, r0 + (k + 1) * rs);
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* wr[S];
    const void* sc[S];
    __m512 acc[N][S];
    for (int k = 0; k < S; ++k) {
      wr[k] = Src::Row(w, r + k * rs);
      sc[k] = ScaleRow(w, r + k * rs);
      for (int n = 0; n < N; ++n) acc[n][k] = kHeld ? held[r - r0][n] : _mm512_setzero_ps();
    }
    // One step: its weights decoded once, its scales from the group's (s16), every row of x.
    auto step = [&]<bool kHalf = false>(int64_t p, const __m512 (&s16)[S], __m512i idx) __attribute__((always_inline)) {
      __m512i wv[S][K];
      __m512 s[S];
      for (int k = 0; k < S; ++k) {
        // One prefetch per line (every step is 64 bytes of weights), never past the part's end.
        if (const uint8_t* pf = wr[k] + p * 64 + kPrefetchBytes; kPrefetch && pf < part_end[k])
          _mm_prefetch(reinterpret_cast<const char*>(pf), _MM_HINT_NTA);
        src.template Step<kHalf>(wr[k], p, wv[k]);
        s[k] = _mm512_permutexvar_ps(idx, s16[k]);
      }
#pragma GCC unroll 8
      for (int n = 0; n < N; ++n) {
        __m512bh x[K];
        for (int v = 0; v < K; ++v) x[v] = (__m512bh)_mm512_load_si512(xr[n] + p * kStep + 32 * v);
        for (int k = 0; k < S; ++k) {
          __m512 t = _mm512_setzero_ps();
          for (int v = 0; v < K; ++v) t = _mm512_dpbf16_ps(t, (__m512bh)wv[k][v], x[v]);
          acc[n][k] = _mm512_fmadd_ps(t, s[k], acc[n][k]);
        }
      }
    };
    // Whole groups of steps (16 blocks: one GroupScales each), unrolled, then the rest.
    int64_t g = kHeld ? g0 : 0;
    for (; (!kHeld || g < g1) && kGroup * g + kGroup <= whole; ++g) {
      __m512 s16[S];
      for (int k = 0; k < S; ++k) {
        // Group g + ahead's scales (a prefetch past the array's end cannot fault).
        constexpr int64_t ahead = kPrefetchBytes / (64 * kGroup);
        if constexpr (kPrefetch && Src::kGroupScaleBytes > 0)
          _mm_prefetch(static_cast<const char*>(sc[k]) + Src::kGroupScaleBytes * (g + ahead), _MM_HINT_NTA);
        s16[k] = Src::GroupScales(sc[k], g, nb);
      }
      __m512i idx = idx0;
#pragma GCC unroll 8
      for (int j = 0; j < kGroup; ++j, idx = _mm512_add_epi32(idx, inc)) step(kGroup * g + j, s16, idx);
    }
    if ((!kHeld || g < g1) && kGroup * g < steps) {
      __m512 s16[S];
      for (int k = 0; k < S; ++k) s16[k] = Src::GroupScales(sc[k], g, nb);
      __m512i idx = idx0;
      for (int64_t p = kGroup * g; p < steps; ++p, idx = _mm512_add_epi32(idx, inc)) {
        if (K == 2 || p < whole) step(p, s16, idx);  // FP8 and INT8 rows are whole pairs
        else step.template operator()<true>(p, s16, idx);
      }
    }
    if constexpr (kHeld) {
      for (int n = 0; n < N; ++n) held[r - r0][n] = acc[n][0];
      continue;
    }
    for (int n = 0; n < N; ++n)
      for (int k = 0; k < S; ++k) {
        float* out = y + n * ys + (r - r0) + k * rs;
        if constexpr (N == 1) *out = HSum16Row(acc[n][k]);
        else sums.Add(acc[n][k], out);
      }
  }
  sums.Flush();
}

// Several rows of x whose converted rows outgrow the first-level cache (more than kChunkXBytes):
// blocks of kChunkRows weight rows go over the columns in chunks of kChunkGroups groups of 16
// blocks, each row's accumulators held between chunks, so the chunk of x stays in cache for the
// block (8 rows of x over 4096 columns are 64 KiB). Every lane's sequence of operations is
// RowsBf16's: the same bits.
template <class Src, int N>
void RowsBf16Wide(const uint16_t* const* xr, const WeightView& w, int64_t r0, int64_t r1, float* y, int64_t ys) {
  constexpr int K = Src::K, kGroup = 16 / K;
  const int64_t groups = (ConvertedWords(w.cols, K) / (32 * K) + kGroup - 1) / kGroup;
  if (int64_t(N) * ConvertedWords(w.cols, K) * 2 <= kChunkXBytes || groups <= kChunkGroups)
    return RowsBf16<Src, N, 1>(xr, w, r0, r1, y, ys, 1);
  alignas(64) __m512 held[kChunkRows][N];
  RowSums16 sums;
  for (int64_t b = r0; b < r1; b += kChunkRows) {
    const int64_t e = std::min(r1, b + kChunkRows);
    for (int64_t r = b; r < e; ++r)
      for (int n = 0; n < N; ++n) held[r - b][n] = _mm512_setzero_ps();
    // The block reads each row a chunk at a time, which the hardware prefetchers do not follow
    // from memory: each pass prefetches its share of the next block's weights to L2.
    const int64_t row_bytes = Src::K == 2 ? w.cols : w.cols / 2, passes = (groups + kChunkGroups - 1) / kChunkGroups;
    const int64_t share = (std::min(r1, e + kChunkRows) - e) * row_bytes / passes;
    const char* next = reinterpret_cast<const char*>(Src::Row(w, 0)) + e * row_bytes;
    for (int64_t g = 0, pass = 0; g < groups; g += kChunkGroups, ++pass) {
      for (int64_t o = pass * share; o < (pass + 1) * share; o += 64) _mm_prefetch(next + o, _MM_HINT_T1);
      RowsBf16<Src, N, 1, false, true>(xr, w, b, e, nullptr, 0, 1, g, std::min(groups, g + kChunkGroups), held);
    }
    for (int64_t r = b; r < e; ++r)
      for (int n = 0; n < N; ++n) sums.Add(held[r - b][n], y + n * ys + (r - r0));
  }
  sums.Flush();
}

template <class Src>
void ConvertedT(const uint16_t* const* xr, int n, const WeightView& w, int64_t r0, int64_t r1, float* y, int64_t ys) {
  for (int b0 = 0; b0 < n; b0 += 8) {  // groups of up to 8 rows of x: 8 accumulators
    const uint16_t* const* xb = xr + b0;
    float* yb = y + int64_t(b0) * ys;
    switch (std::min(8, n - b0)) {
      case 1:
        if (r1 - r0 >= kSpread * 16) {
          const int64_t per = (r1 - r0) / kSpread;
          RowsBf16<Src, 1, kSpread, true>(xb, w, r0, r0 + per, yb, ys, per);
          RowsBf16<Src, 1, 1>(xb, w, r0 + per * kSpread, r1, yb + per * kSpread, ys, 1);
        } else {
          RowsBf16<Src, 1, 1>(xb, w, r0, r1, yb, ys, 1);
        }
        break;
      case 2: RowsBf16Wide<Src, 2>(xb, w, r0, r1, yb, ys); break;
      case 3: RowsBf16Wide<Src, 3>(xb, w, r0, r1, yb, ys); break;
      case 4: RowsBf16Wide<Src, 4>(xb, w, r0, r1, yb, ys); break;
      case 5: RowsBf16Wide<Src, 5>(xb, w, r0, r1, yb, ys); break;
      case 6: RowsBf16Wide<Src, 6>(xb, w, r0, r1, yb, ys); break;
      case 7: RowsBf16Wide<Src, 7>(xb, w, r0, r1, yb, ys); break;
      default: RowsBf16Wide<Src, 8>(xb, w, r0, r1, yb, ys); break;
    }
  }
}

#endif  // CEDAR_BF16A_AVX512

}  // namespace

bool Bf16ActivationsApply(const WeightView& w) {
  if (!bf16_activations.load(std::memory_order_relaxed) || w.cols <= 0 || w.cols % kPair != 0) return false;
  // FP4 too where 8-bit activations are on; INT8 keeps those where they are on.
  return w.type == WeightType::kFP8 || w.type == WeightType::kFP4 || (w.type == WeightType::kI8 && !Int8ActivationsApply(w));
}

void ConvertRowsBf16(const float* x, int n, int64_t in, WeightType type, Bf16Rows& rows) {
  const int k = StepVectors(type);
  rows.type = type;
  if (rows.rows.size() < size_t(n)) rows.rows.resize(size_t(n));
  for (int b = 0; b < n; ++b) {
    LineVector<uint16_t>& out = rows.rows[size_t(b)];
    out.resize(size_t(ConvertedWords(in, k)));
#if CEDAR_BF16A_AVX512
    if (k == 4) ConvertQuads(x + int64_t(b) * in, in, out.data());
    else Convert(x + int64_t(b) * in, in, out.data());
#else
    ConvertScalar(x + int64_t(b) * in, in, k, out.data());
#endif
  }
}

void Bf16AConverted(const Bf16Rows& rows, int n, const WeightView& w, int64_t r0, int64_t r1, float* y, int64_t ys) {
  if (r0 >= r1) return;
  if (StepVectors(rows.type) != StepVectors(w.type))  // a caller's bug: the words would pair with the wrong weights
    throw std::logic_error("Bf16AConverted: x was converted for another weight type's order");
  const uint16_t* xr[kFewRowsMax];
  for (int b = 0; b < n; ++b) xr[b] = rows.rows[size_t(b)].data();
#if CEDAR_BF16A_AVX512
  if (w.type == WeightType::kFP8)
    ConvertedT<SrcFp8>(xr, n, w, r0, r1, y, ys);
  else if (w.type == WeightType::kI8)
    ConvertedT<SrcI8>(xr, n, w, r0, r1, y, ys);
  else
    ConvertedT<SrcFp4>(xr, n, w, r0, r1, y, ys);
#else
  for (int64_t r = r0; r < r1; ++r)
    for (int b = 0; b < n; ++b) y[b * ys + (r - r0)] = DotScalar(xr[b], w, r);
#endif
}

void Bf16AFewRows(const float* x, int n, const WeightView& w, int64_t r0, int64_t r1, float* y, int64_t ys) {
  thread_local Bf16Rows rows;
  ConvertRowsBf16(x, n, w.cols, w.type, rows);
  Bf16AConverted(rows, n, w, r0, r1, y, ys);
}

}  // namespace internal

namespace ref {
void MatmulBf16A(const float* x, const WeightView& w, float* y, int n) {
  const int k = internal::StepVectors(w.type);
  std::vector<uint16_t> xr(size_t(internal::ConvertedWords(w.cols, k)));
  for (int b = 0; b < n; ++b) {
    internal::ConvertScalar(x + int64_t(b) * w.cols, w.cols, k, xr.data());
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
