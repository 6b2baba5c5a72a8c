#include "kernels/kv_quant.h"

#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

#include "kernels/quant_formats.h"
#include "kernels/thread_pool.h"

namespace cedar::kernels {

namespace {

// One format: block width, value type (E2M1 or E4M3), scale type (E4M3 or UE8M0).
struct Spec {
  int block;
  bool fp4;         // values E2M1 (else E4M3)
  bool e4m3_scale;  // scale E4M3 (else UE8M0)
};

Spec SpecOf(KvRowFormat f) {
  switch (f) {
    case KvRowFormat::kFp8Ue8m0: return {32, false, false};
    case KvRowFormat::kFp4E4m3: return {16, true, true};
    case KvRowFormat::kMxfp4: return {32, true, false};
  }
  throw std::invalid_argument("KvRowFormat: unknown format");
}

void CheckWidth(KvRowFormat f, int n) {
  if (n <= 0 || n % KvBlock(f) != 0)
    throw std::invalid_argument(std::string("KV row (") + KvFormatName(f) + "): expected a positive multiple of " +
                                std::to_string(KvBlock(f)) + " values, found " + std::to_string(n));
}

float ScaleValue(const Spec& s, uint8_t code) { return s.e4m3_scale ? DecodeE4M3(code) : DecodeE8M0(code); }
float CodeValue(const Spec& s, uint8_t code) { return s.fp4 ? DecodeE2M1(code) : DecodeE4M3(code); }

// The released scale rule for a block whose largest magnitude is amax (docs/v41-contract.md §3).
uint8_t RuleScale(const Spec& s, float amax) {
  if (s.e4m3_scale) {
    const float floor = 6.0f * 0x1p-9f;  // puts an all-zero block at the smallest E4M3 value, never 0
    const float a = amax >= floor ? amax : floor;
    return EncodeE4M3(a / 6.0f);  // float32 quotient, RNE, saturating at 448 (cvt.rn.satfinite)
  }
  if (s.fp4) return Ue8m0ScaleFor(amax, 1.0f / kE2M1Max, 6.0f * 0x1p-126f);
  return Ue8m0ScaleFor(amax, 1.0f / kE4M3Max, 1e-4f);
}

// Code of x under a scale value: x / scale in float32, clamped and rounded to nearest even.
uint8_t CodeOf(const Spec& s, float x, float scale) {
  const float q = x / scale;
  return s.fp4 ? EncodeE2M1(q) : EncodeE4M3(q);  // both saturate: clamp-then-cast
}

float BlockAmax(const float* x, int b) {
  float amax = 0.0f;
  for (int i = 0; i < b; ++i) amax = std::fmax(amax, std::fabs(x[i]));
  return amax;
}

void PutCode(const Spec& s, uint8_t* codes, int i, uint8_t code) {
  if (!s.fp4) {
    codes[i] = code;
  } else if (i % 2 == 0) {
    codes[i / 2] = uint8_t((codes[i / 2] & 0xF0) | (code & 0x0F));
  } else {
    codes[i / 2] = uint8_t((codes[i / 2] & 0x0F) | ((code & 0x0F) << 4));
  }
}

uint8_t GetCode(const Spec& s, const uint8_t* codes, int i) {
  if (!s.fp4) return codes[i];
  return (i % 2 == 0) ? uint8_t(codes[i / 2] & 0x0F) : uint8_t(codes[i / 2] >> 4);
}

size_t CodeBytes(const Spec& s, int n) { return s.fp4 ? size_t(n) / 2 : size_t(n); }

bool SameBits(float a, float b) {
  uint32_t x, y;
  std::memcpy(&x, &a, 4);
  std::memcpy(&y, &b, 4);
  return x == y;
}

// Encodes block `blk` of x [n] under scale code sc into out; true when it decodes to x bit for bit.
bool EncodeBlockAs(const Spec& s, const float* x, int n, int blk, uint8_t sc, uint8_t* out) {
  const float scale = ScaleValue(s, sc);
  if (!(scale > 0.0f)) return false;
  uint8_t* codes = out;
  bool exact = true;
  for (int i = blk * s.block; i < (blk + 1) * s.block; ++i) {
    const uint8_t code = CodeOf(s, x[i], scale);
    PutCode(s, codes, i, code);
    exact = exact && SameBits(CodeValue(s, code) * scale, x[i]);
  }
  out[CodeBytes(s, n) + size_t(blk)] = sc;
  return exact;
}

}  // namespace

int KvBlock(KvRowFormat f) { return SpecOf(f).block; }

size_t KvRowBytes(KvRowFormat f, int n) {
  const Spec s = SpecOf(f);
  return CodeBytes(s, n) + size_t(n / s.block);
}

const char* KvFormatName(KvRowFormat f) {
  switch (f) {
    case KvRowFormat::kFp8Ue8m0: return "FP8 E4M3 + UE8M0/32";
    case KvRowFormat::kFp4E4m3: return "FP4 E2M1 + E4M3/16";
    case KvRowFormat::kMxfp4: return "MXFP4 E2M1 + UE8M0/32";
  }
  return "?";
}

void QdqKvRows(KvRowFormat f, float* x, int64_t rows, int n) {
  CheckWidth(f, n);
  const Spec s = SpecOf(f);
  ParallelFor(rows, 16, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      float* row = x + r * n;
      for (int b0 = 0; b0 < n; b0 += s.block) {
        const float scale = ScaleValue(s, RuleScale(s, BlockAmax(row + b0, s.block)));
        for (int i = b0; i < b0 + s.block; ++i) row[i] = CodeValue(s, CodeOf(s, row[i], scale)) * scale;
      }
    }
  });
}

void EncodeKvRow(KvRowFormat f, const float* x, int n, uint8_t* out) {
  CheckWidth(f, n);
  const Spec s = SpecOf(f);
  std::memset(out, 0, KvRowBytes(f, n));
  for (int blk = 0; blk < n / s.block; ++blk)
    EncodeBlockAs(s, x, n, blk, RuleScale(s, BlockAmax(x + blk * s.block, s.block)), out);
}

void DecodeKvRow(KvRowFormat f, const uint8_t* in, int n, float* out) {
  CheckWidth(f, n);
  const Spec s = SpecOf(f);
  const uint8_t* scales = in + CodeBytes(s, n);
  for (int i = 0; i < n; ++i) out[i] = CodeValue(s, GetCode(s, in, i)) * ScaleValue(s, scales[i / s.block]);
}

bool EncodeRoundedKvRow(KvRowFormat f, const float* x, int n, uint8_t* out) {
  CheckWidth(f, n);
  const Spec s = SpecOf(f);
  std::memset(out, 0, KvRowBytes(f, n));
  for (int blk = 0; blk < n / s.block; ++blk) {
    if (EncodeBlockAs(s, x, n, blk, RuleScale(s, BlockAmax(x + blk * s.block, s.block)), out)) continue;
    // Every finite positive scale code: E4M3 0x01..0x7E, UE8M0 0..254.
    bool found = false;
    for (int sc = s.e4m3_scale ? 1 : 0; sc <= (s.e4m3_scale ? 0x7E : 254) && !found; ++sc)
      found = EncodeBlockAs(s, x, n, blk, uint8_t(sc), out);
    if (!found) return false;
  }
  return true;
}

}  // namespace cedar::kernels
