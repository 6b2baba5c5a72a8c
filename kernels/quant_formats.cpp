#include "kernels/quant_formats.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>

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

uint8_t EncodeE4M3(float x) {
  if (std::isnan(x)) return 0x7F;
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  const float a = std::fabs(x);
  if (a >= kE4M3Max) return sign | 0x7E;
  if (a < 0x1p-6f) {
    // Subnormal range: a multiple of 2^-9; nearbyint rounds ties to even (default mode). A result
    // of 8 is the smallest normal (exponent field 1, mantissa 0), so the code arithmetic holds.
    const int q = int(std::nearbyint(a * 512.0f));
    return sign | uint8_t(q);
  }
  int e2 = 0;
  const float frac = std::frexp(a, &e2);  // a = frac * 2^e2, frac in [0.5, 1)
  int e = e2 - 1;                         // a = m * 2^e, m in [1, 2)
  int q = int(std::nearbyint((frac * 2.0f - 1.0f) * 8.0f));  // exact: frac has 24 bits
  if (q == 8) {
    q = 0;
    ++e;
  }
  const int field = e + 7;
  const int code = (field << 3) | q;
  if (code > 0x7E) return sign | 0x7E;  // unreachable after the 448 check, kept for safety
  return sign | uint8_t(code);
}

uint8_t EncodeE2M1(float x) {
  if (std::isnan(x)) return 0x7;
  const uint8_t sign = std::signbit(x) ? 0x8 : 0x0;
  const float a = std::fabs(x);
  // Representable magnitudes by code 0..7; ties go to the even code (the one with mantissa 0).
  static const float kVal[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  if (a >= kE2M1Max) return sign | 0x7;
  int lo = 0;
  while (lo < 7 && kVal[lo + 1] <= a) ++lo;
  if (kVal[lo] == a) return sign | uint8_t(lo);
  const float mid = 0.5f * (kVal[lo] + kVal[lo + 1]);  // exact in float
  int code;
  if (a < mid) code = lo;
  else if (a > mid) code = lo + 1;
  else code = (lo % 2 == 0) ? lo : lo + 1;
  return sign | uint8_t(code);
}

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
  for (int64_t sr = 0; sr < srows; ++sr)
    for (int64_t sc = 0; sc < scols; ++sc) {
      const int64_t r1 = std::min<int64_t>(rows, (sr + 1) * br), c1 = std::min<int64_t>(cols, (sc + 1) * bc);
      float amax = 0;
      for (int64_t r = sr * br; r < r1; ++r)
        for (int64_t c = sc * bc; c < c1; ++c) amax = std::max(amax, std::fabs(x[r * cols + c]));
      const uint8_t s = Ue8m0ScaleFor(amax, 1.0f / kE4M3Max);
      scales[sr * scols + sc] = s;
      const float inv = std::ldexp(1.0f, 127 - int(s));  // exact reciprocal of a power of two
      for (int64_t r = sr * br; r < r1; ++r)
        for (int64_t c = sc * bc; c < c1; ++c) w[r * cols + c] = EncodeE4M3(x[r * cols + c] * inv);
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
      float amax = 0;
      for (int64_t c = b * block; c < (b + 1) * block; ++c) amax = std::max(amax, std::fabs(x[r * cols + c]));
      const uint8_t s = Ue8m0ScaleFor(amax, 1.0f / kE2M1Max);
      scales[r * nb + b] = s;
      const float inv = std::ldexp(1.0f, 127 - int(s));
      for (int64_t c = b * block; c < (b + 1) * block; c += 2) {
        const uint8_t lo = EncodeE2M1(x[r * cols + c] * inv), hi = EncodeE2M1(x[r * cols + c + 1] * inv);
        packed[r * (cols / 2) + c / 2] = uint8_t(lo | (hi << 4));
      }
    }
}

}  // namespace cedar::kernels
