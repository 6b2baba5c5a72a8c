// The released number formats: every E4M3, E2M1 and E8M0 code against values computed here from
// the bit-field definitions (not by the code under test), the encoders' round-to-nearest-even with
// saturation, the power-of-two scale rule, and the block layouts' round trips.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <span>
#include <stdexcept>
#include <vector>

#include "kernels/quant_formats.h"
#include "kernels/weight_quantize.h"

using namespace cedar::kernels;

namespace {
// E4M3 "fn": sign | 4 exponent bits (bias 7) | 3 mantissa bits; S.1111.111 is NaN, no infinities.
double E4M3FromBits(int code) {
  const int s = code >> 7, e = (code >> 3) & 15, m = code & 7;
  if (e == 15 && m == 7) return NAN;
  const double mag = e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1.0 + m / 8.0, e - 7);
  return s ? -mag : mag;
}
// E2M1: sign | 2 exponent bits (bias 1) | 1 mantissa bit; exponent 0 is subnormal (m * 0.5).
double E2M1FromBits(int code) {
  const int s = code >> 3, e = (code >> 1) & 3, m = code & 1;
  const double mag = e == 0 ? m * 0.5 : std::ldexp(1.0 + m / 2.0, e - 1);
  return s ? -mag : mag;
}
bool SameValue(double want, float got) { return (std::isnan(want) && std::isnan(got)) || (double(got) == want && std::signbit(want) == std::signbit(got)); }
}  // namespace

TEST_CASE("all 256 E4M3 codes decode as their bit fields say") {
  for (int code = 0; code < 256; ++code) CHECK_MESSAGE(SameValue(E4M3FromBits(code), DecodeE4M3(uint8_t(code))), "code " << code);
  CHECK(DecodeE4M3(0x7E) == 448.0f);
  CHECK(DecodeE4M3(0xFE) == -448.0f);
  CHECK(DecodeE4M3(0x38) == 1.0f);
  CHECK(DecodeE4M3(0x01) == std::ldexp(1.0f, -9));
  CHECK(DecodeE4M3(0x08) == std::ldexp(1.0f, -6));
  CHECK(std::isnan(DecodeE4M3(0x7F)));
  CHECK(std::isnan(DecodeE4M3(0xFF)));
}

TEST_CASE("all 16 E2M1 codes and all 256 E8M0 scales") {
  const double want[16] = {0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6};
  for (int code = 0; code < 16; ++code) {
    CHECK(SameValue(E2M1FromBits(code), DecodeE2M1(uint8_t(code))));
    CHECK(SameValue(want[code], DecodeE2M1(uint8_t(code))));
  }
  for (int code = 0; code < 255; ++code) CHECK_MESSAGE(double(DecodeE8M0(uint8_t(code))) == std::pow(2.0, code - 127), "code " << code);
  CHECK(std::isnan(DecodeE8M0(0xFF)));
}

TEST_CASE("E4M3 encoding: exact codes round trip, ties go to even, saturation at 448") {
  for (int code = 0; code < 256; ++code) {
    if (code == 0x7F || code == 0xFF) continue;
    CHECK_MESSAGE(EncodeE4M3(float(E4M3FromBits(code))) == code, "code " << code);
  }
  // Between adjacent positive codes: the midpoint goes to the even code, anything off it to the nearer.
  for (int code = 0; code < 0x7E; ++code) {
    const double a = E4M3FromBits(code), b = E4M3FromBits(code + 1), mid = 0.5 * (a + b);
    const int even = (code % 2 == 0) ? code : code + 1;
    CHECK_MESSAGE(EncodeE4M3(float(mid)) == even, "between " << code << " and " << code + 1);
    CHECK(EncodeE4M3(float(mid - (b - a) / 8)) == code);
    CHECK(EncodeE4M3(float(mid + (b - a) / 8)) == code + 1);
    CHECK(EncodeE4M3(-float(mid)) == (0x80 | even));
  }
  CHECK(EncodeE4M3(449.0f) == 0x7E);
  CHECK(EncodeE4M3(1e30f) == 0x7E);
  CHECK(EncodeE4M3(-INFINITY) == 0xFE);
  CHECK(EncodeE4M3(NAN) == 0x7F);
  CHECK(EncodeE4M3(std::ldexp(1.0f, -11)) == 0x00);
  CHECK(EncodeE4M3(-0.0f) == 0x80);
}

TEST_CASE("E2M1 encoding: ties to even, saturation at 6") {
  for (int code = 0; code < 16; ++code) {
    if (code == 8) continue;  // -0 encodes as 0x8 as well; checked below
    CHECK(EncodeE2M1(float(E2M1FromBits(code))) == code);
  }
  CHECK(EncodeE2M1(-0.0f) == 0x8);
  // Midpoints of the grid 0, .5, 1, 1.5, 2, 3, 4, 6 go to the code whose mantissa bit is 0.
  CHECK(EncodeE2M1(0.25f) == 0);
  CHECK(EncodeE2M1(0.75f) == 2);
  CHECK(EncodeE2M1(1.25f) == 2);
  CHECK(EncodeE2M1(1.75f) == 4);
  CHECK(EncodeE2M1(2.5f) == 4);
  CHECK(EncodeE2M1(3.5f) == 6);
  CHECK(EncodeE2M1(5.0f) == 6);
  CHECK(EncodeE2M1(5.01f) == 7);
  CHECK(EncodeE2M1(0.26f) == 1);
  CHECK(EncodeE2M1(-0.75f) == 0xA);
  CHECK(EncodeE2M1(100.0f) == 7);
  CHECK(EncodeE2M1(-INFINITY) == 0xF);
}

TEST_CASE("the released block scale is 2^ceil(log2(amax / max)) on the float bits") {
  // Independent: the ceiling of log2 of amax * (1/max) in float, away from power-of-two boundaries.
  auto want = [](float amax, float inv) { return int(std::ceil(std::log2(double(amax * inv)))) + 127; };
  for (float amax : {100.0f, 3000.0f, 0.37f, 1e-3f, 12345.0f}) CHECK(Ue8m0ScaleFor(amax, 1.0f / 448.0f) == want(amax, 1.0f / 448.0f));
  for (float amax : {1.0f, 7.0f, 0.01f, 1000.0f}) CHECK(Ue8m0ScaleFor(amax, 1.0f / 6.0f) == want(amax, 1.0f / 6.0f));
  // An exact power of two stays (no mantissa bits): amax * inv = 2^-3 exactly.
  CHECK(Ue8m0ScaleFor(0.5f, 0.25f) == 127 - 3);
  // One ulp above a power of two rounds up to the next one.
  CHECK(Ue8m0ScaleFor(std::nextafter(0.5f, 1.0f), 0.25f) == 127 - 2);
  // Zero and NaN blocks use the floor 1e-4 (released act_quant clamps amax to 1e-4).
  CHECK(Ue8m0ScaleFor(0.0f, 1.0f / 448.0f) == want(1e-4f, 1.0f / 448.0f));
  CHECK(Ue8m0ScaleFor(NAN, 1.0f / 448.0f) == want(1e-4f, 1.0f / 448.0f));
}

TEST_CASE("FP8 weights with 32x32 E8M0 blocks round trip") {
  const int64_t rows = 70, cols = 100;  // ragged edges: scale grid ceil(70/32) x ceil(100/32) = 3 x 4
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(size_t(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) x[size_t(r * cols + c)] = nd(rng) * std::ldexp(1.0f, int((r / 32) * 4 + c / 32) - 6);
  std::vector<uint8_t> w(x.size()), s(3 * 4);
  QuantFp8Blocks(x.data(), rows, cols, 32, 32, w.data(), s.data());
  std::vector<float> y(x.size());
  DequantFp8Blocks(w.data(), s.data(), rows, cols, 32, 32, y.data());
  for (int64_t br = 0; br < 3; ++br)
    for (int64_t bc = 0; bc < 4; ++bc) {
      float amax = 0;
      for (int64_t r = br * 32; r < std::min<int64_t>(rows, br * 32 + 32); ++r)
        for (int64_t c = bc * 32; c < std::min<int64_t>(cols, bc * 32 + 32); ++c) amax = std::max(amax, std::fabs(x[size_t(r * cols + c)]));
      const double scale = std::pow(2.0, int(s[size_t(br * 4 + bc)]) - 127);
      // The block's scale is the smallest power of two putting amax within 448.
      CHECK(amax / scale <= 448.0);
      CHECK(amax / scale > 224.0);
    }
  for (size_t i = 0; i < x.size(); ++i) {
    // E4M3 keeps 3 mantissa bits: relative error <= 2^-4 for normals; absolute <= half a subnormal step.
    const int64_t r = int64_t(i) / cols, c = int64_t(i) % cols;
    const double scale = std::pow(2.0, int(s[size_t((r / 32) * 4 + c / 32)]) - 127);
    CHECK(std::fabs(double(y[i]) - x[i]) <= std::max(std::fabs(double(x[i])) / 16, scale * std::ldexp(1.0, -10)));
  }
  // Quantising the dequantised values gives them back exactly (they are on the grid; a block whose
  // amax rounded down to a power of two may take half the scale, which keeps every value exact).
  std::vector<uint8_t> w2(w.size()), s2(s.size());
  QuantFp8Blocks(y.data(), rows, cols, 32, 32, w2.data(), s2.data());
  std::vector<float> y2(y.size());
  DequantFp8Blocks(w2.data(), s2.data(), rows, cols, 32, 32, y2.data());
  CHECK(y2 == y);
}

TEST_CASE("packed FP4: the low nibble is the first value, one E8M0 scale per 32 values") {
  // Row [0.5, 1.0, 0, ..., 0, -6] scaled by 2^1: byte 0 holds codes 1 (low) and 2 (high).
  std::vector<uint8_t> packed(16, 0), scales(1, 128);
  packed[0] = 0x21;
  packed[15] = 0xF0;  // element 31 = high nibble of byte 15 = code 0xF = -6
  std::vector<float> out(32);
  DequantFp4Packed(packed.data(), scales.data(), 1, 32, 32, out.data());
  CHECK(out[0] == 1.0f);
  CHECK(out[1] == 2.0f);
  CHECK(out[2] == 0.0f);
  CHECK(out[30] == 0.0f);
  CHECK(out[31] == -12.0f);
  // Round trip of values on the grid: exact.
  const int64_t rows = 3, cols = 64;
  std::vector<float> x(size_t(rows * cols));
  const float grid[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
  for (size_t i = 0; i < x.size(); ++i) x[i] = (i % 3 == 0 ? -1.0f : 1.0f) * grid[i % 8] * std::ldexp(1.0f, int(i / 32) % 5 - 2);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < 2; ++b) x[size_t(r * cols + b * 32 + 7)] = 6.0f * std::ldexp(1.0f, int((r * cols + b * 32) / 32) % 5 - 2);
  std::vector<uint8_t> p(size_t(rows * cols / 2)), sc(size_t(rows * 2));
  QuantFp4Packed(x.data(), rows, cols, 32, p.data(), sc.data());
  std::vector<float> y(x.size());
  DequantFp4Packed(p.data(), sc.data(), rows, cols, 32, y.data());
  for (size_t i = 0; i < x.size(); ++i) CHECK_MESSAGE(y[i] == x[i], "element " << i);
  CHECK_THROWS_AS(DequantFp4Packed(p.data(), sc.data(), 1, 33, 32, y.data()), std::invalid_argument);
}

namespace {
// The nearest of `n` magnitudes mag(0..n-1) to a (ties to the even code, saturating at the last):
// the definition the encoders implement, by search.
template <class Mag>
int NearestCode(double a, int n, Mag mag) {
  if (a >= mag(n - 1)) return n - 1;
  int best = 0;
  for (int c = 1; c < n; ++c) {
    const double d = std::fabs(a - mag(c)), db = std::fabs(a - mag(best));
    if (d < db || (d == db && c % 2 == 0)) best = c;
  }
  return best;
}
int WantE4M3(float x) {
  if (std::isnan(x)) return 0x7F;
  return (std::signbit(x) ? 0x80 : 0) | NearestCode(std::fabs(double(x)), 0x7F, E4M3FromBits);
}
int WantE2M1(float x) {
  if (std::isnan(x)) return 0x7;
  return (std::signbit(x) ? 0x8 : 0) | NearestCode(std::fabs(double(x)), 8, E2M1FromBits);
}
float FromBits(uint32_t u) {
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}
}  // namespace

TEST_CASE("the encoders equal a nearest-value search across the float range") {
  // Every 4099th bit pattern (both signs, zeros, subnormals, NaNs, infinities among them), then
  // each midpoint between neighbouring codes and the floats on either side of it. (The encoders
  // compare float bits and round on them; all 2^32 inputs matched the earlier table search.)
  int bad = 0;
  auto check = [&](float x) {
    if (int(EncodeE4M3(x)) != WantE4M3(x) && bad++ < 10) FAIL_CHECK("E4M3 of " << x << ": " << int(EncodeE4M3(x)) << ", want " << WantE4M3(x));
    if (int(EncodeE2M1(x)) != WantE2M1(x) && bad++ < 10) FAIL_CHECK("E2M1 of " << x << ": " << int(EncodeE2M1(x)) << ", want " << WantE2M1(x));
  };
  for (uint64_t u = 0; u < (uint64_t(1) << 32); u += 4099) check(FromBits(uint32_t(u)));
  auto around = [&](double mid) {
    for (float s : {1.0f, -1.0f}) {
      const float m = float(mid) * s;
      for (float x : {m, std::nextafter(m, 0.0f), std::nextafter(m, 2 * m)}) check(x);
    }
  };
  for (int c = 0; c + 1 < 0x7F; ++c) around(0.5 * (E4M3FromBits(c) + E4M3FromBits(c + 1)));
  for (int c = 0; c + 1 < 8; ++c) around(0.5 * (E2M1FromBits(c) + E2M1FromBits(c + 1)));
  for (float x : {0.0f, -0.0f, 448.0f, 464.0f, 480.0f, 6.0f, 7.0f, INFINITY, -INFINITY, NAN, 0x1p-6f, 0x1p-10f, 0x1p-126f, 0x1p-149f}) check(x);
  CHECK(bad == 0);
}

TEST_CASE("QuantizeWeight's FP8 and FP4 on the thread pool: every scale and code as the scalar rule gives") {
  // Ragged FP8 blocks (70 x 100 on 32 x 32: three rows of blocks, split over the pool's threads),
  // NaN / infinite / huge / tiny values inside blocks.
  const int64_t rows = 70, cols = 100;
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(size_t(rows * cols));
  for (size_t i = 0; i < x.size(); ++i) x[i] = nd(rng) * std::ldexp(1.0f, int(i % 23) - 11);
  x[3] = NAN, x[140] = INFINITY, x[300] = -1e30f, x[555] = 1e-40f, x[4000] = -0.0f;
  auto amax_of = [&](int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
    float m = 0.0f;
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t c = c0; c < c1; ++c) m = std::max(m, std::fabs(x[size_t(r * cols + c)]));  // NaN left out
    return m;
  };
  const OwnedWeight q8 = QuantizeWeight(x, rows, cols, WeightType::kFP8);
  const std::vector<uint8_t>& w = q8.data;
  const std::vector<uint8_t>& s = q8.scales;
  REQUIRE(w.size() == x.size());
  REQUIRE(s.size() == 3 * 4);
  for (int64_t br = 0; br < 3; ++br)
    for (int64_t bc = 0; bc < 4; ++bc) {
      const int64_t r0 = br * 32, r1 = std::min<int64_t>(rows, r0 + 32), c0 = bc * 32, c1 = std::min<int64_t>(cols, c0 + 32);
      const uint8_t sc = Ue8m0ScaleFor(amax_of(r0, r1, c0, c1), 1.0f / kE4M3Max);
      CHECK(s[size_t(br * 4 + bc)] == sc);
      const float inv = std::ldexp(1.0f, 127 - int(sc));
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t c = c0; c < c1; ++c)
          CHECK_MESSAGE(int(w[size_t(r * cols + c)]) == WantE4M3(x[size_t(r * cols + c)] * inv), "row " << r << " col " << c);
    }
  // FP4: 70 rows of 96 (three blocks of 32 a row), the rows split over the threads.
  const int64_t fc = 96;
  const OwnedWeight q4 = QuantizeWeight(std::span<const float>(x.data(), size_t(rows * fc)), rows, fc, WeightType::kFP4);
  const std::vector<uint8_t>& p = q4.data;
  const std::vector<uint8_t>& ps = q4.scales;
  REQUIRE(p.size() == size_t(rows * fc / 2));
  REQUIRE(ps.size() == size_t(rows * 3));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < 3; ++b) {
      float m = 0.0f;
      for (int64_t c = b * 32; c < b * 32 + 32; ++c) m = std::max(m, std::fabs(x[size_t(r * fc + c)]));
      const uint8_t sc = Ue8m0ScaleFor(m, 1.0f / kE2M1Max);
      CHECK(ps[size_t(r * 3 + b)] == sc);
      const float inv = std::ldexp(1.0f, 127 - int(sc));
      for (int64_t c = b * 32; c < b * 32 + 32; ++c) {
        const int nib = (p[size_t((r * fc + c) / 2)] >> (c % 2 ? 4 : 0)) & 0xF;
        CHECK_MESSAGE(nib == WantE2M1(x[size_t(r * fc + c)] * inv), "row " << r << " col " << c);
      }
    }
  CHECK_THROWS_AS(QuantizeWeight(std::span<const float>(x.data(), 70 * 40), 70, 40, WeightType::kFP4), std::invalid_argument);
}
