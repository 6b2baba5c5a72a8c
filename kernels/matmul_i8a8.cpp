// INT8 and FP4 weights times 8-bit activations (issue 20, `--int8-activations`): decode's and
// batched decode's INT8 and FP4 products on 8-bit dot products (AVX-512 VNNI's vpdpbusd, AVX2's
// vpmaddubsw), so a block of 64 weights costs one multiply-add instruction instead of eight F32
// FMAs and the product runs at memory speed where the F32-activation kernel (matmul_quant.cpp)
// is compute bound.
//
// FP4 E2M1 weights (the released experts) take the same path exactly: every E2M1 value times 2
// is an integer in [-12, 12], so a packed FP4 block with E8M0 scale s is read as the INT8 block
// q_w = 2 * e2m1 with scale s / 2 (a power of two: exact). Its products are, by definition, the
// INT8 path's on that INT8 weight, bit for bit (kernels_i8a8_test builds the weight and checks).
//
// Each row of x is quantised alone, per block of 32 along the input as the weights are:
//   s_a = amax / 127, q = nearbyint(x * (127 / amax)) (|q| <= 127; an all-zero block: q = 0, s_a = 0).
// A weight block's dot product sum(w_q * q) is then an exact integer, and the order of the float
// part is fixed (so the bits do not depend on the ISA or on the rows beside a row):
//   blocks go in pairs (2p, 2p + 1) over 16 lanes: lane i < 8 holds block 2p's bytes 4i..4i+3,
//   lane 8 + i block 2p + 1's; lane value d (an exact int32) -> acc[p % 2]_lane = fma(float(d),
//   s_w[b] * s_a[b], acc[p % 2]_lane) (two accumulators, so the FMA latency does not bound the
//   loop); an odd last block has a zero partner. The result is HSum16(acc[0] + acc[1]) with
//   HSum16(a) = HSum8(a[0..7] + a[8..15]), HSum8 = ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7)).
// vpdpbusd multiplies unsigned by signed bytes: it is given |q| and w with q's sign (|w| <= 127,
// so the negation cannot overflow). AVX2 gets the same int32 lanes from vpsignb + vpmaddubsw (pairs
// of |q| * +-w: at most 2 * 127 * 127, no saturation) + vpmaddwd, and the same float part, so the
// same bits; without AVX2 a scalar loop computes them. A portable build (no -march) has both and
// takes the AVX2 kernels where the CPU has AVX2 and FMA (kernels/avx2_runtime.h).
// Only inputs that are a multiple of 32 take this path (the callers fall back otherwise).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "kernels/avx2_runtime.h"
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)
#include <immintrin.h>
#define CEDAR_I8A8_VNNI 1
#elif defined(CEDAR_AVX2_KERNELS)  // AVX2 builds, and portable ones where the CPU has it (Avx2KernelsRun)
#define CEDAR_I8A8_AVX2 1
#include "kernels/lane16_avx2.h"
#endif

#include "kernels/cpu_internal.h"
#include "kernels/hsum_rows_avx512.h"
#include "kernels/quant_formats.h"
#include "kernels/weight_view.h"

namespace cedar::kernels {

namespace internal {
namespace {

std::atomic<bool> int8_activations{false};

constexpr int B = kQuantBlock;

using QuantRow = I8A8Rows::Row;

// E8M0 code -> 2^(code - 127) / 2 (NaN for 0xFF), built once: SrcFp4's block scales.
const float* HalfE8m0Table() {
  static const auto* t = [] {
    auto* a = new float[256];
    for (int i = 0; i < 256; ++i) a[i] = DecodeE8M0(uint8_t(i)) * 0.5f;
    return a;
  }();
  return t;
}

// A weight row as the kernels read it: INT8 values q_w, 32 per block, and one scale per block.
//   Row(w, r) / Scales(w, r): row r's first byte and its scales (once per row); Scale(p, b):
//   block b's scale; Q(row, e): element e's q_w (the scalar definition); VNNI builds: Block(row, b):
//   block b's 32 q_w in element order (an odd last block), Pair512(row, p): blocks 2p and 2p + 1 in
//   the pair layout. On AVX2 the sources are not templated over: INT8 runs RowsAvx2 on the stored
//   bytes, FP4 RowsAvx2Fp4 on Fp4Halves.
// SrcI8 reads the stored INT8 bytes and bfloat16 scales; SrcFp4 the packed E2M1 nibbles (element 2k
// in byte k's low nibble) as q_w = 2 * e2m1 and the E8M0 scales halved (module comment).
struct SrcI8 {
  static constexpr int64_t kBlockBytes = 32;  // stored bytes of a block of 32 weights
  static constexpr int64_t kScaleBytes = 2;  // stored bytes of a block's scale (bfloat16)
  static const uint8_t* Row(const WeightView& w, int64_t r) { return static_cast<const uint8_t*>(w.data) + r * w.cols; }
  static const void* Scales(const WeightView& w, int64_t r) { return static_cast<const uint16_t*>(w.scales) + r * ((w.cols + B - 1) / B); }
  float Scale(const void* p, int64_t b) const { return I8ScaleAt(p, b); }
  static int Q(const uint8_t* row, int64_t e) { return int8_t(row[e]); }
#if CEDAR_I8A8_VNNI
  __m256i Block(const uint8_t* row, int64_t b) const { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + b * B)); }
  __m512i Pair512(const uint8_t* row, int64_t p) const { return _mm512_loadu_si512(row + p * 64); }
  __m128 PairScales(const void* sc, int64_t p) const {  // lanes 0, 1: the scales of blocks 2p, 2p + 1
    int32_t two;  // the pair's two bfloat16s, widened to floats by a shift
    std::memcpy(&two, static_cast<const uint16_t*>(sc) + 2 * p, 4);
    return _mm_castsi128_ps(_mm_slli_epi32(_mm_cvtepu16_epi32(_mm_cvtsi32_si128(two)), 16));
  }
#endif
};

#if CEDAR_I8A8_VNNI || CEDAR_I8A8_AVX2
CEDAR_AVX2_BEGIN
// FP4's q_w bytes from packed nibbles. Per 128-bit half (one block of 16 packed bytes): u =
// elements 0-15 (byte k's low nibble, then its high one), v = elements 16-31: one vpshufb per
// nibble, then interleaved. Apart from SrcFp4, whose scalar parts the plain loops of a portable
// build use, and with its constructor written out, so its tables are set under the target pragma.
struct Fp4Halves {
  __m256i tab = _mm256_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12, 0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4,
                                 -6, -8, -12);
  __m256i nib = _mm256_set1_epi8(0x0F);
  Fp4Halves() {}
  void operator()(__m256i packed, __m256i& u, __m256i& v) const {
    const __m256i lo = _mm256_shuffle_epi8(tab, _mm256_and_si256(packed, nib));
    const __m256i hi = _mm256_shuffle_epi8(tab, _mm256_and_si256(_mm256_srli_epi16(packed, 4), nib));
    u = _mm256_unpacklo_epi8(lo, hi);
    v = _mm256_unpackhi_epi8(lo, hi);
  }
};
CEDAR_AVX2_END
#endif

struct SrcFp4 {
  static constexpr int64_t kBlockBytes = 16;  // stored bytes of a block of 32 weights
  static constexpr int64_t kScaleBytes = 1;  // stored bytes of a block's scale (E8M0)
  // 2 * E2M1 of nibble i: 0, 0.5, 1, 1.5, 2, 3, 4, 6 doubled, then the same negated (-0 is 0).
  static constexpr int8_t kQ[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
  const float* half = HalfE8m0Table();
  static const uint8_t* Row(const WeightView& w, int64_t r) { return static_cast<const uint8_t*>(w.data) + r * (w.cols / 2); }
  static const void* Scales(const WeightView& w, int64_t r) { return static_cast<const uint8_t*>(w.scales) + r * ((w.cols + B - 1) / B); }
  float Scale(const void* p, int64_t b) const { return half[static_cast<const uint8_t*>(p)[b]]; }
  static int Q(const uint8_t* row, int64_t e) { return kQ[(row[e / 2] >> (4 * (e % 2))) & 0x0F]; }
#if CEDAR_I8A8_VNNI
  Fp4Halves halves;
  __m256i Block(const uint8_t* row, int64_t b) const {
    __m256i u, v;
    halves(_mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + b * kBlockBytes))), u, v);
    return _mm256_permute2x128_si256(u, v, 0x20);
  }
  __m512i Pair512(const uint8_t* row, int64_t p) const {
    __m256i u, v;
    halves(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + p * 2 * kBlockBytes)), u, v);
    const __m512i z = _mm512_inserti64x4(_mm512_castsi256_si512(u), v, 1);  // 128-bit lanes u0 u1 v0 v1
    return _mm512_shuffle_i64x2(z, z, _MM_SHUFFLE(3, 1, 2, 0));             // u0 v0 u1 v1: block 2p, 2p + 1
  }
  __m128 PairScales(const void* sc, int64_t p) const {
    const uint8_t* c = static_cast<const uint8_t*>(sc) + 2 * p;
    return _mm_unpacklo_ps(_mm_load_ss(half + c[0]), _mm_load_ss(half + c[1]));
  }
  // Blocks 4g..4g+3 (64 packed bytes, one block per 128-bit lane L): Halves on 512 bits, so lane L
  // of u holds block 4g + L's elements 0-15 and of v its elements 16-31 (no cross-lane step).
  __m512i tab512 = _mm512_broadcast_i64x4(halves.tab);
  __m512i nib512 = _mm512_set1_epi8(0x0F);
  void Group(const uint8_t* row, int64_t g, __m512i& u, __m512i& v) const {
    const __m512i packed = _mm512_loadu_si512(row + g * 4 * kBlockBytes);
    const __m512i lo = _mm512_shuffle_epi8(tab512, _mm512_and_si512(packed, nib512));
    const __m512i hi = _mm512_shuffle_epi8(tab512, _mm512_and_si512(_mm512_srli_epi16(packed, 4), nib512));
    u = _mm512_unpacklo_epi8(lo, hi);
    v = _mm512_unpackhi_epi8(lo, hi);
  }
  // Lanes 4L..4L+3: block 4g + L's scale.
  __m512i quad = _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
  __m512 GroupScales(const void* sc, int64_t g) const {
    const uint8_t* c = static_cast<const uint8_t*>(sc) + 4 * g;
    return _mm512_permutexvar_ps(quad, _mm512_castps128_ps512(_mm_setr_ps(half[c[0]], half[c[1]], half[c[2]], half[c[3]])));
  }
  // Lane j: block 4g + j's scale, for j < 16. A code c in [2, 254] is 2^(c - 128) = the float with
  // exponent field c - 1; codes 0, 1 (subnormal halves) and 255 (NaN) take the table.
  __m512 Scales16(const void* sc, int64_t g) const {
    const uint8_t* c = static_cast<const uint8_t*>(sc) + 4 * g;
    const __m128i codes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(c));
    if (_mm_cmpge_epu8_mask(_mm_sub_epi8(codes, _mm_set1_epi8(2)), _mm_set1_epi8(int8_t(253)))) [[unlikely]] {
      alignas(64) float t[16];
      for (int j = 0; j < 16; ++j) t[j] = half[c[j]];
      return _mm512_load_ps(t);
    }
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_sub_epi32(_mm512_cvtepu8_epi32(codes), _mm512_set1_epi32(1)), 23));
  }
#endif
};

// Sizes q for a row of `in` and zeroes the missing partner of an odd last block.
void Prepare(int64_t in, QuantRow& q) {
  const int64_t nb = in / B, pairs = (nb + 1) / 2;
  q.absq.resize(size_t(pairs) * 64);
  q.neg.resize(size_t(pairs));
  q.sa16.resize(size_t(pairs) * 16);
  q.sq.resize(size_t(pairs) * 64);
  if (nb % 2) {
    std::fill(q.absq.end() - 32, q.absq.end(), uint8_t(0));
    std::fill(q.sa16.end() - 8, q.sa16.end(), 0.0f);
    std::fill(q.sq.end() - 32, q.sq.end(), int8_t(0));
    q.neg.back() = 0;
  }
}

// Block b's sign bits m (bit i: element i negative) into its pair's mask, and its s_a.
void StoreBlock(QuantRow& q, int64_t b, uint64_t m, float amax) {
  uint64_t& neg = q.neg[size_t(b / 2)];
  neg = b % 2 ? (neg & 0xFFFFFFFFull) | m << 32 : m;
  float* sa = q.sa16.data() + (b / 2) * 16 + (b % 2) * 8;
  for (int i = 0; i < 8; ++i) sa[i] = amax / 127.0f;
}

#if CEDAR_I8A8_VNNI || CEDAR_I8A8_AVX2
// s_a in FP4 order (I8A8Rows::Row sa8, both ISAs' Fp4Order): per pair, block 2p's x4 then 2p + 1's x4.
void FillSa8(QuantRow& q) {
  const size_t pairs = q.neg.size();
  q.sa8.resize(pairs * 8);
  for (size_t p = 0; p < pairs; ++p)
    for (int i = 0; i < 8; ++i) q.sa8[p * 8 + size_t(i)] = q.sa16[p * 16 + (i < 4 ? 0 : 8)];
}
#endif

// The definition (the reference uses it on every ISA).
void QuantiseScalar(const float* x, int64_t in, QuantRow& q) {
  Prepare(in, q);
  for (int64_t b = 0; b < in / B; ++b) {
    const float* xb = x + b * B;
    float amax = 0.0f;
    for (int i = 0; i < B; ++i) amax = std::max(amax, std::fabs(xb[i]));
    const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
    uint64_t m = 0;
    for (int i = 0; i < B; ++i) {
      const int v = int(std::nearbyint(xb[i] * inv));
      q.absq[size_t(b * B + i)] = uint8_t(std::abs(v));
      q.sq[size_t(b * B + i)] = int8_t(v);
      if (v < 0) m |= uint64_t(1) << i;
    }
    StoreBlock(q, b, m, amax);
  }
}

void Quantise(const float* x, int64_t in, QuantRow& q) {
#if CEDAR_I8A8_VNNI
  // The same values: |x| max (exact in any order), x * inv rounded to nearest even (cvtps_epi32
  // under the default rounding mode is nearbyint).
  Prepare(in, q);
  for (int64_t b = 0; b < in / B; ++b) {
    const float* xb = x + b * B;
    const __m512 x0 = _mm512_loadu_ps(xb), x1 = _mm512_loadu_ps(xb + 16);
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(x0), _mm512_abs_ps(x1)));
    const __m512 inv = _mm512_set1_ps(amax > 0.0f ? 127.0f / amax : 0.0f);
    const __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(x0, inv)), q1 = _mm512_cvtps_epi32(_mm512_mul_ps(x1, inv));
    uint8_t* aq = q.absq.data() + b * B;
    _mm_storeu_si128(reinterpret_cast<__m128i*>(aq), _mm512_cvtepi32_epi8(_mm512_abs_epi32(q0)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(aq + 16), _mm512_cvtepi32_epi8(_mm512_abs_epi32(q1)));
    const uint64_t m = uint64_t(_mm512_cmplt_epi32_mask(q0, _mm512_setzero_si512())) |
                       uint64_t(_mm512_cmplt_epi32_mask(q1, _mm512_setzero_si512())) << 16;
    StoreBlock(q, b, m, amax);
  }
#else
  QuantiseScalar(x, in, q);
#endif
}

// The order above in scalar code: y = x_q . w[r] for one quantised row.
template <class Src>
float DotScalar(const QuantRow& q, const WeightView& w, int64_t r) {
  const Src src;
  const int64_t in = w.cols, nb = in / B;
  const uint8_t* wr = Src::Row(w, r);
  const void* sw = Src::Scales(w, r);
  float acc[2][16] = {};
  for (int64_t b = 0; b < nb; ++b) {
    const int64_t p = b / 2;
    for (int i = 0; i < 8; ++i) {
      int32_t d = 0;
      for (int j = 0; j < 4; ++j) {
        const int64_t e = b * B + 4 * i + j;
        const int s = (q.neg[size_t(e / 64)] >> (e % 64)) & 1 ? -1 : 1;
        d += int32_t(q.absq[size_t(e)]) * (s * Src::Q(wr, e));
      }
      const int lane = int(b % 2) * 8 + i;
      acc[p % 2][lane] = std::fma(float(d), src.Scale(sw, b) * q.sa16[size_t(p) * 16 + lane], acc[p % 2][lane]);
    }
  }
  float a[16];
  for (int i = 0; i < 16; ++i) a[i] = acc[0][i] + acc[1][i];
  return HSum16(a);
}

#if CEDAR_I8A8_VNNI

// Decode (one row of x) reads a thread's slice as kSpreadI8A8 equal parts side by side, as the
// BF16-activation kernels do (matmul_bf16a.cpp kSpread).
constexpr int kSpreadI8A8 = 4;
// How far ahead (bytes) each part's weights are prefetched (NTA, one prefetch per line, never past
// the part's end), and whether the row's scales are prefetched as well, one line at a time as far
// ahead in blocks: at decode (N = 1) 2 KiB and the scales, as the BF16-activation kernels do
// (matmul_bf16a.cpp kPrefetchBytes). Session 51, medium int8 decode with --int8-activations, steps
// alternating in one process (bench_decode_ab, a throwaway build switching the old and new reads
// at run time), new step / old: 4 parts, 2 KiB, part ends, scales 0.867 / 0.853 / 0.850 / 0.854
// (13.5 -> 11.5 ms), 0.971 / 0.952 in the machine's slow phase; without the scales 0.893 / 0.877 /
// 0.884; 1 KiB 0.889, 3 KiB 0.907, 4 KiB 0.963; 4 parts alone 1.12. fp8-fp4 (its FP4 experts on
// this path) 1.001 / 1.003. Batched rows keep 4 KiB without the scales: at batch 8, 2 KiB and the
// scales read 0.990-0.997, within the noise (docs/WEIGHTS.md, session 51).
template <int N>
constexpr int64_t kAheadI8A8 = N == 1 ? 2048 : 4096;
template <int N>
constexpr bool kScalesAheadI8A8 = N == 1;

// The FP4-order copies of a quantised row (I8A8Rows::Row absq4 / neg4 / sa8), once per row of x:
// what SrcFp4::Group's u and v meet.
void Fp4Order(QuantRow& q) {
  const size_t pairs = q.neg.size();
  const size_t whole = pairs / 2;  // the kernel's nb / 4 groups, or one more ending in the zero partner
  q.absq4.resize(whole * 128);
  q.neg4.resize(whole * 2);
  FillSa8(q);
  for (size_t g = 0; g < whole; ++g) {
    uint64_t mu = 0, mv = 0;
    for (size_t l = 0; l < 4; ++l) {
      const size_t b = 4 * g + l;  // block
      std::memcpy(&q.absq4[g * 128 + 16 * l], &q.absq[b * 32], 16);
      std::memcpy(&q.absq4[g * 128 + 64 + 16 * l], &q.absq[b * 32 + 16], 16);
      const uint64_t m = q.neg[b / 2] >> (32 * (b % 2));
      mu |= (m & 0xFFFF) << (16 * l);
      mv |= ((m >> 16) & 0xFFFF) << (16 * l);
    }
    q.neg4[2 * g] = mu, q.neg4[2 * g + 1] = mv;
  }
}

// FP4's whole groups of 4 blocks without a cross-lane step on the weights: u and v
// (SrcFp4::Group) meet x's bytes in the same order (Fp4Order), so u's int32 lane 4L + i is the
// contract's lane i (block 4g + L even) or 8 + i (odd) of pair 2g + L / 2, and v's the lanes 4
// above those; the scale vector [s_w s_a of block 4g + L, x4 per L] serves both. Every contract
// lane gets the FMAs RowsVnni gives it on the INT8 weight 2 * e2m1, in the same order, and the
// lanes go back to contract order into acc0 (pairs 2g) and acc1 (2g + 1) at the end, where the
// pair loop continues: the same bits. Returns the next pair (2 * groups).
template <int N, int S>
int64_t Fp4Groups(const QuantRow* const* q, const SrcFp4& src, const uint8_t* const* wr, const void* const* sw,
                  const uint8_t* const* part_end, int64_t groups, __m512 (&acc0)[N][S], __m512 (&acc1)[N][S]) {
  if (groups == 0) return 0;
  constexpr int64_t ahead = kAheadI8A8<N>;
  constexpr bool sc_ahead = kScalesAheadI8A8<N>;
  const __m512i zero = _mm512_setzero_si512();
  __m512 au[N][S], av[N][S];
  for (int n = 0; n < N; ++n)
    for (int k = 0; k < S; ++k) au[n][k] = av[n][k] = _mm512_setzero_ps();
  // Group g against weight row k with s = [s_w of block 4g + L, x4 per L].
  auto group = [&](int64_t g, int k, __m512 s) __attribute__((always_inline)) {
    const uint8_t* pf = wr[k] + g * 4 * SrcFp4::kBlockBytes + ahead;
    if (pf < part_end[k]) _mm_prefetch(reinterpret_cast<const char*>(pf), _MM_HINT_NTA);
    if (sc_ahead && g % 16 == 0)  // one line of E8M0 codes per 16 groups
      _mm_prefetch(static_cast<const char*>(sw[k]) + 4 * g + ahead / 16, _MM_HINT_NTA);
    __m512i u, v;
    src.Group(wr[k], g, u, v);
#pragma GCC unroll 16
    for (int n = 0; n < N; ++n) {
      const uint8_t* a = q[n]->absq4.data() + g * 128;
      const uint64_t* m = q[n]->neg4.data() + 2 * g;
      const __m512 sc = _mm512_mul_ps(s, _mm512_loadu_ps(q[n]->sa8.data() + g * 16));
      const __m512i du = _mm512_dpbusd_epi32(zero, _mm512_loadu_si512(a), _mm512_mask_sub_epi8(u, m[0], zero, u));
      const __m512i dv = _mm512_dpbusd_epi32(zero, _mm512_loadu_si512(a + 64), _mm512_mask_sub_epi8(v, m[1], zero, v));
      au[n][k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(du), sc, au[n][k]);
      av[n][k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dv), sc, av[n][k]);
    }
  };
  // Four groups at a time take their 16 scales from one conversion (SrcFp4::Scales16).
  const __m512i quad0 = src.quad, quad1 = _mm512_add_epi32(quad0, _mm512_set1_epi32(4));
  const __m512i quad2 = _mm512_add_epi32(quad0, _mm512_set1_epi32(8)), quad3 = _mm512_add_epi32(quad0, _mm512_set1_epi32(12));
  int64_t g = 0;
  for (; g + 4 <= groups; g += 4) {
#pragma GCC unroll 4
    for (int k = 0; k < S; ++k) {
      const __m512 s16 = src.Scales16(sw[k], g);
      group(g, k, _mm512_permutexvar_ps(quad0, s16));
      group(g + 1, k, _mm512_permutexvar_ps(quad1, s16));
      group(g + 2, k, _mm512_permutexvar_ps(quad2, s16));
      group(g + 3, k, _mm512_permutexvar_ps(quad3, s16));
    }
  }
  for (; g < groups; ++g)
#pragma GCC unroll 4
    for (int k = 0; k < S; ++k) group(g, k, src.GroupScales(sw[k], g));
  // acc0 lanes 0-3 / 4-7 / 8-11 / 12-15 = u 0-3 / v 0-3 / u 4-7 / v 4-7; acc1 the same from lanes 8-15.
  const __m512i i0 = _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23);
  const __m512i i1 = _mm512_setr_epi32(8, 9, 10, 11, 24, 25, 26, 27, 12, 13, 14, 15, 28, 29, 30, 31);
  for (int n = 0; n < N; ++n)
    for (int k = 0; k < S; ++k) {
      acc0[n][k] = _mm512_permutex2var_ps(au[n][k], i0, av[n][k]);
      acc1[n][k] = _mm512_permutex2var_ps(au[n][k], i1, av[n][k]);
    }
  return 2 * groups;
}

// N rows of x against weight rows [r0, r1), one weight row at a time, each weight pair loaded
// once for the N rows.
// With S > 1 (decode, N = 1) rows r + k * rs for k < S run side by side, their outputs at
// y[(r - r0) + k * rs]: the slice read as S parts at once (kSpreadI8A8); every row keeps its own
// accumulators, so the bits are those of S = 1. end: the slice's last byte (prefetch bound).
template <class Src, int N, int S = 1>
void RowsVnni(const QuantRow* const* q, const WeightView& w, int64_t r0, int64_t r1, float* y, int64_t ys,
              const uint8_t* end, int64_t rs = 1) {
  const Src src;
  const int64_t in = w.cols, nb = in / B, full = nb / 2;
  const __m512i idx = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
  const __m512i zero = _mm512_setzero_si512();
  const uint8_t* absq[N];
  const uint64_t* neg[N];
  const float* sa16[N];
  for (int n = 0; n < N; ++n) absq[n] = q[n]->absq.data(), neg[n] = q[n]->neg.data(), sa16[n] = q[n]->sa16.data();
  RowSums16 sums;  // HSum16 of 16 finished rows at a time (few-row products; see hsum_rows_avx512.h)
  constexpr int64_t ahead = kAheadI8A8<N>;
  constexpr bool sc_ahead = kScalesAheadI8A8<N>;
  const uint8_t* part_end[S];  // prefetch bounds: part k is rows r0 + k * rs .. r0 + (k + 1) * rs - 1
  for (int k = 0; k < S; ++k) part_end[k] = S == 1 ? end : Src::Row(w, r0 + (k + 1) * rs);
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* wr[S];
    const void* sw[S];
    for (int k = 0; k < S; ++k) {
      wr[k] = Src::Row(w, r + k * rs);
      sw[k] = Src::Scales(w, r + k * rs);
    }
    __m512 acc0[N][S], acc1[N][S];  // even and odd pairs
    for (int n = 0; n < N; ++n)
      for (int k = 0; k < S; ++k) acc0[n][k] = acc1[n][k] = _mm512_setzero_ps();
    int64_t p = 0;
    if constexpr (std::is_same_v<Src, SrcFp4>) p = Fp4Groups<N, S>(q, src, wr, sw, part_end, nb / 4, acc0, acc1);
    auto pair = [&](int64_t p, __m512i wv, __m512 s, __m512& a, int n) {
      const __m512i sgn = _mm512_mask_sub_epi8(wv, neg[n][p], zero, wv);
      const __m512i d = _mm512_dpbusd_epi32(zero, _mm512_loadu_si512(absq[n] + p * 64), sgn);
      a = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), _mm512_mul_ps(s, _mm512_loadu_ps(sa16[n] + p * 16)), a);
    };
    auto full_pair = [&](int64_t p, __m512 (&a)[N][S]) {
#pragma GCC unroll 4
      for (int k = 0; k < S; ++k) {
        const uint8_t* pf = wr[k] + p * 2 * Src::kBlockBytes + ahead;
        if (pf < part_end[k]) _mm_prefetch(reinterpret_cast<const char*>(pf), _MM_HINT_NTA);
        if (sc_ahead && p % 16 == 0)  // every 16 pairs: a line of INT8's scales, half a line of FP4's
          _mm_prefetch(static_cast<const char*>(sw[k]) + 2 * p * Src::kScaleBytes + ahead / 16, _MM_HINT_NTA);
        const __m512 s = _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(src.PairScales(sw[k], p)));
        const __m512i wv = src.Pair512(wr[k], p);
#pragma GCC unroll 16
        for (int n = 0; n < N; ++n) pair(p, wv, s, a[n][k], n);
      }
    };
    for (; p + 1 < full; p += 2) {
      full_pair(p, acc0);
      full_pair(p + 1, acc1);
    }
    if (p < full) full_pair(p++, acc0);
    if (nb % 2) {  // the last block alone: upper half of the pair zero (weights masked, scale 0)
      for (int k = 0; k < S; ++k) {
        const __m512 s = _mm512_maskz_mov_ps(0x00FF, _mm512_set1_ps(src.Scale(sw[k], nb - 1)));
        const __m512i wv = _mm512_zextsi256_si512(src.Block(wr[k], nb - 1));
        for (int n = 0; n < N; ++n) pair(full, wv, s, full % 2 ? acc1[n][k] : acc0[n][k], n);
      }
    }
    for (int n = 0; n < N; ++n)
      for (int k = 0; k < S; ++k) {
        float* out = y + n * ys + (r - r0) + k * rs;
        if constexpr (N == 1) *out = HSum16Row(_mm512_add_ps(acc0[n][k], acc1[n][k]));
        else sums.Add(_mm512_add_ps(acc0[n][k], acc1[n][k]), out);
      }
  }
  sums.Flush();
}

#elif CEDAR_I8A8_AVX2

// The FP4-order copies of a quantised row (I8A8Rows::Row absq4 / sq4 / sa8), once per row of x
// (plain code, outside the AVX2 pragma: a portable build runs it only where the kernels run).
void Fp4Order(QuantRow& q) {
  const size_t pairs = q.neg.size();
  q.absq4.resize(pairs * 64);
  q.sq4.resize(pairs * 64);
  FillSa8(q);
  static constexpr int kFrom[4] = {0, 32, 16, 48};  // source offset of each 16-byte quarter
  for (size_t p = 0; p < pairs; ++p) {
    for (int h = 0; h < 4; ++h) {
      std::memcpy(&q.absq4[p * 64 + 16 * size_t(h)], &q.absq[p * 64 + size_t(kFrom[h])], 16);
      std::memcpy(&q.sq4[p * 64 + 16 * size_t(h)], &q.sq[p * 64 + size_t(kFrom[h])], 16);
    }
  }
}

CEDAR_AVX2_BEGIN

// The VNNI kernel's lanes on 8-wide registers: acc[n][parity of the pair][lanes 0-7 | 8-15].
// A block's int32 lanes come from vpsignb (w with q's sign), vpmaddubsw (|q| * that, pairs of
// bytes summed: at most 2 * 127 * 127, no saturation) and vpmaddwd with ones (pairs of those),
// i.e. lane i = bytes 4i..4i+3 as vpdpbusd sums them. (The VNNI path's zero partner of an odd
// last block adds fma(0, 0, acc) to lanes that are never -0: skipping it changes no bit.)
//
// Decode (N = 1) reads a thread's slice as kSpreadAvx2 parts side by side (rows r + k * rs, k < S,
// outputs at y[(r - r0) + k * rs]) without software prefetch. On an AVX2 EPYC (Zen 3 VM, 2 cores,
// ~20-35 GB/s) a products-only pass over small's and medium's decode shapes (variants alternating
// in one process, each over the read probe taken beside it) streamed 0.74-0.82 of the probe with 3
// parts against 0.46-0.50 one row at a time with the prefetch it had (one line per 2 it read),
// 0.62 one row at a time without prefetch, 0.66-0.68 with both lines prefetched, 0.65-0.79 with 2
// parts, 0.68-0.75 with 4.
// Batched rows (N > 1) keep address order with prefetch, now of both lines (products-only, same
// pass: 2 / 4 / 8 rows of x 0.39 / 0.23 / 0.14 -> 0.53 / 0.33 / 0.18 of the probe; without any
// prefetch 0.36 / 0.30 / 0.11; blocks of 128 KiB of weight rows re-read from L2 by the next
// group of x rows, as the F32-activation kernel does, changed nothing measurable: compute bound).
// Every row keeps its own accumulators: the bits are those of one row at a time.
constexpr int kSpreadAvx2 = 3;

// INT8 weights (SrcI8's layout); FP4 runs RowsAvx2Fp4 below.
template <int N, int S = 1>
void RowsAvx2(const QuantRow* const* q, const WeightView& w, int64_t r0, int64_t r1, float* y, int64_t ys,
              int64_t rs = 1) {
  const int64_t in = w.cols, nb = in / B, nbs = (in + B - 1) / B;
  const __m256i ones = _mm256_set1_epi16(1);
  const uint8_t* end = static_cast<const uint8_t*>(w.data) + r1 * in;
  const uint8_t* absq[N];
  const int8_t* sq[N];
  const float* sa16[N];
  for (int n = 0; n < N; ++n) absq[n] = q[n]->absq.data(), sq[n] = q[n]->sq.data(), sa16[n] = q[n]->sa16.data();
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* wr[S];
    const uint16_t* sw[S];  // bfloat16 scales
    for (int k = 0; k < S; ++k) {
      wr[k] = static_cast<const uint8_t*>(w.data) + (r + k * rs) * in;
      sw[k] = static_cast<const uint16_t*>(w.scales) + (r + k * rs) * nbs;
    }
    __m256 acc[N][S][2][2];
    for (int n = 0; n < N; ++n)
      for (int k = 0; k < S; ++k)
        for (int a = 0; a < 4; ++a) acc[n][k][a / 2][a % 2] = _mm256_setzero_ps();
    // Block b into acc[.][.][parity][half] (constant indices, so the accumulators stay in registers).
    auto block = [&](int64_t b, int parity, int half) {
#pragma GCC unroll 4
      for (int k = 0; k < S; ++k) {
        const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wr[k] + b * B));
        const __m256 s = _mm256_set1_ps(Bf16ToFloat(sw[k][b]));
#pragma GCC unroll 4
        for (int n = 0; n < N; ++n) {
          const __m256i sgn = _mm256_sign_epi8(wv, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(sq[n] + b * B)));
          const __m256i p16 = _mm256_maddubs_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(absq[n] + b * B)), sgn);
          const __m256 d = _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, ones));
          const __m256 sc = _mm256_mul_ps(s, _mm256_loadu_ps(sa16[n] + (b / 2) * 16 + half * 8));
          acc[n][k][parity][half] = _mm256_fmadd_ps(d, sc, acc[n][k][parity][half]);
        }
      }
    };
    int64_t b = 0;
    for (; b + 4 <= nb; b += 4) {  // pairs 2k (even) and 2k + 1 (odd)
      if constexpr (S == 1 && N > 1) {  // the 2 lines these 4 blocks read, 2 KiB ahead
        const uint8_t* pf = wr[0] + b * B + 2048;
        if (pf < end) _mm_prefetch(reinterpret_cast<const char*>(pf), _MM_HINT_NTA);
        if (pf + 64 < end) _mm_prefetch(reinterpret_cast<const char*>(pf + 64), _MM_HINT_NTA);
      }
      block(b, 0, 0);
      block(b + 1, 0, 1);
      block(b + 2, 1, 0);
      block(b + 3, 1, 1);
    }
    if (b < nb) block(b, 0, 0);
    if (b + 1 < nb) block(b + 1, 0, 1);
    if (b + 2 < nb) block(b + 2, 1, 0);
    for (int n = 0; n < N; ++n)
      for (int k = 0; k < S; ++k)
        y[n * ys + (r - r0) + k * rs] =
            Lane16Sum(_mm256_add_ps(acc[n][k][0][0], acc[n][k][1][0]), _mm256_add_ps(acc[n][k][0][1], acc[n][k][1][1]));
  }
}

// FP4 weights on AVX2 without the two cross-lane permutes per pair that put FP4's unpacked
// nibbles in element order: a pair's halves u = [block 2p elements 0-15 | 2p + 1's 0-15] and
// v = [2p's 16-31 | 2p + 1's 16-31] (Fp4Halves) meet x's bytes in that same order (Fp4Order),
// so u's int32 lanes are the contract's lanes 0-3 and 8-11 and v's 4-7 and 12-15, and the scale
// vector [s_w(2p) s_a(2p) x4 | s_w(2p+1) s_a(2p+1) x4] serves both. Every contract lane gets the
// same FMAs in the same order as RowsAvx2 gives it on the INT8 weight 2 * e2m1, and the lanes are put back in
// contract order before the final sum: the same bits. A block without a partner (odd nb) runs as
// a pair whose partner is zero (weights 0 from zero nibbles, s_w 0, s_a 0): fma(0, 0, acc) leaves
// acc as it is (never -0). One thread in cache (`bench_weights --rows 384 --cols 2048
// --threads 1`, 3 alternating pairs): 10.1-10.3 -> 11.2 GB/s; one V4.1-Flash layer's experts on
// two threads 8.7-8.8 -> 8.4 ms (docs/WEIGHTS.md, session 23).
template <int N, int S = 1>
void RowsAvx2Fp4(const QuantRow* const* q, const WeightView& w, int64_t r0, int64_t r1, float* y, int64_t ys,
                 int64_t rs = 1) {
  const SrcFp4 src;
  const Fp4Halves halves;
  const int64_t nb = w.cols / B;
  const __m256i ones = _mm256_set1_epi16(1);
  const uint8_t* end = SrcFp4::Row(w, r1);
  const uint8_t* absq[N];
  const int8_t* sq[N];
  const float* sa8[N];
  for (int n = 0; n < N; ++n) absq[n] = q[n]->absq4.data(), sq[n] = q[n]->sq4.data(), sa8[n] = q[n]->sa8.data();
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* wr[S];
    const void* sw[S];
    for (int k = 0; k < S; ++k) {
      wr[k] = SrcFp4::Row(w, r + k * rs);
      sw[k] = SrcFp4::Scales(w, r + k * rs);
    }
    __m256 acc[N][S][2][2];  // [parity of the pair][u, v]
    for (int n = 0; n < N; ++n)
      for (int k = 0; k < S; ++k)
        for (int a = 0; a < 4; ++a) acc[n][k][a / 2][a % 2] = _mm256_setzero_ps();
    // Pair p into acc[.][.][parity]; kAlone: block 2p without its partner.
    auto pair = [&](int64_t p, int parity, auto alone) __attribute__((always_inline)) {
      constexpr bool kAlone = decltype(alone)::value;
#pragma GCC unroll 4
      for (int k = 0; k < S; ++k) {
        const uint8_t* pw = wr[k] + p * 2 * SrcFp4::kBlockBytes;
        __m256i u, v;
        if constexpr (kAlone)
          halves(_mm256_zextsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(pw))), u, v);
        else
          halves(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(pw)), u, v);
        const __m256 s = _mm256_blend_ps(_mm256_set1_ps(src.Scale(sw[k], 2 * p)),
                                         kAlone ? _mm256_setzero_ps() : _mm256_set1_ps(src.Scale(sw[k], 2 * p + 1)), 0xF0);
#pragma GCC unroll 4
        for (int n = 0; n < N; ++n) {
          const __m256 sc = _mm256_mul_ps(s, _mm256_loadu_ps(sa8[n] + p * 8));
          const __m256i su = _mm256_sign_epi8(u, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(sq[n] + p * 64)));
          const __m256i sv = _mm256_sign_epi8(v, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(sq[n] + p * 64 + 32)));
          const __m256i pu = _mm256_maddubs_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(absq[n] + p * 64)), su);
          const __m256i pv = _mm256_maddubs_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(absq[n] + p * 64 + 32)), sv);
          acc[n][k][parity][0] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(pu, ones)), sc, acc[n][k][parity][0]);
          acc[n][k][parity][1] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(pv, ones)), sc, acc[n][k][parity][1]);
        }
      }
    };
    int64_t b = 0;
    for (; b + 4 <= nb; b += 4) {  // pairs b / 2 (even) and b / 2 + 1 (odd)
      if constexpr (S == 1 && N > 1) {  // the line these 4 blocks read, 2 KiB ahead
        const uint8_t* pf = wr[0] + b * SrcFp4::kBlockBytes + 2048;
        if (pf < end) _mm_prefetch(reinterpret_cast<const char*>(pf), _MM_HINT_NTA);
      }
      pair(b / 2, 0, std::false_type{});
      pair(b / 2 + 1, 1, std::false_type{});
    }
    if (b + 2 <= nb) {
      pair(b / 2, 0, std::false_type{});
      if (b + 3 == nb) pair(b / 2 + 1, 1, std::true_type{});
    } else if (b < nb) {
      pair(b / 2, 0, std::true_type{});
    }
    for (int n = 0; n < N; ++n)
      for (int k = 0; k < S; ++k) {
        const __m256 u = _mm256_add_ps(acc[n][k][0][0], acc[n][k][1][0]), v = _mm256_add_ps(acc[n][k][0][1], acc[n][k][1][1]);
        y[n * ys + (r - r0) + k * rs] = Lane16Sum(_mm256_permute2f128_ps(u, v, 0x20), _mm256_permute2f128_ps(u, v, 0x31));
      }
  }
}

// FP4 runs RowsAvx2Fp4 (x in FP4 order), INT8 RowsAvx2.
template <class Src, int N, int S>
void RowsAvx2Of(const QuantRow* const* q, const WeightView& w, int64_t r0, int64_t r1, float* y, int64_t ys, int64_t rs) {
  if constexpr (std::is_same_v<Src, SrcFp4>)
    RowsAvx2Fp4<N, S>(q, w, r0, r1, y, ys, rs);
  else
    RowsAvx2<N, S>(q, w, r0, r1, y, ys, rs);
}

CEDAR_AVX2_END
#endif  // CEDAR_I8A8_VNNI

}  // namespace

// FP4 leaves 8-bit activations for BF16 ones where both modes are on: since FP4's quad kernel
// (matmul_bf16a.cpp, session 27) that path is the faster (bench_weights in L2: 32-33 GB/s against
// 26; medium's decode 80 / 85 tokens/s against 76 / 82) as well as the more accurate.
bool Int8ActivationsApply(const WeightView& w) {
  if (w.type == WeightType::kFP4 && Bf16ActivationsApply(w)) return false;  // (a row of 32 mod 64 stays here)
  return (w.type == WeightType::kI8 || w.type == WeightType::kFP4) && w.cols > 0 && w.cols % B == 0 && int8_activations.load(std::memory_order_relaxed);
}

void QuantiseRows(const float* x, int n, int64_t in, I8A8Rows& q, bool fp4) {
  if (q.rows.size() < size_t(n)) q.rows.resize(size_t(n));
  for (int b = 0; b < n; ++b) {
    QuantRow& row = q.rows[size_t(b)];
    Quantise(x + int64_t(b) * in, in, row);
#if CEDAR_I8A8_AVX2 || CEDAR_I8A8_VNNI
    if (fp4 && Avx2KernelsRun()) Fp4Order(row);  // (the plain loop reads absq / sq)
#endif
  }
}

void I8A8FewRows(const float* x, int n, const WeightView& w, int64_t r0, int64_t r1, float* y, int64_t ys) {
  thread_local I8A8Rows rows;
  QuantiseRows(x, n, w.cols, rows, w.type == WeightType::kFP4);
  I8A8Quantised(rows, n, w, r0, r1, y, ys);
}

namespace {
// The plain loop: builds without the kernels, and portable ones on CPUs without AVX2.
template <class Src>
[[maybe_unused]] void QuantisedScalar(const QuantRow* const* q, int n, const WeightView& w, int64_t r0, int64_t r1, float* y,
                                      int64_t ys) {
  for (int64_t r = r0; r < r1; ++r)
    for (int b = 0; b < n; ++b) y[b * ys + (r - r0)] = DotScalar<Src>(*q[b], w, r);
}

template <class Src>
void QuantisedT(const QuantRow* const* q, int n, const WeightView& w, int64_t r0, int64_t r1, float* y, int64_t ys) {
#if CEDAR_I8A8_VNNI
  const uint8_t* start = Src::Row(w, r0);
  const uint8_t* end = Src::Row(w, r1);
  for (const uint8_t* p = start; p < std::min(end, start + 4096); p += 64) _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T0);
  // Groups of up to 8 rows of x per pass over the weights (accumulators stay in registers).
  for (int b0 = 0; b0 < n; b0 += 8) {
    const QuantRow* const* qb = q + b0;
    float* yb = y + int64_t(b0) * ys;
    switch (std::min(8, n - b0)) {
      case 1:
        if (r1 - r0 >= kSpreadI8A8 * 16) {
          const int64_t per = (r1 - r0) / kSpreadI8A8;
          RowsVnni<Src, 1, kSpreadI8A8>(qb, w, r0, r0 + per, yb, ys, end, per);
          RowsVnni<Src, 1>(qb, w, r0 + per * kSpreadI8A8, r1, yb + per * kSpreadI8A8, ys, end);
        } else {
          RowsVnni<Src, 1>(qb, w, r0, r1, yb, ys, end);
        }
        break;
      case 2: RowsVnni<Src, 2>(qb, w, r0, r1, yb, ys, end); break;
      case 3: RowsVnni<Src, 3>(qb, w, r0, r1, yb, ys, end); break;
      case 4: RowsVnni<Src, 4>(qb, w, r0, r1, yb, ys, end); break;
      case 5: RowsVnni<Src, 5>(qb, w, r0, r1, yb, ys, end); break;
      case 6: RowsVnni<Src, 6>(qb, w, r0, r1, yb, ys, end); break;
      case 7: RowsVnni<Src, 7>(qb, w, r0, r1, yb, ys, end); break;
      default: RowsVnni<Src, 8>(qb, w, r0, r1, yb, ys, end); break;
    }
  }
#elif CEDAR_I8A8_AVX2
  if (!Avx2KernelsRun()) return QuantisedScalar<Src>(q, n, w, r0, r1, y, ys);
  for (int b0 = 0; b0 < n; b0 += 3) {  // groups of up to 3 rows: 12 accumulators
    const QuantRow* const* qb = q + b0;
    float* yb = y + int64_t(b0) * ys;
    switch (std::min(3, n - b0)) {
      case 1:
        if (r1 - r0 >= kSpreadAvx2 * 16) {
          const int64_t per = (r1 - r0) / kSpreadAvx2;
          RowsAvx2Of<Src, 1, kSpreadAvx2>(qb, w, r0, r0 + per, yb, ys, per);
          RowsAvx2Of<Src, 1, 1>(qb, w, r0 + per * kSpreadAvx2, r1, yb + per * kSpreadAvx2, ys, 1);
        } else {
          RowsAvx2Of<Src, 1, 1>(qb, w, r0, r1, yb, ys, 1);
        }
        break;
      case 2: RowsAvx2Of<Src, 2, 1>(qb, w, r0, r1, yb, ys, 1); break;
      default: RowsAvx2Of<Src, 3, 1>(qb, w, r0, r1, yb, ys, 1); break;
    }
  }
#else
  QuantisedScalar<Src>(q, n, w, r0, r1, y, ys);
#endif
}
}  // namespace

void I8A8Quantised(const I8A8Rows& rows, int n, const WeightView& w, int64_t r0, int64_t r1, float* y, int64_t ys) {
  if (r0 >= r1) return;
  const QuantRow* q[kFewRowsMax];
  for (int b = 0; b < n; ++b) q[b] = &rows.rows[size_t(b)];
  if (w.type == WeightType::kFP4)
    QuantisedT<SrcFp4>(q, n, w, r0, r1, y, ys);
  else
    QuantisedT<SrcI8>(q, n, w, r0, r1, y, ys);
}

}  // namespace internal

namespace ref {
void MatmulI8A8(const float* x, const WeightView& w, float* y, int n) {
  internal::QuantRow q;
  for (int b = 0; b < n; ++b) {
    internal::QuantiseScalar(x + int64_t(b) * w.cols, w.cols, q);
    for (int64_t r = 0; r < w.rows; ++r)
      y[int64_t(b) * w.rows + r] = w.type == WeightType::kFP4 ? internal::DotScalar<internal::SrcFp4>(q, w, r)
                                                               : internal::DotScalar<internal::SrcI8>(q, w, r);
  }
}
}  // namespace ref

void SetInt8Activations(bool on) { internal::int8_activations.store(on); }
bool Int8Activations() { return internal::int8_activations.load(std::memory_order_relaxed); }
bool Int8ActivationsVectorised() {
#if CEDAR_I8A8_VNNI || CEDAR_I8A8_AVX2
  return internal::Avx2KernelsRun();  // (always true in a build for AVX2 or AVX-512)
#else
  return false;
#endif
}

}  // namespace cedar::kernels
