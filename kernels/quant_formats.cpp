#include "kernels/quant_formats.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

namespace cedar::kernels {

float DecodeE4M3(uint8_t code) {
  const float sign = (code & 0x80) ? -1.0f : 1.0f;
  const int e = (code >> 3) & 0xF;
  const int m = code & 0x7;
  if (e == 0xF && m == 0x7) return std::numeric_limits<float>::quiet_NaN();
  if (e == 0) return sign * std::ldexp(float(m), -9);  // subnormal: m/8 * 2^-6
  return sign * std::ldexp(float(8 + m), e - 7 - 3);
}

float DecodeE2M1(uint8_t nibble) {
  static const float kTable[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  const float v = kTable[nibble & 0x7];
  return (nibble & 0x8) ? -v : v;
}

float DecodeE8M0(uint8_t code) {
  if (code == 0xFF) return std::numeric_limits<float>::quiet_NaN();
  return std::ldexp(1.0f, int(code) - 127);
}

namespace {
// EncodeE4M3, inlined into the quantising loop (EncodeE4M3Run).
inline uint8_t EncodeE4M3Inline(float x) {
  // Without branches, so that the quantising loop vectorises (QuantFp8Blocks with the branching
  // encoder: ~5 ns a weight on one core; now ~1).
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  const uint32_t sign = (bits >> 24) & 0x80u, abs_bits = bits & 0x7FFFFFFFu;
  float a;
  std::memcpy(&a, &abs_bits, 4);
  // Normal range: the 23 mantissa bits rounded to 3 (to nearest, ties to the even one: add
  // 2^19 - 1 plus the lowest kept bit), a carry running into the exponent as it should, then the
  // exponent rebiased from 127 to 7. Below 448 nothing rounds past 0x7E.
  const uint32_t normal = ((abs_bits + 0x7FFFFu + ((abs_bits >> 20) & 1u)) >> 20) - (120u << 3);
  // Below 2^-6, a multiple of 2^-9: a * 512 rounded to an integer, ties to even (adding and
  // subtracting 2^23 rounds in the current mode, nearest-even by default); 8 is the smallest normal
  // (exponent field 1, mantissa 0), so the code arithmetic holds. (a < 1 keeps NaN and large
  // values out of the conversion.)
  // The comparisons are on the bits, ordered as the values for |x| (with float compares GCC kept
  // branches in the loop): 0x3F800000 is 1, 0x3C800000 2^-6, 0x43E00000 448.
  const float small = abs_bits < 0x3F800000u ? a : 1.0f;
  const uint32_t subnormal = uint32_t((small * 512.0f + 0x1p23f) - 0x1p23f);
  uint32_t code = abs_bits < 0x3C800000u ? subnormal : normal;
  code = abs_bits >= 0x43E00000u ? 0x7Eu : code;  // saturate at 448, as the released kernels clamp before the cast
  return uint8_t(abs_bits > 0x7F800000u ? 0x7Fu : (sign | code));  // NaN in: 0x7F
}
}  // namespace

uint8_t EncodeE4M3(float x) { return EncodeE4M3Inline(x); }

namespace {
// EncodeE2M1, inlined into the quantising loop.
inline uint8_t EncodeE2M1Inline(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  const uint32_t sign = (bits >> 28) & 0x8u, abs_bits = bits & 0x7FFFFFFFu;
  // The magnitudes by code 0..7 are 0, .5, 1, 1.5, 2, 3, 4, 6: the code is the number of midpoints
  // between them that |x| passes, a midpoint itself going to the even code (mantissa bit 0), so
  // `>` where the lower neighbour's code is even and `>=` where it is odd; above 6 it saturates.
  // The midpoints .25, .75, 1.25, 1.75, 2.5, 3.5 and 5 are compared as float bits (ordered as the
  // values for |x|; with float compares GCC kept branches), so the quantising loop vectorises: a
  // search over the table took ~18 ns a weight, most of loading a model as fp8-fp4 (22 s on medium).
  const uint32_t code = uint32_t(abs_bits > 0x3E800000u) + uint32_t(abs_bits >= 0x3F400000u) + uint32_t(abs_bits > 0x3FA00000u) +
                        uint32_t(abs_bits >= 0x3FE00000u) + uint32_t(abs_bits > 0x40200000u) + uint32_t(abs_bits >= 0x40600000u) +
                        uint32_t(abs_bits > 0x40A00000u);
  return uint8_t(abs_bits > 0x7F800000u ? 0x7u : (sign | code));  // NaN in: 0x7
}
}  // namespace

uint8_t EncodeE2M1(float x) { return EncodeE2M1Inline(x); }

namespace {
// The quantising loops, as functions of their own with restrict pointers so that GCC vectorises
// them (inline, a byte store may alias every other variable).
// out[i] = EncodeE4M3(x[i] * s), i < n.
void EncodeE4M3Run(const float* __restrict x, int64_t n, float s, uint8_t* __restrict out) {
  for (int64_t i = 0; i < n; ++i) out[i] = EncodeE4M3Inline(x[i] * s);
}
// out[i] = EncodeE2M1(x[2i] * s) | EncodeE2M1(x[2i + 1] * s) << 4, i < n / 2 (n even).
void EncodeE2M1PairsRun(const float* __restrict x, int64_t n, float s, uint8_t* __restrict out) {
  for (int64_t i = 0; i < n / 2; ++i) out[i] = uint8_t(EncodeE2M1Inline(x[2 * i] * s) | (EncodeE2M1Inline(x[2 * i + 1] * s) << 4));
}
// max(m, |x[i]|) over i < n, NaNs left out (as std::max(m, std::fabs(x[i])) leaves them), on the
// bits: for non-negative floats their order is the values' order, and an integer maximum vectorises.
float AbsMax(const float* __restrict x, int64_t n, float m) {
  uint32_t best;
  std::memcpy(&best, &m, 4);
  for (int64_t i = 0; i < n; ++i) {
    uint32_t b;
    std::memcpy(&b, &x[i], 4);
    b &= 0x7FFFFFFFu;
    b = b > 0x7F800000u ? 0u : b;
    best = b > best ? b : best;
  }
  std::memcpy(&m, &best, 4);
  return m;
}
}  // namespace

uint8_t Ue8m0ScaleFor(float amax, float inv_max, float amax_floor) {
  if (!(amax >= amax_floor)) amax = amax_floor;  // also catches NaN
  const float v = amax * inv_max;
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  const int exp_field = int((bits >> 23) & 0xFF);
  const int log2_ceil = exp_field - 127 + ((bits & 0x7FFFFF) != 0 ? 1 : 0);
  // The released kernels build the float 2^k from (k + 127) << 23; the E8M0 byte is k + 127.
  int code = log2_ceil + 127;
  if (code < 0) code = 0;
  if (code > 254) code = 254;
  return uint8_t(code);
}

namespace {
void CheckBlocks(const char* what, int64_t rows, int64_t cols, int br, int bc) {
  if (rows < 0 || cols < 0 || br <= 0 || bc <= 0)
    throw std::invalid_argument(std::string(what) + ": expected positive block sizes and non-negative shape, found rows " +
                                std::to_string(rows) + " cols " + std::to_string(cols) + " block " + std::to_string(br) + "x" +
                                std::to_string(bc));
}
}  // namespace

namespace {
// Decoding tables built from the scalar decoders above, so the bulk paths give the same floats
// bit for bit (a 256-entry lookup instead of ldexp per element: the loader dequantises every
// weight of a checkpoint through these).
struct Tables {
  float e4m3[256];
  float e8m0[256];
  float e2m1_pair_lo[256], e2m1_pair_hi[256];  // byte -> value of its low / high nibble
  Tables() {
    for (int i = 0; i < 256; ++i) {
      e4m3[i] = DecodeE4M3(uint8_t(i));
      e8m0[i] = DecodeE8M0(uint8_t(i));
      e2m1_pair_lo[i] = DecodeE2M1(uint8_t(i & 0x0F));
      e2m1_pair_hi[i] = DecodeE2M1(uint8_t(i >> 4));
    }
  }
};
const Tables& T() {
  static const Tables t;
  return t;
}
}  // namespace

const float* E8m0Floats() { return T().e8m0; }

void DequantFp8Blocks(const uint8_t* w, const uint8_t* scales, int64_t rows, int64_t cols, int br, int bc, float* out) {
  CheckBlocks("DequantFp8Blocks", rows, cols, br, bc);
  const Tables& t = T();
  const int64_t scols = (cols + bc - 1) / bc;
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* srow = scales + (r / br) * scols;
    const uint8_t* wr = w + r * cols;
    float* o = out + r * cols;
    for (int64_t b = 0; b < scols; ++b) {
      const float s = t.e8m0[srow[b]];
      const int64_t c1 = std::min<int64_t>(cols, (b + 1) * bc);
      for (int64_t c = b * bc; c < c1; ++c) o[c] = t.e4m3[wr[c]] * s;
    }
  }
}

void QuantFp8Blocks(const float* x, int64_t rows, int64_t cols, int br, int bc, uint8_t* w, uint8_t* scales) {
  CheckBlocks("QuantFp8Blocks", rows, cols, br, bc);
  const int64_t srows = (rows + br - 1) / br, scols = (cols + bc - 1) / bc;
  // Each row of blocks read row by row (a block's amax is a maximum, whatever order its elements
  // come in; block by block, the row stride cost a cache and TLB miss per 32 values).
  std::vector<float> amax(static_cast<size_t>(scols)), inv(static_cast<size_t>(scols));  // [scols]
  for (int64_t sr = 0; sr < srows; ++sr) {
    const int64_t r1 = std::min<int64_t>(rows, (sr + 1) * br);
    std::fill(amax.begin(), amax.end(), 0.0f);
    for (int64_t r = sr * br; r < r1; ++r)
      for (int64_t sc = 0; sc < scols; ++sc) {
        const int64_t c1 = std::min<int64_t>(cols, (sc + 1) * bc);
        amax[size_t(sc)] = AbsMax(x + r * cols + sc * bc, c1 - sc * bc, amax[size_t(sc)]);
      }
    for (int64_t sc = 0; sc < scols; ++sc) {
      const uint8_t s = Ue8m0ScaleFor(amax[size_t(sc)], 1.0f / kE4M3Max);
      scales[sr * scols + sc] = s;
      inv[size_t(sc)] = std::ldexp(1.0f, 127 - int(s));  // exact reciprocal of a power of two
    }
    for (int64_t r = sr * br; r < r1; ++r)
      for (int64_t sc = 0; sc < scols; ++sc) {
        const int64_t c1 = std::min<int64_t>(cols, (sc + 1) * bc);
        EncodeE4M3Run(x + r * cols + sc * bc, c1 - sc * bc, inv[size_t(sc)], w + r * cols + sc * bc);
      }
  }
}

void DequantFp4Packed(const uint8_t* packed, const uint8_t* scales, int64_t rows, int64_t cols, int block, float* out) {
  CheckBlocks("DequantFp4Packed", rows, cols, 1, block);
  if (cols % 2 != 0 || cols % block != 0)
    throw std::invalid_argument("DequantFp4Packed: expected cols divisible by 2 and by the block " + std::to_string(block) +
                                ", found " + std::to_string(cols));
  const Tables& t = T();
  const int64_t nb = cols / block;
  if (block % 2 != 0) {  // a byte straddles two blocks: element by element
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        const uint8_t byte = packed[r * (cols / 2) + c / 2];
        out[r * cols + c] = ((c % 2 == 0) ? t.e2m1_pair_lo[byte] : t.e2m1_pair_hi[byte]) * t.e8m0[scales[r * nb + c / block]];
      }
    return;
  }
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* pr = packed + r * (cols / 2);
    float* o = out + r * cols;
    for (int64_t b = 0; b < nb; ++b) {
      const float s = t.e8m0[scales[r * nb + b]];
      // Element 2k is the low nibble of byte k, 2k+1 the high one (block is even: a byte never
      // straddles two blocks).
      for (int64_t c = b * block; c < (b + 1) * block; c += 2) {
        const uint8_t byte = pr[c / 2];
        o[c] = t.e2m1_pair_lo[byte] * s;
        o[c + 1] = t.e2m1_pair_hi[byte] * s;
      }
    }
  }
}

void QuantFp4Packed(const float* x, int64_t rows, int64_t cols, int block, uint8_t* packed, uint8_t* scales) {
  CheckBlocks("QuantFp4Packed", rows, cols, 1, block);
  if (cols % 2 != 0 || cols % block != 0)
    throw std::invalid_argument("QuantFp4Packed: expected cols divisible by 2 and by the block " + std::to_string(block) +
                                ", found " + std::to_string(cols));
  const int64_t nb = cols / block;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t s = Ue8m0ScaleFor(AbsMax(x + r * cols + b * block, block, 0.0f), 1.0f / kE2M1Max);
      scales[r * nb + b] = s;
      const float inv = std::ldexp(1.0f, 127 - int(s));
      EncodeE2M1PairsRun(x + r * cols + b * block, block, inv, packed + r * (cols / 2) + b * block / 2);
    }
}

}  // namespace cedar::kernels
