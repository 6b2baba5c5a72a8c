// Products with BF16 / INT8 / FP8 / FP4 weights (kernels/weight_view.h), F32 activations.
//
// Decode (one row of x) and batched decode (<= kFewRowsMax rows) decode each block of 32 weights
// in registers and reuse it for every row of x, so the weights are read once. Every output is
// summed in one fixed order, whatever the number of rows of x and the rows side by side:
//   per block of 32: t = (w0*x0 + w2*x2) + (w1*x1 + w3*x3) (8 lanes each), acc = fma(t, scale, acc)
//   (acc + t for BF16), then the lanes summed pairwise; a partial last block goes through the same
//   code from a zero-padded copy. So a row of a batch equals that row alone, bit for bit.
// Many rows (prefill): a panel of weight rows is decoded to F32 once and sgemm runs on it.
//
// AVX2 + FMA (this project's minimum). With AVX-512 each block's products run as two 16-lane
// halves (elements 0-15 and 16-31) whose lanes are the AVX2 path's t0 (lanes 0-7) and t1 (8-15),
// folded to 8 lanes before the scale: the same operations on the same values, so both ISAs give
// the same bits (kernels_weights_test checks both against a scalar twin of this order) in about
// half the instructions per block. Without AVX2, plain loops follow the same order (FewRowsPortable);
// a portable build compiles the AVX2 path too and takes it where the CPU has AVX2 (avx2_runtime.h).

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "kernels/avx2_runtime.h"
#if defined(CEDAR_AVX2_KERNELS)  // AVX2 builds, and portable ones where the CPU has it (Avx2KernelsRun)
#define CEDAR_QUANT_AVX2 1
#if defined(__AVX512F__)
#define CEDAR_QUANT_AVX512 1
#if defined(__AVX512BW__) && defined(__AVX512VBMI__)
#define CEDAR_QUANT_VBMI 1  // FP8 and FP4 two blocks at a time through byte permutes (LoadPair)
#endif
#endif
#endif

#include "kernels/cpu_internal.h"
#include "kernels/gemm_prefill.h"
#include "kernels/quant_formats.h"
#include "kernels/weight_view.h"

namespace cedar::kernels::internal {

namespace {

#if defined(CEDAR_QUANT_AVX512)
constexpr bool kQuantAvx512 = true;
#else
constexpr bool kQuantAvx512 = false;
#endif

constexpr int B = kQuantBlock;
// How far ahead the products prefetch each weight stream (bytes), per decoder (kPrefetch): 1 KiB,
// and 4 KiB for INT8 and BF16: an INT8 one-row product over a 64 MB matrix on huge pages (a Zen 3
// VM, 1 thread) read 8.9-10.0 GB/s with 4 KiB against 7.4-8.8 with 1 KiB in alternating runs. BF16
// ran slower with 4 KiB on that VM, but on the AVX-512 EPYC with the 16-lane Step
// (`bench_weights --rows 8192 --cols 4096`, 6 alternating runs) 4 KiB read 24-28 GB/s on one
// thread against 16-22 and 42-68 on two against 38-51 in 5 of 6. FP8 / FP4 (compute bound) keep 1 KiB.
constexpr int64_t kPrefetchBytes = 1024;
// Adjacent weight rows read side by side at decode (one row of x): one, so memory is read in
// address order. Decode's rows are 0.5-2 KiB, and R interleaved short streams kept this AVX2 VM's
// prefetchers from ramping (a read of 1 KiB rows 4 at a time: ~5 GB/s; one at a time: ~12).
// (BF16 everywhere and INT8 on AVX-512 read slices as parts far apart instead: kSpreadOf below.)
// Every output still has its own accumulator, so the bits do not depend on R.
constexpr int kOneRowR = 1;

int64_t Blocks(int64_t cols) { return (cols + B - 1) / B; }

// The unscaled value of element (r, c) and the scale of its block (scalar; tails and fallback).
float RawAt(const WeightView& w, int64_t r, int64_t c) {
  switch (w.type) {
    case WeightType::kBF16: return Bf16ToFloat(static_cast<const uint16_t*>(w.data)[r * w.cols + c]);
    case WeightType::kI8: return float(static_cast<const int8_t*>(w.data)[r * w.cols + c]);
    case WeightType::kFP8: return DecodeE4M3(static_cast<const uint8_t*>(w.data)[r * w.cols + c]);
    case WeightType::kFP4: {
      const uint8_t byte = static_cast<const uint8_t*>(w.data)[r * (w.cols / 2) + c / 2];
      return DecodeE2M1(c % 2 ? uint8_t(byte >> 4) : uint8_t(byte & 0xF));
    }
    default: return static_cast<const float*>(w.data)[r * w.cols + c];
  }
}
float ScaleOf(const WeightView& w, int64_t r, int64_t b) {
  switch (w.type) {
    case WeightType::kI8: return I8ScaleAt(w.scales, r * Blocks(w.cols) + b);
    case WeightType::kFP8: return E8m0Floats()[static_cast<const uint8_t*>(w.scales)[((w.row0 + r) / B) * Blocks(w.cols) + b]];
    case WeightType::kFP4: return E8m0Floats()[static_cast<const uint8_t*>(w.scales)[r * Blocks(w.cols) + b]];
    default: return 1.0f;
  }
}

#if CEDAR_QUANT_AVX2
CEDAR_AVX2_BEGIN

// Decoders. A decoder object is built once per Block (its constants and the E8M0 table pointer
// live in registers for the whole loop: a function-local static read inside the loop made GCC
// spill the accumulators around its guard, measured 3x slower for FP8/FP4).
//   Row(w, r): row r's first element byte; Scales(w, r): row r's scale row (once per row, no
//   division in the block loop); Scale(p, b): block b's scale; Load(row, b, v): v[j] lane i =
//   the unscaled element 32 b + 8 j + i (a full block) times kLoadUnit. Every Load decodes
//   exactly (the values are the scalar DecodeE4M3 / DecodeE2M1 / Bf16ToFloat / int8 values,
//   times a power of two), so the order of Step below is the only thing that fixes the bits: a
//   kLoadUnit of 2^k scales every product, partial sum and accumulator by exactly 2^k (rounding
//   commutes with a power of two), and Block's last multiply by 1 / kLoadUnit gives the same
//   float. (That multiply once per output replaced one per block on the scale: a vmulss and a
//   vbroadcastss on the shuffle pipes, in a loop bound by those pipes.) A decoder may also
//   take x times a power of two (kXUnitOf<D>; DecFp8X: x 2^120 against weights w 2^-120), and
//   Block undoes kLoadUnit x kXUnitOf<D> (DecFp8X: 1, nothing).

// The 32 bytes of a block, byte 8 j + i in the top byte of dword i of t[j] (the rest zero): the
// in-lane vpshufb of 16 bytes broadcast to both halves, one per 8 bytes. It replaces the
// cross-lane vpmovsxbd, 1.5 cycles of Zen 3's two shuffle pipes per 8 bytes (llvm-mca
// -mcpu=znver3 on the one-row INT8 loop: 6.5 -> 4.0 cycles a block; measured in L2, 4 rows at
// once: 6.0 -> 5.7). Sign-extending is then an arithmetic shift, or the int32 is the byte * 2^24.
struct BytesToDwordTops {
  __m256i lo8 = _mm256_setr_epi8(-1, -1, -1, 0, -1, -1, -1, 1, -1, -1, -1, 2, -1, -1, -1, 3, -1, -1, -1, 4, -1, -1, -1, 5, -1, -1, -1, 6,
                                 -1, -1, -1, 7);
  __m256i hi8 = _mm256_setr_epi8(-1, -1, -1, 8, -1, -1, -1, 9, -1, -1, -1, 10, -1, -1, -1, 11, -1, -1, -1, 12, -1, -1, -1, 13, -1, -1,
                                 -1, 14, -1, -1, -1, 15);
  // Written out, so the masks are set inside a portable build's target pragma: the implicit
  // constructor is not compiled under it and cannot inline the intrinsics (the decoders' too).
  BytesToDwordTops() {}
  void operator()(const uint8_t* p, __m256i t[4]) const {
    const __m256i a = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));       // bytes 0-15
    const __m256i c = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16)));  // 16-31
    t[0] = _mm256_shuffle_epi8(a, lo8), t[1] = _mm256_shuffle_epi8(a, hi8);
    t[2] = _mm256_shuffle_epi8(c, lo8), t[3] = _mm256_shuffle_epi8(c, hi8);
  }
};

#if CEDAR_QUANT_VBMI
// The two-source byte permutes of DecFp8's LoadPair (DecFp4's too until session 50): block h's
// 32 words (h = 0, 1 of a pair of blocks), dword i holding element i of the block in its low word
// and element 16 + i in its high word, so that a shift left by 16 and a mask of the high words
// (PairFloats) give the floats of elements 0-15 and 16-31. Byte 2w takes that element's float byte
// 2 (from the first source, at the pair's element e), byte 2w + 1 its byte 3 (from the second
// source: e + 64). The shift and the mask replaced 16-bit unpacks with zero (4 shuffles a pair of
// blocks -> 2 shifts and 2 masks; the same values, so the same bits): a one-thread loop of one-row
// products, 512 x 4096 in L2 on the AVX-512 EPYC (Zen 5), five rounds in turn, FP4 12.7 -> 13.0
// GB/s and FP8 18.6-18.8 -> 19.2-19.6 (session 49).
inline void PairWordOrder(uint8_t (&order)[2][64]) {
  for (int h = 0; h < 2; ++h)
    for (int w = 0; w < 32; ++w) {
      const int e = 32 * h + (w % 2 ? 16 + w / 2 : w / 2);
      order[h][2 * w] = uint8_t(e), order[h][2 * w + 1] = uint8_t(64 + e);
    }
}
// lo / hi: each element's float byte 2 / 3 at the pair's element e; order0 / order1: PairWordOrder.
// v[0], v[1]: the first block's elements 0-15, 16-31 as floats; v[2], v[3] the second block's.
inline void PairFloats(__m512i lo, __m512i hi, __m512i order0, __m512i order1, __m512 v[4]) {
  const __m512i w0 = _mm512_permutex2var_epi8(lo, order0, hi), w1 = _mm512_permutex2var_epi8(lo, order1, hi);
  const __m512i high = _mm512_set1_epi32(int(0xFFFF0000u));
  v[0] = _mm512_castsi512_ps(_mm512_slli_epi32(w0, 16)), v[1] = _mm512_castsi512_ps(_mm512_and_si512(w0, high));
  v[2] = _mm512_castsi512_ps(_mm512_slli_epi32(w1, 16)), v[3] = _mm512_castsi512_ps(_mm512_and_si512(w1, high));
}
#endif

struct DecBf16 {
  static constexpr bool kPair16 = false;  // has LoadPair (DecFp8, DecFp4 on VBMI builds)
  static constexpr int64_t kBlockBytes = 64;  // stored bytes of a block of 32
  static constexpr int64_t kPrefetch = 4 * kPrefetchBytes;
  static constexpr bool kScaled = false;
  static constexpr bool kWide = true;  // has Load16 (AVX-512 builds)
  static constexpr float kLoadUnit = 1.0f;
  static const uint8_t* Row(const WeightView& w, int64_t r) { return static_cast<const uint8_t*>(w.data) + r * w.cols * 2; }
  static const void* Scales(const WeightView&, int64_t) { return nullptr; }
  float Scale(const void*, int64_t) const { return 1.0f; }
  void Load(const uint8_t* row, int64_t b, __m256 v[4]) const {
    const uint16_t* p = reinterpret_cast<const uint16_t*>(row) + b * B;
    for (int j = 0; j < 4; ++j) {
      const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 8 * j));
      v[j] = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    }
  }
#if CEDAR_QUANT_AVX512
  // v[h] lane i = element 32 b + 16 h + i (so lanes 0-7 / 8-15 of v[0] are Load's v[0] / v[1]).
  void Load16(const uint8_t* row, int64_t b, __m512 v[2]) const {
    const uint16_t* p = reinterpret_cast<const uint16_t*>(row) + b * B;
    for (int h = 0; h < 2; ++h) {
      const __m256i e = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 16 * h));
      v[h] = Bf16x16ToFloats(e);
    }
  }
#endif
};
struct DecI8 {
  static constexpr bool kPair16 = false;  // has LoadPair (DecFp8, DecFp4 on VBMI builds)
  static constexpr int64_t kBlockBytes = 32;  // stored bytes of a block of 32
  static constexpr int64_t kPrefetch = 4 * kPrefetchBytes;
  static constexpr bool kScaled = true;
  static constexpr bool kWide = true;  // has Load16 (AVX-512 builds)
  static const uint8_t* Row(const WeightView& w, int64_t r) { return static_cast<const uint8_t*>(w.data) + r * w.cols; }
  static const void* Scales(const WeightView& w, int64_t r) { return static_cast<const uint16_t*>(w.scales) + r * Blocks(w.cols); }
  // AVX2: the int8 times 2^24 (BytesToDwordTops), converted; Block's sums are 2^24 times the
  // true ones until its last multiply. Exact (module comment above) while every product and sum
  // stays below 2^104 in magnitude and every nonzero one (and the output) at or above 2^-126, the
  // smallest normal float: far outside what a model's products hold. (Below it the scaled products
  // are normal where the unscaled ones are not, so they keep more bits than the scalar order:
  // kernels_weights_test's underflow case leaves INT8 out for that reason.) AVX-512 builds use Load16 (sign-extended, unit 1); their Load matches it. Measured:
  // kSpreadOf below.
  static constexpr float kLoadUnit = kQuantAvx512 ? 1.0f : 0x1p24f;
  BytesToDwordTops tops;
  DecI8() {}  // (written out: see BytesToDwordTops())
  float Scale(const void* p, int64_t b) const { return I8ScaleAt(p, b); }
  void Load(const uint8_t* row, int64_t b, __m256 v[4]) const {
    __m256i t[4];
    tops(row + b * B, t);
    for (int j = 0; j < 4; ++j) v[j] = _mm256_cvtepi32_ps(kLoadUnit == 1.0f ? _mm256_srai_epi32(t[j], 24) : t[j]);
  }
#if CEDAR_QUANT_AVX512
  void Load16(const uint8_t* row, int64_t b, __m512 v[2]) const {
    const uint8_t* p = row + b * B;
    for (int h = 0; h < 2; ++h)
      v[h] = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16 * h))));
  }
  // Lane j: block b + j's scale, for 16 blocks of a scale row.
  static __m512 Scales16(const void* p, int64_t b) {
    return Bf16x16ToFloats(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(p) + b)));
  }
#endif
};
// E4M3 by bit placement: the byte sign-extended to 32 bits and shifted left by 20 puts the sign in
// bit 31 (and copies of it in bits 27..30, cleared by the mask) and the 7 exponent+mantissa bits
// in bits 20..26: a float of 2^-120 times the value (subnormals included, as float subnormals),
// then * 2^120 (exact). 3 operations per 8 weights besides the multiply (was 6); on AVX2 the
// sign extension and shift are one in-lane shuffle (BytesToDwordTops) and one arithmetic shift.
// 0x7F/0xFF (NaN) decode as +-480: the released weights have none.
struct DecFp8 {
  static constexpr int64_t kBlockBytes = 32;  // stored bytes of a block of 32
  static constexpr int64_t kPrefetch = kPrefetchBytes;
  static constexpr bool kScaled = true;
  static constexpr bool kWide = true;  // has Load16 (AVX-512 builds)
  static constexpr float kLoadUnit = 1.0f;
  const float* e8m0 = E8m0Floats();
  __m256i mask = _mm256_set1_epi32(int(0x87F00000u));
  __m256 k2p120 = _mm256_set1_ps(0x1p120f);
  DecFp8() {}  // (written out: see BytesToDwordTops())
  static const uint8_t* Row(const WeightView& w, int64_t r) { return static_cast<const uint8_t*>(w.data) + r * w.cols; }
  static const void* Scales(const WeightView& w, int64_t r) {
    return static_cast<const uint8_t*>(w.scales) + ((w.row0 + r) / B) * Blocks(w.cols);
  }
  float Scale(const void* p, int64_t b) const { return e8m0[static_cast<const uint8_t*>(p)[b]]; }
  BytesToDwordTops tops;
  // The byte at the top of its dword, shifted right arithmetically by 4: the sign-extended byte
  // shifted left by 20.
  void Load(const uint8_t* row, int64_t b, __m256 v[4]) const {
    __m256i t[4];
    tops(row + b * B, t);
    for (int j = 0; j < 4; ++j) v[j] = _mm256_mul_ps(_mm256_castsi256_ps(_mm256_and_si256(_mm256_srai_epi32(t[j], 4), mask)), k2p120);
  }
#if CEDAR_QUANT_VBMI
  // Blocks b and b + 1 (64 bytes) with no float operation: every value Load gives is a bfloat16
  // (4 exponent and 3 mantissa bits fit its 8 and 7; subnormals become normals), so two 128-entry
  // byte tables on the code's low 7 bits (vpermi2b) give each value's float bytes 3 and 2, the
  // sign is or-ed into byte 3, one two-source byte permute per block interleaves them into words
  // in the order PairFloats' shift and mask turn into element order: v[0], v[1] = block b's
  // Load16, v[2], v[3] = block b + 1's. The same values, so the same bits. It also never
  // multiplies a float subnormal (Load16's codes with exponent 0 are, before * 2^120), which this
  // machine slows ~3x: a one-thread loop over random codes (1 in 16 subnormal) 5-6 GB/s with
  // Load16, 24 with this; without subnormal codes 17.5 against 23.5 (docs/WEIGHTS.md, session 24).
  static constexpr bool kPair16 = true;
  struct Tables {
    alignas(64) uint8_t lo[128], hi[128], order[2][64];
  };
  static const Tables& Lut() {
    static const Tables t = [] {
      Tables u{};
      for (int c = 0; c < 128; ++c) {
        const float f = DecodeFp8Bits(uint8_t(c));
        uint32_t bits;
        std::memcpy(&bits, &f, 4);
        u.lo[c] = uint8_t(bits >> 16), u.hi[c] = uint8_t(bits >> 24);
      }
      PairWordOrder(u.order);
      return u;
    }();
    return t;
  }
  const Tables& lut = Lut();
  __m512i lo_a = _mm512_load_si512(lut.lo), lo_b = _mm512_load_si512(lut.lo + 64);
  __m512i hi_a = _mm512_load_si512(lut.hi), hi_b = _mm512_load_si512(lut.hi + 64);
  __m512i order0 = _mm512_load_si512(lut.order[0]), order1 = _mm512_load_si512(lut.order[1]);
  __m512i sign = _mm512_set1_epi8(int8_t(0x80));
  void LoadPair(const uint8_t* row, int64_t b, __m512 v[4]) const {
    const __m512i c = _mm512_loadu_si512(row + b * B);
    const __m512i lo = _mm512_permutex2var_epi8(lo_a, c, lo_b);
    const __m512i hi = _mm512_ternarylogic_epi32(_mm512_permutex2var_epi8(hi_a, c, hi_b), c, sign, 0xF8);  // hi | (c & sign)
    PairFloats(lo, hi, order0, order1, v);
  }
#else
  static constexpr bool kPair16 = false;
#endif
  // The value Load gives code c (NaN codes as +-480), computed as Load computes it.
  static float DecodeFp8Bits(uint8_t c) {
    const uint32_t bits = (uint32_t(int32_t(int8_t(c))) << 20) & 0x87F00000u;
    float f;
    std::memcpy(&f, &bits, 4);
    return f * 0x1p120f;
  }
#if CEDAR_QUANT_AVX512
  __m512i mask16 = _mm512_set1_epi32(int(0x87F00000u));
  __m512 k2p120_16 = _mm512_set1_ps(0x1p120f);
  void Load16(const uint8_t* row, int64_t b, __m512 v[2]) const {
    const uint8_t* p = row + b * B;
    for (int h = 0; h < 2; ++h) {
      const __m512i e = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16 * h)));
      v[h] = _mm512_mul_ps(_mm512_castsi512_ps(_mm512_and_si512(_mm512_slli_epi32(e, 20), mask16)), k2p120_16);
    }
  }
#endif
};
#if !CEDAR_QUANT_AVX512
// DecFp8 for x given times 2^120 (Fp8XFewRows, on MatmulMany's copy of x from XTimes2p120, made
// once per product wherever every |x| < 2^8):
// Load leaves out DecFp8's multiply, so v = w 2^-120 (exact: E4M3's lowest bit, 2^-9, becomes
// 2^-129, above F32's 2^-149) and v x' is the real number w x, rounded as w x rounds, subnormal
// or not: every product, sum and output keeps DecFp8's bits (kernels_weights_test's twin,
// underflow and large-activation cases). The multiply was 4 of the block's 9 operations on Zen 3's
// two FMA pipes, where FP8 is compute bound: bench_weights --rows 2048 --cols 4096 (AVX2 EPYC,
// session 43) one thread in cache 11.7-12.1 -> 13.3-14.7 GB/s, two threads from memory 11-23 ->
// 27-28; medium's fp8-fp4 decode step 29.4 -> 26.1 ms (bench_decode_ab fp8x=0 / fp8x=1).
// Only the AVX2 Load: AVX-512 builds decode FP8 16 lanes at a time (Load16, LoadPair).
struct DecFp8X : DecFp8 {
  static constexpr float kLoadUnit = 0x1p-120f;
  DecFp8X() {}  // (written out: see BytesToDwordTops())
  void Load(const uint8_t* row, int64_t b, __m256 v[4]) const {
    __m256i t[4];
    tops(row + b * B, t);
    for (int j = 0; j < 4; ++j) v[j] = _mm256_castsi256_ps(_mm256_and_si256(_mm256_srai_epi32(t[j], 4), mask));
  }
};
// How much larger a decoder's x is than the caller's (the products' unit is D::kLoadUnit times it).
template <class D>
constexpr float kXUnitOf = std::is_same_v<D, DecFp8X> ? 0x1p120f : 1.0f;

#else
template <class D>
constexpr float kXUnitOf = 1.0f;
#endif

// E2M1. Element 2k is byte k's low nibble.
// Load: every E2M1 value is a bfloat16 (sign, exponent, one mantissa bit), so two 16-entry byte
// tables (the bf16's low and high byte per nibble, sign included: -0 stays -0) looked up with
// vpshufb give the bf16 of 32 nibbles at once, and a bf16 in the high half of a 32-bit lane is
// the float: the exact values, unit 1, so the products are w x as the scalar order has them. The
// 16 bytes go to both 128-bit lanes and one in-lane vpshufb places them so that the tables' output,
// interleaved into words (vpunpck{l,h}bw), holds v[0] lane i in the low half of dword i and v[1]
// lane i in its high half (v[2], v[3] likewise): a shift and a mask make the floats, with no
// cross-lane permute. 6 shuffles and 3 shifts on Zen 3's two shuffle pipes, and 3 masks, per 32
// weights. It replaced two Loads (session 44): the same tables unpacked with zero into lane order
// by 4 cross-lane permutes (15 shuffles), and session 42's codes 2 w as int8 converted to float
// (2 shuffles, 4 shifts, 4 masks and 4 conversions, with +0 for -0). In a copy of the one-row loop
// (one thread, 256 KiB of weights in L2, 3.0 GHz, same bits) 6.1-6.4 -> 6.6-6.8 GB/s; bench_weights
// fp4, one thread in cache, 6.2-6.5 -> 6.7-7.0 in its fast rounds (docs/WEIGHTS.md, session 44).
// The same loop with the Load replaced by one mask ran at ~10 GB/s: the block's FMA chain on the
// row's one accumulator (4 cycles) and the products are the rest of the bound.
struct DecFp4 {
#if CEDAR_QUANT_VBMI
  // Blocks b and b + 1 (32 packed bytes) on 16 lanes, through a float table: vpermps reads only
  // the low 4 bits of each index dword, so the 16 E2M1 values as floats (DecodeE2M1: -0 stays -0)
  // are one register and a nibble needs no mask. Elements 16 q .. 16 q + 15 of the pair are the 8
  // bytes at 8 q, broadcast to every qword; one vpmultishiftqb copies, into byte 0 of dword i, the
  // 8 bits from bit 4 i of the 64 broadcast bits (qword k holds dwords 2 k and 2 k + 1: offsets
  // 8 k and 8 k + 4), so element i's nibble is in bits 0-3, and vpermps gives the float: v[q] lane
  // i = element 16 q + i, the order Step16 takes. The values of Load, so the same bits, in 8 vector
  // operations per 64 weights besides 4 broadcast loads. Session 50 replaced with it the nibble
  // split, two vpshufb bf16 tables and PairFloats' two-source byte permutes, shifts and masks (12
  // operations): bench_weights --rows 512 --cols 4096 --reps 300 --threads 1 (in cache, AVX-512
  // EPYC, Zen 5), three rounds in turn, fp4 14.6-14.9 -> 17.1-17.4 GB/s with a vpermb placing the
  // bytes and a vpsrlvd shifting by the parity (10 operations), then 16.9-17.1 -> 17.6-17.9 (four
  // rounds) with the broadcast and vpmultishiftqb.
  static constexpr bool kPair16 = true;
  struct Tables {
    alignas(64) float values[16];  // [E2M1 code]
    alignas(64) uint8_t bit_offset[64];  // vpmultishiftqb's control: byte 0 of dword i <- bits 4 i..4 i + 7
  };
  static const Tables& Lut() {
    static const Tables t = [] {
      Tables u{};
      for (int n = 0; n < 16; ++n) u.values[n] = DecodeE2M1(uint8_t(n));
      for (int k = 0; k < 8; ++k) u.bit_offset[8 * k] = uint8_t(8 * k), u.bit_offset[8 * k + 4] = uint8_t(8 * k + 4);
      return u;
    }();
    return t;
  }
  __m512 values = _mm512_load_ps(Lut().values);
  __m512i bit_offset = _mm512_load_si512(Lut().bit_offset);
  void LoadPair(const uint8_t* row, int64_t b, __m512 v[4]) const {
    const uint8_t* p = row + b * (B / 2);
    for (int q = 0; q < 4; ++q) {
      const __m512i bytes = _mm512_broadcastq_epi64(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + 8 * q)));
      v[q] = _mm512_permutexvar_ps(_mm512_multishift_epi64_epi8(bit_offset, bytes), values);
    }
  }
#else
  static constexpr bool kPair16 = false;
#endif
  static constexpr int64_t kBlockBytes = 16;  // stored bytes of a block of 32
  static constexpr int64_t kPrefetch = kPrefetchBytes;
  static constexpr bool kScaled = true;
  // No Load16: joining the 8-wide quarters into 16 lanes cost more than the FMAs it saved
  // (bench_weights in cache: 3.8 GB/s against 5.9 on the 8-wide Step). LoadPair (VBMI) does
  // it with byte permutes: 5.2-6.3 -> 11.9 GB/s (session 24).
  static constexpr bool kWide = false;
  static constexpr float kLoadUnit = 1.0f;  // Load's values are the weights themselves
  const float* e8m0 = E8m0Floats();
  // bf16 bits of E2M1 nibble i: 0, 0.5, 1, 1.5, 2, 3, 4, 6 = 0x0000, 0x3F00, 0x3F80, 0x3FC0, 0x4000,
  // 0x4040, 0x4080, 0x40C0; nibbles 8..15 the same with the sign bit 0x8000.
  __m256i lo_tab = _mm256_setr_epi8(0, 0, int8_t(0x80), int8_t(0xC0), 0, 0x40, int8_t(0x80), int8_t(0xC0), 0, 0, int8_t(0x80),
                                    int8_t(0xC0), 0, 0x40, int8_t(0x80), int8_t(0xC0), 0, 0, int8_t(0x80), int8_t(0xC0), 0, 0x40,
                                    int8_t(0x80), int8_t(0xC0), 0, 0, int8_t(0x80), int8_t(0xC0), 0, 0x40, int8_t(0x80), int8_t(0xC0));
  __m256i hi_tab = _mm256_setr_epi8(0, 0x3F, 0x3F, 0x3F, 0x40, 0x40, 0x40, 0x40, int8_t(0x80), int8_t(0xBF), int8_t(0xBF), int8_t(0xBF),
                                    int8_t(0xC0), int8_t(0xC0), int8_t(0xC0), int8_t(0xC0), 0, 0x3F, 0x3F, 0x3F, 0x40, 0x40, 0x40, 0x40,
                                    int8_t(0x80), int8_t(0xBF), int8_t(0xBF), int8_t(0xBF), int8_t(0xC0), int8_t(0xC0), int8_t(0xC0),
                                    int8_t(0xC0));
  DecFp4() {}  // (written out: see BytesToDwordTops())
  static const uint8_t* Row(const WeightView& w, int64_t r) { return static_cast<const uint8_t*>(w.data) + r * (w.cols / 2); }
  static const void* Scales(const WeightView& w, int64_t r) { return static_cast<const uint8_t*>(w.scales) + r * Blocks(w.cols); }
  float Scale(const void* p, int64_t b) const { return e8m0[static_cast<const uint8_t*>(p)[b]]; }
  // Dword i (0..3) of lane L (0, 1) holds bytes a, a + 4, a, a + 4 with a = 8 (i / 2) + 2 L + i % 2:
  // after the nibble split, elements 2a, 2a + 8, 2a + 1, 2a + 9. So dword j of lane L of the
  // interleaved table output is element 4 L + j in its low word and 8 + 4 L + j in its high word
  // (w0; w1 the same + 16).
  __m256i order = _mm256_setr_epi8(0, 4, 0, 4, 1, 5, 1, 5, 8, 12, 8, 12, 9, 13, 9, 13, 2, 6, 2, 6, 3, 7, 3, 7, 10, 14, 10, 14, 11, 15,
                                   11, 15);
  __m256i nib = _mm256_set1_epi8(0x0F);
  __m256i high_words = _mm256_set1_epi32(int(0xFFFF0000u));
  void Load(const uint8_t* row, int64_t b, __m256 v[4]) const {
    const __m256i p = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + b * (B / 2))));
    const __m256i t = _mm256_shuffle_epi8(p, order);  // dword: bytes a, a + 4, a, a + 4
    // Nibble indices: the low words keep the low nibbles (a, c), the high words take the high ones.
    const __m256i n = _mm256_and_si256(_mm256_blend_epi16(t, _mm256_srli_epi32(t, 4), 0xAA), nib);
    const __m256i lb = _mm256_shuffle_epi8(lo_tab, n), hb = _mm256_shuffle_epi8(hi_tab, n);
    // bf16 words per lane L: w0 = elements 4L + j, 8 + 4L + j alternating (j = 0..3); w1 the same + 16.
    const __m256i w0 = _mm256_unpacklo_epi8(lb, hb), w1 = _mm256_unpackhi_epi8(lb, hb);
    v[0] = _mm256_castsi256_ps(_mm256_slli_epi32(w0, 16));
    v[1] = _mm256_castsi256_ps(_mm256_and_si256(w0, high_words));
    v[2] = _mm256_castsi256_ps(_mm256_slli_epi32(w1, 16));
    v[3] = _mm256_castsi256_ps(_mm256_and_si256(w1, high_words));
  }
};

inline float HSum(__m256 v) {  // fixed pairwise order
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
}

// The per-block step shared by full and tail blocks: acc += (w . x over 32) * scale.
template <bool kScaled>
inline __m256 Step(const __m256 v[4], const float* xp, __m256 s, __m256 acc) {
  __m256 t0 = _mm256_mul_ps(v[0], _mm256_loadu_ps(xp));
  __m256 t1 = _mm256_mul_ps(v[1], _mm256_loadu_ps(xp + 8));
  t0 = _mm256_fmadd_ps(v[2], _mm256_loadu_ps(xp + 16), t0);
  t1 = _mm256_fmadd_ps(v[3], _mm256_loadu_ps(xp + 24), t1);
  return kScaled ? _mm256_fmadd_ps(_mm256_add_ps(t0, t1), s, acc) : _mm256_add_ps(acc, _mm256_add_ps(t0, t1));
}

#if CEDAR_QUANT_AVX512
// Step on 16 lanes: t lanes 0-7 are Step's t0 and lanes 8-15 its t1, computed by the same
// multiply and FMA; the fold t0 + t1 and the accumulation are Step's. Same bits as Step.
// Step16's products of one block: lane i = v[0][i] x[i], then + v[1][i] x[16 + i] by one FMA.
inline __m512 Products16(const __m512 v[2], const float* xp) {
  return _mm512_fmadd_ps(v[1], _mm512_loadu_ps(xp + 16), _mm512_mul_ps(v[0], _mm512_loadu_ps(xp)));
}
template <bool kScaled>
inline __m256 Step16(const __m512 v[2], const float* xp, __m256 s, __m256 acc) {
  const __m512 t = Products16(v, xp);
  const __m256 u = _mm256_add_ps(_mm512_castps512_ps256(t), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(t), 1)));
  return kScaled ? _mm256_fmadd_ps(u, s, acc) : _mm256_add_ps(acc, u);
}
#endif

// Decode's one-row products read a thread's slice as kSpreadOf<D> equal parts side by side (row
// i of every part at once; on AVX-512 with the decoder's prefetch in each stream) instead of in address
// order: on the AVX-512 EPYC (Zen 5, 2 cores) a products-only pass over medium's decode shapes
// streamed BF16 38-52 -> 47-61 GB/s and INT8 (compute bound there) 38-51 -> 45-58 with 2 parts,
// alternating, and `cedar bench` medium decode INT8 58 -> 70-73 tokens/s (4 parts: 65-67),
// BF16 within its noise (48-54 either way). On an AVX2 EPYC (Zen 3 VM, 2 cores, ~20-35 GB/s;
// the same kind of pass, each variant over the read probe taken beside it) BF16 streamed
// 0.74-0.95 of the probe as 4 parts without software prefetch against 0.63-0.71 in address
// order with it (4 parts with prefetch 0.78, 2 parts 0.74-0.81); INT8 was compute bound there
// (~0.7 with or without parts) until its Load lost the cross-lane shuffle: with it and 4 parts, a
// products-only pass over medium's decode shapes (one row, 2 threads) streamed a median 21.9
// GB/s (8 processes, 18.8-24.2) before and 26.0 (21.3-27.9) after; 4 parts with the old Load
// 23.2 (session 21). FP8 likewise: one thread, one row against a 512 x 2048 FP8 matrix in cache
// (compute bound), 8.9 / 9.0 / 9.0 GB/s in address order with the old Load -> 10.0 / 10.1 / 9.9
// with BytesToDwordTops and 4 parts, alternating. FP4 (session 42's Load) keeps address order:
// bench_weights --rows 2048 --cols 4096 --from-memory-mib 1024, two threads, three rounds in turn,
// 12.7 / 12.8 / 6.7 GB/s against 10.4-11.0 with 4 parts (in cache, one thread, 4 parts ~5% ahead). FP8 on
// AVX-512 with VBMI (LoadPair) takes 2 parts: one thread in cache 22.6-22.7 -> 24.3-24.5 GB/s
// (1 part: no change), two threads from memory 37-41 -> 44-46 in 2 of 3 alternating rounds; FP4
// (LoadPair) likewise, 2 parts against 1 from memory on two threads 18.6 / 23.9 / 23.6 against
// 18.2 / 14.0 / 17.9 GB/s, in cache no difference (session 24).
// BF16 on AVX-512 reads 4 parts, as F32's MatVec does (session 31): `cedar bench` medium bf16
// decode at batch 1, 2 and 4 parts alternating token by token in one process, median step ms
// 22.1 / 20.5, 22.4 / 20.7, 22.8 / 20.9, 23.3 / 20.9, 28.4 / 26.8 (with the prefetch), 22.4 / 21.1,
// 24.0 / 21.4, 24.2 / 21.7, 25.1 / 22.4 (without), two runs even or slower (24.5 / 24.6, 26.2 /
// 28.4); at 4 parts the prefetch changes nothing. INT8 at 4 parts was 9% slower with its prefetch
// and no faster without; FP8 / FP4 on BF16 activations at 3 or 4 parts 8-10% slower with
// their T0 prefetch 4 KiB ahead (docs/WEIGHTS.md; with NTA 2 KiB ahead 4 parts won: matmul_bf16a.cpp).
// Each row keeps its own accumulator: the bits do not change.
template <class D>
constexpr int kSpreadOf = kQuantAvx512 ? (std::is_same_v<D, DecBf16> ? 4 : std::is_same_v<D, DecI8> || D::kPair16 ? 2 : 1)
                                       : (std::is_same_v<D, DecFp4> ? 1 : 4);
// Whether decode's one-row products prefetch in software (the parts' streams do better without
// on the AVX2 machine above; the AVX-512 measurements were taken with it).
template <class D>
constexpr bool kOneRowPrefetchOf = kQuantAvx512 || kSpreadOf<D> == 1;
// How far ahead decode's one-row products prefetch (few-row products keep D::kPrefetch): BF16 on
// AVX-512, 4 parts, 2 KiB (session 31). A driver alternating one-row BF16 products through
// MatmulMany with a plain 4-stream F32 FMA loop over the same memory (2 threads, 1 GiB of copies,
// the memory's fast phase), products' median rate over the loop's: 4 KiB 0.80-0.85, none
// 0.90-0.92, 1 KiB 0.89-0.97, 2 KiB 0.95-0.96 (2048 x 4096 bf16; other shapes alike). In
// `cedar bench` medium bf16 decode, steps alternating token by token in one process, 4 KiB / 2 KiB:
// 22.8 / 20.2, 22.1 / 20.0, 20.3 / 18.7, 25.5 / 21.9, 22.4 / 20.1, 32.1 / 31.1 ms (1 KiB: -5 to -9%;
// 3 KiB: -2 to -3%; none: as 4 KiB). INT8, and FP8 / FP4 on BF16 activations (then 2 parts, T0), at
// 2 KiB: 2-5% slower.
template <class D>
constexpr int64_t kOneRowPrefetchBytesOf = kQuantAvx512 && std::is_same_v<D, DecBf16> ? 2048 : D::kPrefetch;
// Decode's one-row products do not prefetch INT8's block scales (a separate array). With F32
// scales (4 bytes per 32 weight bytes) one prefetch per line of scales, as far ahead in blocks as
// the weights, helped (session 32: medium int8 decode, steps alternating in one process, 14.84 ->
// 14.00 and 14.76 -> 14.11 ms a step); with bfloat16 scales (2 bytes) it hurts (session 37:
// `bench_weights --rows 2048 --cols 4096 --threads 2 --from-memory-mib 1024`, median product
// 184-202 us with it, once per 32 blocks, against 146-156 without, three rounds in turn; once per
// 16 blocks or twice as far ahead: 183-209).
constexpr int64_t kSpreadMinRows = 16;  // rows per part at least, else address order
// Whether 2-4 rows of x (Rows' R = 4 or 2 weight rows per Block) take those weight rows from R
// parts of the slice instead of R adjacent rows, as the F32 few-row kernel does (session 19).
// AVX2 EPYC (Zen 3 VM, 2 cores), a products-only pass over medium's shapes through MatmulMany
// (dense at N rows, 8 experts at NE rows), the two variants in alternating processes, ms per
// pass: BF16 N=1 NE=2 78 / 74 / 79 / 67 -> 59 / 65 / 66 / 59; N=4 NE=4 88 / 79 / 79 / 99 ->
// 70 / 69 / 74 / 134 (one outlier); N=8 NE=2 120 / 127 / 146 -> 110 / 119 / 112. INT8 (compute
// bound) N=1 NE=2 47 / 48 / 48 / 48 -> 47 / 41 / 49 / 42. FP8 (QuantizeWeight of random
// weights, same pass) N=1 NE=2 93 / 69 / 63 / 68 -> 57 / 44 / 44 / 53. FP4 keeps address order:
// N=1 NE=2 no change (medians of nine passes 65 -> 64) and N=4 NE=4 86 / 90 -> 97 / 92.
template <class D>
constexpr bool kFewRowsSpreadOf = std::is_same_v<D, DecBf16> || std::is_same_v<D, DecI8> || std::is_base_of_v<DecFp8, D>;  // DecFp8X too

// N rows of x (stride in) against weight rows [r, r + R): y[n * ys + k]. Row and scale pointers
// are computed once, so the block loop holds only the accumulators, the decoded block and the
// decoder's constants (N * R + 4 + 3 registers at most for the shapes Rows picks).
// The partial last block of rows [r, r + R), zero-padded (out of line: its buffers made every
// call of Block set up a realigned stack frame).
template <class D, int N, int R>
__attribute__((noinline)) void TailBlock(const D& d, const float* x, const WeightView& w, int64_t r, int64_t rs,
                                         const void* const* sc, __m256 (&acc)[N][R]) {
  const int64_t in = w.cols, nb = in / B;
  alignas(32) float wb[B], xb[B];
  for (int k = 0; k < R; ++k) {
    std::fill(wb, wb + B, 0.0f);
    for (int64_t c = nb * B; c < in; ++c) wb[c - nb * B] = RawAt(w, r + k * rs, c) * D::kLoadUnit;  // as Load gives it
    const __m256 v[4] = {_mm256_load_ps(wb), _mm256_load_ps(wb + 8), _mm256_load_ps(wb + 16), _mm256_load_ps(wb + 24)};
    const __m256 s = _mm256_set1_ps(d.Scale(sc[k], nb));
    for (int n = 0; n < N; ++n) {
      std::fill(xb, xb + B, 0.0f);
      std::copy(x + n * in + nb * B, x + n * in + in, xb);
      acc[n][k] = Step<D::kScaled>(v, xb, s, acc[n][k]);
    }
  }
}

#if CEDAR_QUANT_AVX512
// Decode's one-row product over two parts (kSpreadOf): blocks [0, returned) of rows row[0] and
// row[1] with both rows' Step16 folds and accumulations done by one 512-bit shuffle pair, add and
// FMA instead of an extract, add and FMA per row. Lanes 0-7 are row 0's Step16 u and accumulator,
// lanes 8-15 row 1's: the same operations on the same values, so the same bits (acc[0] / acc[1]
// get the two halves). The folds were ~20% of FP8's block loop: a one-thread copy of the loop
// over two FP8 rows in L2 ran 27.8 GB/s with Step16 and 30.9 with this (same bits); for INT8 the
// same trial gave ~2%. Decoders with LoadPair stop before an odd last block, Load16 ones take all.
template <class D, _mm_hint kHint>
int64_t TwoRowBlocks(const D& d, const float* x, const uint8_t* const* row, const void* const* sc, int64_t nb,
                     const uint8_t* pf_end, __m256 (&acc)[1][2]) {
  __m512 a = _mm512_setzero_ps();  // [row 0's 8 lanes, row 1's 8 lanes]
  auto fold_scaled = [&](__m512 t0, __m512 t1, __m512 s) {  // s: [row 0's scale x8, row 1's x8]
    const __m512 u = _mm512_add_ps(_mm512_shuffle_f32x4(t0, t1, 0x44), _mm512_shuffle_f32x4(t0, t1, 0xEE));
    if constexpr (D::kScaled) {
      a = _mm512_fmadd_ps(u, s, a);
    } else {
      a = _mm512_add_ps(a, u);
    }
  };
  auto fold = [&](__m512 t0, __m512 t1, int64_t b) {
    __m512 s = _mm512_setzero_ps();
    if constexpr (D::kScaled)
      s = _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_set1_ps(d.Scale(sc[0], b))), _mm256_set1_ps(d.Scale(sc[1], b)), 1);
    fold_scaled(t0, t1, s);
  };
  constexpr int64_t kStep = D::kPair16 ? 2 : 1;
  const int64_t end = nb / kStep * kStep;
  auto prefetch = [&](int64_t b) {
    for (int k = 0; k < 2; ++k) {
      const uint8_t* pf = row[k] + b * D::kBlockBytes + kOneRowPrefetchBytesOf<D>;
      if (kOneRowPrefetchOf<D> && pf < pf_end) _mm_prefetch(reinterpret_cast<const char*>(pf), kHint);
    }
  };
  int64_t b = 0;
  if constexpr (std::is_same_v<D, DecI8>) {
    // INT8's bfloat16 scales 16 blocks at a time per row, each block's pair picked by one
    // two-source permute (lane j of row 0's in the low 8 lanes, of row 1's in the high 8): the
    // same floats in the same FMA, so the same bits. Against `fold`'s scalar widen and broadcast per
    // block and row (session 37, `bench_weights --rows 2048 --cols 4096 --threads 1`, separate
    // processes in turn, median product): 225 / 281 / 261 us against 233 / 328 / 298.
    for (; b + 16 <= end; b += 16) {
      const __m512 s0 = DecI8::Scales16(sc[0], b), s1 = DecI8::Scales16(sc[1], b);
      __m512i idx = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 16, 16, 16, 16, 16, 16, 16, 16);
      const __m512i one = _mm512_set1_epi32(1);
#pragma GCC unroll 4
      for (int64_t j = 0; j < 16; ++j, idx = _mm512_add_epi32(idx, one)) {
        prefetch(b + j);
        __m512 v0[2], v1[2];
        d.Load16(row[0], b + j, v0);
        d.Load16(row[1], b + j, v1);
        fold_scaled(Products16(v0, x + (b + j) * B), Products16(v1, x + (b + j) * B), _mm512_permutex2var_ps(s0, idx, s1));
      }
    }
  }
  for (; b < end; b += kStep) {
    prefetch(b);
#if CEDAR_QUANT_VBMI
    if constexpr (D::kPair16) {
      __m512 v0[4], v1[4];
      d.LoadPair(row[0], b, v0);
      d.LoadPair(row[1], b, v1);
      fold(Products16(v0, x + b * B), Products16(v1, x + b * B), b);
      fold(Products16(v0 + 2, x + (b + 1) * B), Products16(v1 + 2, x + (b + 1) * B), b + 1);
      continue;
    }
#endif
    if constexpr (D::kWide) {
      __m512 v0[2], v1[2];
      d.Load16(row[0], b, v0);
      d.Load16(row[1], b, v1);
      fold(Products16(v0, x + b * B), Products16(v1, x + b * B), b);
    }
  }
  acc[0][0] = _mm512_castps512_ps256(a);
  acc[0][1] = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1));
  return end;
}
#endif

template <class D, int N, int R, _mm_hint kHint>
void Block(const D& d, const float* x, const WeightView& w, int64_t r, float* y, int64_t ys, const uint8_t* pf_end,
           int64_t rs = 1) {
  const int64_t in = w.cols, nb = in / B;
  __m256 acc[N][R];
  const void* sc[R];
  const uint8_t* row[R];
  for (int k = 0; k < R; ++k) {
    sc[k] = D::Scales(w, r + k * rs);
    row[k] = D::Row(w, r + k * rs);
  }
  for (int n = 0; n < N; ++n)
    for (int k = 0; k < R; ++k) acc[n][k] = _mm256_setzero_ps();
  int64_t b0 = 0;
#if CEDAR_QUANT_AVX512
  if constexpr (N == 1 && R == 2 && (D::kWide || D::kPair16)) b0 = TwoRowBlocks<D, kHint>(d, x, row, sc, nb, pf_end, acc);
#endif
  // Software prefetch D::kPrefetch bytes ahead (kOneRowPrefetchBytesOf at one row of x) in each
  // weight stream (at decode, that runs into the stream's next row when a row ends: rows r + k * rs
  // are contiguous per k): decode's rows are 0.25-2 KiB,
  // too short for the hardware prefetchers to ramp up per stream (see kOneRowR). Never past pf_end,
  // the end of this call's slice: the bytes there are another thread's (or nobody's next), and at
  // decode's 32-300 KiB slices the 4 KiB past the end were ~10% more bytes from memory.
  for (int64_t b = b0; b < nb; ++b) {
#pragma GCC unroll 4
    for (int k = 0; k < R; ++k) {
      const uint8_t* pf = row[k] + b * D::kBlockBytes + (N == 1 ? kOneRowPrefetchBytesOf<D> : D::kPrefetch);
      if ((N > 1 || kOneRowPrefetchOf<D>) && pf < pf_end) _mm_prefetch(reinterpret_cast<const char*>(pf), kHint);
    }
#if CEDAR_QUANT_VBMI
    if constexpr (D::kPair16) {  // blocks b and b + 1 together (each accumulator's order unchanged)
      if (b + 1 < nb) {
#pragma GCC unroll 4
        for (int k = 0; k < R; ++k) {
          __m512 v[4];
          d.LoadPair(row[k], b, v);
          const __m256 s0 = _mm256_set1_ps(d.Scale(sc[k], b)), s1 = _mm256_set1_ps(d.Scale(sc[k], b + 1));
#pragma GCC unroll 8
          for (int n = 0; n < N; ++n) {
            acc[n][k] = Step16<D::kScaled>(v, x + n * in + b * B, s0, acc[n][k]);
            acc[n][k] = Step16<D::kScaled>(v + 2, x + n * in + (b + 1) * B, s1, acc[n][k]);
          }
        }
        ++b;
        continue;
      }
    }
#endif
#pragma GCC unroll 4
    for (int k = 0; k < R; ++k) {
#if CEDAR_QUANT_AVX512
      if constexpr (D::kWide) {
        __m512 v[2];
        d.Load16(row[k], b, v);
        const __m256 s = _mm256_set1_ps(d.Scale(sc[k], b));
#pragma GCC unroll 8
        for (int n = 0; n < N; ++n) acc[n][k] = Step16<D::kScaled>(v, x + n * in + b * B, s, acc[n][k]);
        continue;
      }
#endif
      __m256 v[4];
      d.Load(row[k], b, v);
      const __m256 s = _mm256_set1_ps(d.Scale(sc[k], b));
#pragma GCC unroll 8
      for (int n = 0; n < N; ++n) acc[n][k] = Step<D::kScaled>(v, x + n * in + b * B, s, acc[n][k]);
    }
  }
  if (in % B) TailBlock<D, N, R>(d, x, w, r, rs, sc, acc);
  for (int n = 0; n < N; ++n)
    for (int k = 0; k < R; ++k) {
      const float sum = HSum(acc[n][k]);
      constexpr float kUnit = D::kLoadUnit * kXUnitOf<D>;  // the products' (DecFp8X: 1)
      y[n * ys + k * rs] = kUnit == 1.0f ? sum : sum * (1.0f / kUnit);
    }
}


// Weight rows [r0, r1) for N rows of x: R rows side by side (several weight streams in flight,
// accumulators within the 16 registers).
template <class D, int N, _mm_hint kHint>
void Rows(const float* x, const WeightView& w, int64_t r0, int64_t r1, float* y, int64_t ys, const uint8_t* pf_end) {
  constexpr int R = N == 1 ? kOneRowR : N <= 2 ? 4 : N <= 4 ? 2 : 1;
  const D d;
  int64_t r = r0;
  // The slice as S equal parts read side by side, row i of each at once: decode's one row
  // (kSpreadOf) and 2-4 rows whose Block holds R weight rows (kFewRowsSpreadOf).
  constexpr int S = N == 1 ? kSpreadOf<D> : kFewRowsSpreadOf<D> ? R : 1;
  if constexpr (S > 1) {
    if (r1 - r0 >= S * kSpreadMinRows) {
      const int64_t per = (r1 - r0) / S;
      for (int64_t i = 0; i < per; ++i) Block<D, N, S, kHint>(d, x, w, r0 + i, y + i, ys, pf_end, per);
      r = r0 + per * S;
    }
  }
  for (; r + R <= r1; r += R) Block<D, N, R, kHint>(d, x, w, r, y + (r - r0), ys, pf_end);
  for (; r < r1; ++r) Block<D, N, 1, kHint>(d, x, w, r, y + (r - r0), ys, pf_end);
}

template <class D>
void FewRowsT(const float* x, int n, const WeightView& w, int64_t r0, int64_t r1, float* y, int64_t ys) {
  constexpr int kGroup = 8;
  const int64_t blk = 64;  // weight rows per block: re-read from L2 by the next group of x rows
  const int64_t in = w.cols;
  if (r0 >= r1) return;
  // The slice's stored bytes are [start, end). Its first D::kPrefetch bytes are requested at once
  // (the loop's prefetches only run ahead of the loop, so without this the first 1-4 KiB of every
  // slice, i.e. of every thread's share of every product, arrived one demand miss at a time).
  const uint8_t* start = D::Row(w, r0);
  const uint8_t* end = D::Row(w, r1);
  for (const uint8_t* p = start; p < std::min(end, start + D::kPrefetch); p += 64) _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T0);
  // Up to 8 rows of x read each weight once: the prefetches are non-temporal (NTA), so the
  // streamed weights do not evict what decode reuses (activations, the attention's entries) from
  // the caches. More rows re-read each block of 64 weight rows from L2 for the next group: T0.
  if (n <= kGroup) {
    switch (n) {
      case 1: return Rows<D, 1, _MM_HINT_NTA>(x, w, r0, r1, y, ys, end);
      case 2: return Rows<D, 2, _MM_HINT_NTA>(x, w, r0, r1, y, ys, end);
      case 3: return Rows<D, 3, _MM_HINT_NTA>(x, w, r0, r1, y, ys, end);
      case 4: return Rows<D, 4, _MM_HINT_NTA>(x, w, r0, r1, y, ys, end);
      case 5: return Rows<D, 5, _MM_HINT_NTA>(x, w, r0, r1, y, ys, end);
      case 6: return Rows<D, 6, _MM_HINT_NTA>(x, w, r0, r1, y, ys, end);
      case 7: return Rows<D, 7, _MM_HINT_NTA>(x, w, r0, r1, y, ys, end);
      default: return Rows<D, 8, _MM_HINT_NTA>(x, w, r0, r1, y, ys, end);
    }
  }
  for (int64_t a = r0; a < r1; a += blk) {
    const int64_t e = std::min(r1, a + blk);
    for (int b0 = 0; b0 < n; b0 += kGroup) {
      const float* xb = x + int64_t(b0) * in;
      float* yb = y + int64_t(b0) * ys + (a - r0);
      switch (std::min(kGroup, n - b0)) {
        case 1: Rows<D, 1, _MM_HINT_T0>(xb, w, a, e, yb, ys, end); break;
        case 2: Rows<D, 2, _MM_HINT_T0>(xb, w, a, e, yb, ys, end); break;
        case 3: Rows<D, 3, _MM_HINT_T0>(xb, w, a, e, yb, ys, end); break;
        case 4: Rows<D, 4, _MM_HINT_T0>(xb, w, a, e, yb, ys, end); break;
        case 5: Rows<D, 5, _MM_HINT_T0>(xb, w, a, e, yb, ys, end); break;
        case 6: Rows<D, 6, _MM_HINT_T0>(xb, w, a, e, yb, ys, end); break;
        case 7: Rows<D, 7, _MM_HINT_T0>(xb, w, a, e, yb, ys, end); break;
        default: Rows<D, 8, _MM_HINT_T0>(xb, w, a, e, yb, ys, end); break;
      }
    }
  }
}

// Full blocks of one row to F32 (scaled), vectorised; the tail by RawAt.
template <class D>
void DecodeRowT(const WeightView& w, int64_t r, float* out) {
  const int64_t nb = w.cols / B;
  const D d;
  const void* sc = D::Scales(w, r);
  const uint8_t* row = D::Row(w, r);
  for (int64_t b = 0; b < nb; ++b) {
#if CEDAR_QUANT_VBMI
    if constexpr (D::kPair16) {  // the same floats as Load16 / Load, two blocks at a time
      if (b + 1 < nb) {
        __m512 v[4];
        d.LoadPair(row, b, v);
        const __m512 s[2] = {_mm512_set1_ps(d.Scale(sc, b)), _mm512_set1_ps(d.Scale(sc, b + 1))};
        for (int h = 0; h < 4; ++h) _mm512_storeu_ps(out + b * B + 16 * h, _mm512_mul_ps(v[h], s[h / 2]));
        ++b;
        continue;
      }
    }
#endif
#if CEDAR_QUANT_AVX512
    if constexpr (D::kWide) {
      __m512 v[2];
      d.Load16(row, b, v);
      const __m512 s = _mm512_set1_ps(d.Scale(sc, b));
      for (int h = 0; h < 2; ++h) _mm512_storeu_ps(out + b * B + 16 * h, _mm512_mul_ps(v[h], s));
      continue;
    }
#endif
    __m256 v[4];
    d.Load(row, b, v);
    const __m256 s = _mm256_set1_ps(d.Scale(sc, b) * (1.0f / D::kLoadUnit));
    for (int j = 0; j < 4; ++j) _mm256_storeu_ps(out + b * B + 8 * j, _mm256_mul_ps(v[j], s));
  }
  for (int64_t c = nb * B; c < w.cols; ++c) out[c] = RawAt(w, r, c) * ScaleOf(w, r, nb);
}

CEDAR_AVX2_END
#endif  // CEDAR_QUANT_AVX2

// Without AVX2 (a portable build): the vector paths' order in plain code, with the same bits. Per block
// of 32, lane i's t0 = w_i x_i then fma(w_16+i, x_16+i), t1 = w_8+i x_8+i then fma(w_24+i, x_24+i),
// and acc_i = fma(t0 + t1, scale, acc_i) (acc_i + (t0 + t1) unscaled); then HSum's pairing of the 8
// lanes. A partial last block is zero padded. std::fma keeps the compiler from contracting
// differently (no bare product here is ever added).
// Each weight row is decoded once to its unscaled values (RowValuesPortable) for every row of x, and
// the lanes' arithmetic is 8-wide loops. Element by element through RawAt, this path decoded
// medium's INT8 weights at 0.9 tokens/s against 56 on AVX-512 (docs/WEIGHTS.md, session 39). A
// portable build takes it only on CPUs without AVX2 (or with CEDAR_NO_AVX2 set).

// decode(c) for every code c < N, in a table built once (kept for the process).
template <int N>
const float* CodeTable(float (*decode)(uint8_t)) {
  auto* t = new float[N];
  for (int c = 0; c < N; ++c) t[c] = decode(uint8_t(c));
  return t;
}

// Row r's unscaled values, zero padded to whole blocks: v[Blocks(cols) * B]; s[b]: block b's scale.
inline __attribute__((always_inline)) void RowValuesPortable(const WeightView& w, int64_t r, float* v, float* s) {
  const int64_t in = w.cols, nb = Blocks(in);
  const uint8_t* codes = static_cast<const uint8_t*>(w.scales);  // FP8's and FP4's E8M0 scales
  switch (w.type) {
    case WeightType::kBF16: {
      const uint16_t* p = static_cast<const uint16_t*>(w.data) + r * in;
      for (int64_t c = 0; c < in; ++c) v[c] = Bf16ToFloat(p[c]);
      for (int64_t b = 0; b < nb; ++b) s[b] = 1.0f;
      break;
    }
    case WeightType::kI8: {
      const int8_t* p = static_cast<const int8_t*>(w.data) + r * in;
      for (int64_t c = 0; c < in; ++c) v[c] = float(p[c]);
      for (int64_t b = 0; b < nb; ++b) s[b] = I8ScaleAt(w.scales, r * nb + b);
      break;
    }
    case WeightType::kFP8: {
      static const float* const table = CodeTable<256>(DecodeE4M3);
      const uint8_t* p = static_cast<const uint8_t*>(w.data) + r * in;
      for (int64_t c = 0; c < in; ++c) v[c] = table[p[c]];
      const uint8_t* sc = codes + ((w.row0 + r) / B) * nb;  // one scale row per 32 weight rows
      for (int64_t b = 0; b < nb; ++b) s[b] = E8m0Floats()[sc[b]];
      break;
    }
    case WeightType::kFP4: {
      static const float* const table = CodeTable<16>(DecodeE2M1);
      const uint8_t* p = static_cast<const uint8_t*>(w.data) + r * (in / 2);
      for (int64_t k = 0; k < in / 2; ++k) {  // element 2k in byte k's low nibble, 2k + 1 in its high one
        v[2 * k] = table[p[k] & 0x0F];
        v[2 * k + 1] = table[p[k] >> 4];
      }
      if (in % 2) v[in - 1] = table[p[in / 2] & 0x0F];
      for (int64_t b = 0; b < nb; ++b) s[b] = E8m0Floats()[codes[r * nb + b]];
      break;
    }
    default:
      for (int64_t c = 0; c < in; ++c) v[c] = RawAt(w, r, c);
      for (int64_t b = 0; b < nb; ++b) s[b] = ScaleOf(w, r, b);
  }
  for (int64_t c = in; c < nb * B; ++c) v[c] = 0.0f;
}

// x . (one decoded weight row) in the order above; x holds `in` floats.
inline __attribute__((always_inline)) float OrderedDotPortable(const float* v, const float* s, bool scaled, const float* x, int64_t in) {
  float acc[8] = {};
  auto block = [&](const float* e, const float* xe, float sc) __attribute__((always_inline)) {
    // Lane by lane, no sum across lanes: vectorising it keeps every operation (omp simd, since
    // GCC otherwise unrolls the 8 lanes into scalar code first).
#pragma omp simd
    for (int i = 0; i < 8; ++i) {
      const float t0 = std::fma(e[16 + i], xe[16 + i], e[i] * xe[i]);
      const float t1 = std::fma(e[24 + i], xe[24 + i], e[8 + i] * xe[8 + i]);
      acc[i] = scaled ? std::fma(t0 + t1, sc, acc[i]) : acc[i] + (t0 + t1);
    }
  };
  const int64_t whole = in / B;
  for (int64_t blk = 0; blk < whole; ++blk) block(v + blk * B, x + blk * B, s[blk]);
  if (whole * B < in) {
    float xe[B] = {};
    std::copy(x + whole * B, x + in, xe);
    block(v + whole * B, xe, s[whole]);
  }
  float h[4];
  for (int j = 0; j < 4; ++j) h[j] = acc[j] + acc[4 + j];
  return (h[0] + h[2]) + (h[1] + h[3]);
}

void FewRowsPortable(const float* x, int n, const WeightView& w, int64_t r0, int64_t r1, float* y, int64_t ys) {
  thread_local std::vector<float> v, s;  // one weight row's values and block scales
  v.resize(size_t(Blocks(w.cols) * B));
  s.resize(size_t(Blocks(w.cols)));
  const bool scaled = w.type != WeightType::kBF16;
  for (int64_t r = r0; r < r1; ++r) {
    RowValuesPortable(w, r, v.data(), s.data());
    for (int b = 0; b < n; ++b) y[b * ys + (r - r0)] = OrderedDotPortable(v.data(), s.data(), scaled, x + b * w.cols, w.cols);
  }
}

// Row r scaled to F32 (out[cols]): value times its block's scale, as the vector paths' DecodeRowT.
void DecodeRowPortable(const WeightView& w, int64_t r, float* out) {
  thread_local std::vector<float> v, s;
  v.resize(size_t(Blocks(w.cols) * B));
  s.resize(size_t(Blocks(w.cols)));
  RowValuesPortable(w, r, v.data(), s.data());
  for (int64_t c = 0; c < w.cols; ++c) out[c] = v[c] * s[c / B];
}

}  // namespace

#if CEDAR_QUANT_AVX2 && !CEDAR_QUANT_AVX512
namespace {
std::atomic<bool> fp8_prescaled{true};  // SetFp8PrescaledActivations
}  // namespace
#endif

bool Fp8PrescaleApplies(const WeightView& w) {
#if CEDAR_QUANT_AVX2 && !CEDAR_QUANT_AVX512
  return w.type == WeightType::kFP8 && fp8_prescaled.load(std::memory_order_relaxed) && Avx2KernelsRun() &&
         !Bf16ActivationsApply(w);
#else
  (void)w;
  return false;
#endif
}

#if CEDAR_QUANT_AVX2 && !CEDAR_QUANT_AVX512
CEDAR_AVX2_BEGIN
bool XTimes2p120(const float* x, int64_t count, LineVector<float>& out) {
  out.resize(size_t(count));
  float* o = out.data();
  const __m256 k = _mm256_set1_ps(0x1p120f), limit = _mm256_set1_ps(256.0f), abs = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  __m256 bad = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= count; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    bad = _mm256_or_ps(bad, _mm256_cmp_ps(_mm256_and_ps(v, abs), limit, _CMP_NLT_UQ));
    _mm256_store_ps(o + i, _mm256_mul_ps(v, k));
  }
  if (_mm256_movemask_ps(bad)) return false;
  for (; i < count; ++i) {
    if (!(std::fabs(x[i]) < 256.0f)) return false;
    o[i] = x[i] * 0x1p120f;
  }
  return true;
}
CEDAR_AVX2_END

void Fp8XFewRows(const float* xs, int n, const WeightView& w, int64_t r0, int64_t r1, float* y, int64_t ys) {
  FewRowsT<DecFp8X>(xs, n, w, r0, r1, y, ys);
}
#else
bool XTimes2p120(const float*, int64_t, LineVector<float>&) { return false; }
void Fp8XFewRows(const float* xs, int n, const WeightView& w, int64_t r0, int64_t r1, float* y, int64_t ys) {
  QuantFewRows(xs, n, w, r0, r1, y, ys);  // not reached: Fp8PrescaleApplies is false
}
#endif

// y[b * ys + (r - r0)] = x[b, :] . w[r, :] for b < n (n <= kFewRowsMax), r in [r0, r1).
void QuantFewRows(const float* x, int n, const WeightView& w, int64_t r0, int64_t r1, float* y, int64_t ys) {
  if (Int8ActivationsApply(w)) return I8A8FewRows(x, n, w, r0, r1, y, ys);
  if (Bf16ActivationsApply(w)) return Bf16AFewRows(x, n, w, r0, r1, y, ys);
#if CEDAR_QUANT_AVX2
  if (Avx2KernelsRun()) switch (w.type) {
    case WeightType::kBF16: return FewRowsT<DecBf16>(x, n, w, r0, r1, y, ys);
    case WeightType::kI8: return FewRowsT<DecI8>(x, n, w, r0, r1, y, ys);
    case WeightType::kFP8: return FewRowsT<DecFp8>(x, n, w, r0, r1, y, ys);
    case WeightType::kFP4: return FewRowsT<DecFp4>(x, n, w, r0, r1, y, ys);
    default: break;
  }
#endif
  FewRowsPortable(x, n, w, r0, r1, y, ys);
}

void QuantDecodeRows(const WeightView& w, int64_t r0, int64_t n, float* out) {
  for (int64_t r = r0; r < r0 + n; ++r) {
    float* o = out + (r - r0) * w.cols;
#if CEDAR_QUANT_AVX2
    if (Avx2KernelsRun()) switch (w.type) {
      case WeightType::kBF16: DecodeRowT<DecBf16>(w, r, o); continue;
      case WeightType::kI8: DecodeRowT<DecI8>(w, r, o); continue;
      case WeightType::kFP8: DecodeRowT<DecFp8>(w, r, o); continue;
      case WeightType::kFP4: DecodeRowT<DecFp4>(w, r, o); continue;
      default: break;
    }
#endif
    DecodeRowPortable(w, r, o);
  }
}

// ~4 MiB of F32 a panel: every panel's tiles stream all of x's packed rows again (16 MB for a
// 2048-row chunk at in = 2048), so fewer, larger panels halve that traffic; the decoded panel need
// not stay in L2 (the F32 path streams its weight tiles from memory too). 1 MiB panels ran 3-13%
// under F32 on medium's shapes with 2048 rows, 4 MiB within 2% of it (docs/WEIGHTS.md, session 16).
int64_t TypedPanelRows(int in) { return std::max<int64_t>(16, (int64_t(1) << 20) / std::max(1, in) / 16 * 16); }

void MatmulColumnsTyped(const MatmulJob& j, int col0, int col1, const PackedRows* px) {
  const WeightView& w = j.wv;
  if (j.in <= 0) {
    for (int r = 0; r < j.n; ++r) std::fill(j.y + size_t(r) * j.out + col0, j.y + size_t(r) * j.out + col1, 0.0f);
    return;
  }
  if (j.n <= kFewRowsMax) return QuantFewRows(j.x, j.n, w, col0, col1, j.y + col0, j.out);
  // Many rows: panels of weight rows decoded once (~4 MiB of F32, TypedPanelRows), then the
  // prefill GEMM (gemm_prefill.h, as for F32 weights) runs over all rows of x.
  thread_local std::vector<float> panel;
  const int64_t rows_per = TypedPanelRows(j.in);
  for (int64_t a = col0; a < col1; a += rows_per) {
    const int64_t m = std::min<int64_t>(rows_per, col1 - a);
    panel.resize(size_t(m) * size_t(j.in));
    QuantDecodeRows(w, a, m, panel.data());
    if (px)
      GemmPackedRows(*px, panel.data(), j.y + a, int(m), j.out);
    else
      GemmPrefillRows(j.x, panel.data(), j.y + a, j.in, int(m), j.out, 0, j.n);
  }
}

}  // namespace cedar::kernels::internal

namespace cedar::kernels {
void SetFp8PrescaledActivations(bool on) {
#if CEDAR_QUANT_AVX2 && !CEDAR_QUANT_AVX512
  internal::fp8_prescaled.store(on);
#endif
  (void)on;
}

bool ProductsScaleWeights(WeightType t) {
#if CEDAR_QUANT_AVX2
  using namespace internal;
  if (!Avx2KernelsRun()) return false;
  if (t == WeightType::kI8) return DecI8::kLoadUnit != 1.0f;
#endif
  (void)t;
  return false;
}

void DecodeRows(const WeightView& w, int64_t r0, int64_t n, float* out) {
  if (w.type == WeightType::kF32) {
    std::copy(static_cast<const float*>(w.data) + r0 * w.cols, static_cast<const float*>(w.data) + (r0 + n) * w.cols, out);
    return;
  }
  internal::QuantDecodeRows(w, r0, n, out);
}
}  // namespace cedar::kernels
