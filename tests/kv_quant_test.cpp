// The released KV row formats (kernels/kv_quant.h) against values computed independently here:
// the format grids from their bit fields, the scale rules as docs/v41-contract.md §3 states them,
// nearest-value search in double precision with ties to the even code; against the boundary cases
// another engine's test of the released kernel pins; and against the codes of the Python reference
// (tools/reference/v41/quant.py, via tests/golden/v41_components.json).
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <random>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/kv_quant.h"

using namespace cedar::kernels;

namespace {

// Non-negative grid values by code, from the bit fields (codes 0..7 of E2M1, 0..126 of E4M3).
std::vector<double> E2M1Grid() {
  std::vector<double> g;
  for (int code = 0; code < 8; ++code) {
    const int e = code >> 1, m = code & 1;
    g.push_back(e == 0 ? m * 0.5 : std::ldexp(1.0 + m / 2.0, e - 1));
  }
  return g;
}
std::vector<double> E4M3Grid() {
  std::vector<double> g;
  for (int code = 0; code < 127; ++code) {
    const int e = code >> 3, m = code & 7;
    g.push_back(e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1.0 + m / 8.0, e - 7));
  }
  return g;
}

// Nearest grid value to |x| (ties to the even code, saturating at the top), sign kept.
double Nearest(const std::vector<double>& grid, double x) {
  const double a = std::fabs(x);
  size_t best = 0;
  for (size_t i = 1; i < grid.size(); ++i) {
    const double d = std::fabs(grid[i] - a), db = std::fabs(grid[best] - a);
    if (d < db || (d == db && i % 2 == 0)) best = i;
  }
  if (a >= grid.back()) best = grid.size() - 1;
  return std::copysign(grid[best], x);
}

// 2^ceil(log2 t) of a positive float, via frexp (t = f * 2^e, f in [0.5, 1)).
double Pow2Ceil(float t) {
  int e = 0;
  const double f = std::frexp(double(t), &e);
  return std::ldexp(1.0, f == 0.5 ? e - 1 : e);
}

// The released quantise-dequantise of one row, written from the rules in the contract.
std::vector<float> Expected(KvRowFormat f, const std::vector<float>& x) {
  static const std::vector<double> e2m1 = E2M1Grid(), e4m3 = E4M3Grid();
  const int block = f == KvRowFormat::kFp4E4m3 ? 16 : 32;
  std::vector<float> out(x.size());
  for (size_t b0 = 0; b0 < x.size(); b0 += size_t(block)) {
    float amax = 0;
    for (int i = 0; i < block; ++i) amax = std::max(amax, std::fabs(x[b0 + size_t(i)]));
    double s = 0;
    if (f == KvRowFormat::kFp8Ue8m0) s = Pow2Ceil(std::max(amax, 1e-4f) * float(1.0 / 448.0));
    if (f == KvRowFormat::kMxfp4) s = Pow2Ceil(std::max(amax, float(6 * std::ldexp(1.0, -126))) * float(1.0 / 6.0));
    if (f == KvRowFormat::kFp4E4m3) s = Nearest(e4m3, double(std::max(amax, float(6 * std::ldexp(1.0, -9))) / 6.0f));
    for (int i = 0; i < block; ++i) {
      const float q = x[b0 + size_t(i)] / float(s);  // float32 division, as released
      const double v = f == KvRowFormat::kFp8Ue8m0 ? Nearest(e4m3, q) : Nearest(e2m1, q);
      out[b0 + size_t(i)] = float(v * s);  // exact: few significant bits
    }
  }
  return out;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Rows of many magnitudes: normal values, tiny ones (scale floors, subnormal E4M3 scales), zeros,
// exact grid midpoints times powers of two, and large ones (E4M3 scale saturation).
std::vector<std::vector<float>> TestRows(int n, int count) {
  std::mt19937_64 rng(42);
  std::normal_distribution<float> nd(0, 1);
  std::vector<std::vector<float>> rows;
  const float mags[] = {1.0f, 1e-3f, 3e-5f, 1e-8f, 0.05f, 37.0f, 900.0f, 5000.0f};
  const float mids[] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, 1.0625f, 1.1875f, 9.0f, 11.0f};
  for (int r = 0; r < count; ++r) {
    std::vector<float> x(static_cast<size_t>(n), 0.0f);
    const float mag = mags[r % 8];
    for (int i = 0; i < n; ++i) {
      const int kind = int(rng() % 10);
      if (kind == 0) x[size_t(i)] = 0.0f;
      else if (kind == 1) x[size_t(i)] = std::ldexp(mids[rng() % 11], int(rng() % 7) - 3) * (rng() % 2 ? 1.0f : -1.0f);
      else x[size_t(i)] = nd(rng) * mag;
    }
    if (r % 5 == 0) std::fill(x.begin(), x.begin() + 16, 0.0f);  // an all-zero block
    rows.push_back(x);
  }
  return rows;
}

const KvRowFormat kFormats[] = {KvRowFormat::kFp8Ue8m0, KvRowFormat::kFp4E4m3, KvRowFormat::kMxfp4};

}  // namespace

TEST_CASE("row sizes: window 528, main entry 288 bytes at c = 512, index key 68 at 128") {
  CHECK(KvRowBytes(KvRowFormat::kFp8Ue8m0, 512) == 512 + 16);
  CHECK(KvRowBytes(KvRowFormat::kFp4E4m3, 512) == 256 + 32);
  CHECK(KvRowBytes(KvRowFormat::kMxfp4, 128) == 64 + 4);
  CHECK(KvBlock(KvRowFormat::kFp4E4m3) == 16);
  CHECK_THROWS_WITH_AS(QdqKvRows(KvRowFormat::kMxfp4, nullptr, 1, 48), doctest::Contains("multiple of 32"), std::invalid_argument);
}

TEST_CASE("quantise-dequantise equals the rules computed independently, bit for bit, in all three formats") {
  for (KvRowFormat f : kFormats) {
    CAPTURE(KvFormatName(f));
    int checked = 0;
    for (const std::vector<float>& x : TestRows(128, 400)) {
      std::vector<float> got = x;
      QdqKvRows(f, got.data(), 1, 128);
      const std::vector<float> want = Expected(f, x);
      CHECK(SameBits(got, want));
      // The stored bytes decode to the same values.
      std::vector<uint8_t> bytes(KvRowBytes(f, 128));
      EncodeKvRow(f, x.data(), 128, bytes.data());
      std::vector<float> back(128);
      DecodeKvRow(f, bytes.data(), 128, back.data());
      CHECK(SameBits(back, want));
      ++checked;
    }
    CHECK(checked == 400);
  }
}

TEST_CASE("the boundary cases of the released compressed-KV quantiser (amax floor, E4M3 ties, saturation)") {
  // Blocks of 16 equal values v -> each reads back as listed (an engine's test of the released
  // kernel, docs/v41-contract.md [KVQ-S]): the floor makes an all-zero block and a tiny one read 0,
  // 6*1.0625/6 ties down to the scale 1 (-> 6), 6*1.1875/6 ties up to 1.25 (-> 7.5), and past
  // 6*448 the scale saturates at 448 (-> 2688).
  const float in[] = {0.0f, 0x1p-12f, 6 * 0x1p-9f, 6 * 1.0625f, 6 * 1.1875f, 6 * 448.0f, 1e6f};
  const float out[] = {0.0f, 0.0f, 6 * 0x1p-9f, 6.0f, 7.5f, 2688.0f, 2688.0f};
  for (size_t k = 0; k < 7; ++k) {
    CAPTURE(in[k]);
    std::vector<float> x(16, in[k]);
    QdqKvRows(KvRowFormat::kFp4E4m3, x.data(), 1, 16);
    for (float v : x) CHECK(v == out[k]);
  }
  // A block with amax 7: scale E4M3(7/6) = 1.125; 7 -> 6, 1 -> 1, -3.5 -> -3 (times 1.125).
  std::vector<float> x(16, 0.0f);
  x[0] = 7.0f, x[1] = 1.0f, x[2] = -3.5f;
  std::vector<uint8_t> b(KvRowBytes(KvRowFormat::kFp4E4m3, 16));
  EncodeKvRow(KvRowFormat::kFp4E4m3, x.data(), 16, b.data());
  CHECK(b[8] == 0x39);                // E4M3 1.125: exponent field 7, mantissa 1
  CHECK((b[0] & 0x0F) == 0x7);        // 6 (element 0 in the low nibble)
  CHECK((b[0] >> 4) == 0x2);          // 1
  CHECK((b[1] & 0x0F) == (0x8 | 5));  // -3
}

TEST_CASE("the stored codes equal the Python reference's (tools/reference/v41/quant.py goldens)") {
  std::ifstream in(std::string(CEDAR_SOURCE_DIR) + "/tests/golden/v41_components.json");
  REQUIRE(in.good());
  const nlohmann::json j = nlohmann::json::parse(in);
  REQUIRE(j.contains("quant"));
  int cases = 0;
  for (const auto& q : j["quant"]) {
    const std::vector<float> x = q["input"].get<std::vector<float>>();
    struct {
      const char* key;
      KvRowFormat f;
      size_t n;
    } kinds[] = {{"fp8_ue8m0_32", KvRowFormat::kFp8Ue8m0, x.size()},
                 {"fp4_e4m3_16", KvRowFormat::kFp4E4m3, x.size()},
                 {"mxfp4_32_first128", KvRowFormat::kMxfp4, 128}};
    for (const auto& k : kinds) {
      CAPTURE(k.key);
      const auto& g = q[k.key];
      const std::vector<int> codes = g["codes"].get<std::vector<int>>(), scales = g["scales"].get<std::vector<int>>();
      const std::vector<double> values = g["values"].get<std::vector<double>>();
      REQUIRE(codes.size() == k.n);
      std::vector<uint8_t> b(KvRowBytes(k.f, int(k.n)));
      EncodeKvRow(k.f, x.data(), int(k.n), b.data());
      const bool fp4 = k.f != KvRowFormat::kFp8Ue8m0;
      const size_t code_bytes = fp4 ? k.n / 2 : k.n;
      int code_mismatches = 0, value_mismatches = 0;
      for (size_t i = 0; i < k.n; ++i) {
        const int c = fp4 ? (i % 2 ? b[i / 2] >> 4 : b[i / 2] & 0xF) : b[i];
        code_mismatches += c != codes[i];
      }
      for (size_t s = 0; s < scales.size(); ++s) CHECK(int(b[code_bytes + s]) == scales[s]);
      std::vector<float> v(k.n);
      DecodeKvRow(k.f, b.data(), int(k.n), v.data());
      for (size_t i = 0; i < k.n; ++i) value_mismatches += double(v[i]) != values[i];
      CHECK(code_mismatches == 0);
      CHECK(value_mismatches == 0);
    }
    ++cases;
  }
  CHECK(cases == 3);
}

TEST_CASE("rounded rows re-encode to bytes that decode to the same bits; other rows are refused") {
  for (KvRowFormat f : kFormats) {
    CAPTURE(KvFormatName(f));
    for (std::vector<float> x : TestRows(64, 200)) {
      QdqKvRows(f, x.data(), 1, 64);
      std::vector<uint8_t> b(KvRowBytes(f, 64));
      REQUIRE(EncodeRoundedKvRow(f, x.data(), 64, b.data()));
      std::vector<float> back(64);
      DecodeKvRow(f, b.data(), 64, back.data());
      CHECK(SameBits(back, x));
    }
    // 1 and 1 + 2^-10 in one block: no scale puts both on the grid.
    std::vector<float> bad(64, 1.0f);
    bad[1] = 1.0f + 0x1p-10f;
    std::vector<uint8_t> b(KvRowBytes(f, 64));
    CHECK_FALSE(EncodeRoundedKvRow(f, bad.data(), 64, b.data()));
  }
}
