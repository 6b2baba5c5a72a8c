// FP8, FP4 and INT8 weights times BF16 activations (kernels/matmul_bf16a.cpp, SetBf16Activations):
// the products equal their scalar reference bit for bit (the order and vdpbf16ps's rounding are a
// definition, so the AVX-512 BF16 path and the scalar path give the same bits), including FP8
// subnormal and NaN codes, every INT8 code (-128 reads as -0), every E8M0 scale code, extreme
// INT8 scales and x with subnormals, zeros and huge values; a
// row of a few-row product equals that row alone; the error against the F32-activation product
// stays within what rounding x to bf16 allows; and shapes the path does not take (inputs not a
// multiple of 64, more than 16 rows, other types, mode off) give exactly the F32-activation product.
// FP8 and INT8 read x in pairs of blocks and FP4 in quads (a row of 192 ends in a half quad); with
// 8-bit activations on too, FP8 and FP4 take BF16 activations and INT8 stays on 8-bit ones.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#if defined(__AVX512F__) && defined(__AVX512BF16__)
#include <immintrin.h>
#endif

#include "kernels/cpu_internal.h"
#include "kernels/hsum_rows_avx512.h"
#include "kernels/ops.h"
#include "kernels/thread_pool.h"
#include "kernels/weight_quantize.h"
#include "kernels/weight_view.h"

namespace k = cedar::kernels;
using k::WeightType;

namespace {

std::vector<float> Random(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  for (size_t i = 0; i < n; i += 37) v[i] = 0.0f;
  return v;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), sizeof(float) * a.size()) == 0;
}

struct ModeOn {
  ModeOn() { k::SetBf16Activations(true); }
  ~ModeOn() { k::SetBf16Activations(false); }
};

// MatmulW against ref::MatmulBf16A (NaN equal to NaN), and every row of x alone against its row
// of the batch; returns the count of outputs that differ in either check.
int Mismatches(const std::vector<float>& x, const k::WeightView& w, int n) {
  const size_t out = size_t(w.rows);
  std::vector<float> y(size_t(n) * out), yr(size_t(n) * out), row(out);
  k::MatmulW(x.data(), w, y.data(), n);
  k::ref::MatmulBf16A(x.data(), w, yr.data(), n);
  auto same = [](float a, float b) { return std::isnan(a) ? std::isnan(b) : std::memcmp(&a, &b, sizeof a) == 0; };
  int bad = 0;
  for (size_t i = 0; i < y.size(); ++i) bad += !same(y[i], yr[i]);
  for (int b = 0; b < n && n > 1; ++b) {
    k::MatmulW(x.data() + size_t(b) * size_t(w.cols), w, row.data(), 1);
    for (size_t r = 0; r < out; ++r) bad += !same(row[r], y[size_t(b) * out + r]);
  }
  return bad;
}

}  // namespace

#if defined(__AVX512F__) && defined(__AVX512BF16__)
// The rounding the reference assumes, checked on the instruction itself: per lane, acc + the odd
// words' product rounded to nearest, then + the even words' product rounded, denormal inputs read
// as zero and denormal results flushed to a zero of their sign. Random words (a quarter with any
// exponent, so products and sums underflow and overflow), random accumulators.
TEST_CASE("vdpbf16ps adds the odd product, rounds, then the even one, flushing subnormals") {
  auto bf = [](uint16_t b) {
    const uint32_t u = uint32_t(b) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return std::fabs(f) < 0x1p-126f ? std::copysign(0.0f, f) : f;
  };
  auto ftz = [](float v) { return std::fabs(v) < 0x1p-126f ? std::copysign(0.0f, v) : v; };
  std::mt19937 g(1);
  int bad = 0, lanes = 0;
  for (int it = 0; it < 20000; ++it) {
    alignas(64) uint16_t a[32], b[32];
    alignas(64) float acc[16], out[16];
    for (int i = 0; i < 32; ++i) {
      a[i] = uint16_t(g()), b[i] = uint16_t(g());
      if (g() % 4) a[i] = uint16_t((a[i] & 0x807F) | ((120 + g() % 16) << 7)), b[i] = uint16_t((b[i] & 0x807F) | ((120 + g() % 16) << 7));
      if ((a[i] & 0x7F80) == 0x7F80) a[i] &= 0xBFFF;  // no Inf / NaN inputs
      if ((b[i] & 0x7F80) == 0x7F80) b[i] &= 0xBFFF;
    }
    for (float& v : acc) {
      uint32_t u = g();
      if (g() % 4) u = (u & 0x807FFFFF) | ((110 + g() % 30) << 23);
      if (((u >> 23) & 0xFF) == 0xFF) u &= 0xBFFFFFFF;
      std::memcpy(&v, &u, 4);
    }
    _mm512_store_ps(out, _mm512_dpbf16_ps(_mm512_load_ps(acc), (__m512bh)_mm512_load_si512(a), (__m512bh)_mm512_load_si512(b)));
    for (int i = 0; i < 16; ++i, ++lanes) {
      float t = ftz(acc[i]);
      t = ftz(std::fma(bf(a[2 * i + 1]), bf(b[2 * i + 1]), t));
      t = ftz(std::fma(bf(a[2 * i]), bf(b[2 * i]), t));
      bad += std::memcmp(&t, &out[i], 4) != 0 && !(std::isnan(t) && std::isnan(out[i]));
    }
  }
  INFO(bad << " of " << lanes << " lanes differ from the model");
  CHECK(bad == 0);
}
#endif

TEST_CASE("BF16-activation FP8, FP4 and INT8 products equal their scalar reference bit for bit, and each row equals it alone") {
  ModeOn on;
  INFO("vectorised (AVX-512 BF16 + VBMI): " << k::Bf16ActivationsVectorised());
  for (WeightType t : {WeightType::kFP8, WeightType::kFP4, WeightType::kI8})
    for (int threads : {1, 2}) {
      k::SetPoolThreads(threads);
      for (int n : {1, 2, 5, 8, 9, 16})
        for (int in : {64, 192, 1024})
          for (int out : {1, 7, 70, 263}) {  // 70 and 263: decode reads a slice in parts
            const auto x = Random(size_t(n) * in, 10 + n + in), w = Random(size_t(out) * in, 20 + out + in);
            const k::OwnedWeight s = k::QuantizeWeight(w, out, in, t);
            INFO(k::WeightTypeName(t) << " n=" << n << " in=" << in << " out=" << out << " threads=" << threads);
            CHECK(Mismatches(x, s.view, n) == 0);
          }
    }
  k::SetPoolThreads(2);
}

// Several rows of x over a wide input go over the columns in chunks (RowsBf16: x outgrows the
// first-level cache), each row's accumulators kept between chunks: the same bits as the reference.
TEST_CASE("BF16-activation few-row products over wide inputs keep the reference's bits") {
  ModeOn on;
  for (WeightType t : {WeightType::kFP8, WeightType::kFP4, WeightType::kI8})
    for (int threads : {1, 2}) {
      k::SetPoolThreads(threads);
      for (int n : {2, 3, 8, 9})
        for (int in : {4096, 4160, 8192})  // 4160: FP4 ends in a half quad, FP8 and INT8 in a partial group
          for (int out : {17, 40}) {
            const auto x = Random(size_t(n) * in, 30 + n + in), w = Random(size_t(out) * in, 40 + out + in);
            const k::OwnedWeight s = k::QuantizeWeight(w, out, in, t);
            INFO(k::WeightTypeName(t) << " n=" << n << " in=" << in << " out=" << out << " threads=" << threads);
            CHECK(Mismatches(x, s.view, n) == 0);
          }
    }
  k::SetPoolThreads(2);
}

TEST_CASE("BF16-activation products keep the reference's bits for every weight code, scale code and extreme x") {
  ModeOn on;
  const int n = 3, in = 512, out = 70;
  auto x = Random(size_t(n) * in, 31);
  // x: subnormals (flushed to signed zeros, also the largest, which would round up to the smallest
  // normal), values that round across a power of two, huge ones (products and sums near the top
  // of the float range), and tiny normals (products that flush).
  const float specials[] = {1e-40f, -3e-39f, 0x1.fffffep-1f, -0x1.ff8p+10f, 3e37f, -2e38f, 0x1p-126f, -1.5e-30f, 0x1.00ffp0f, 0x1.fffffcp-127f, -0x1.fffffcp-127f};
  for (size_t i = 0; i < x.size(); i += 5) x[i] = specials[(i / 5) % 11];
  for (WeightType t : {WeightType::kFP8, WeightType::kFP4, WeightType::kI8}) {
    const auto w = Random(size_t(out) * in, 32);
    k::OwnedWeight f = k::QuantizeWeight(w, out, in, t);
    auto* data = const_cast<uint8_t*>(static_cast<const uint8_t*>(f.view.data));
    // Every byte value somewhere (FP8: all 256 codes, subnormals 0x01-0x07, zeros and the NaN
    // codes 0x7F / 0xFF; FP4: every pair of nibbles; INT8: -128..127, -128 included).
    const size_t bytes = size_t(out) * size_t(t == WeightType::kFP4 ? in / 2 : in);
    for (size_t i = 0; i < bytes; i += 3) data[i] = uint8_t(i / 3);
    if (t == WeightType::kI8) {  // bfloat16 scales: zero, subnormal, tiny, huge, negative
      auto* scales = const_cast<uint16_t*>(static_cast<const uint16_t*>(f.view.scales));
      const float special_scales[] = {0.0f, 1e-40f, 3e-39f, 1e-30f, 1e30f, -2.5f, 0x1p-126f};
      for (size_t i = 0; i < size_t(out) * (in / 32); i += 4) scales[i] = k::FloatToBf16(special_scales[(i / 4) % 7]);
    } else {
      auto* codes = const_cast<uint8_t*>(static_cast<const uint8_t*>(f.view.scales));
      const size_t scale_count = t == WeightType::kFP8 ? size_t((out + 31) / 32) * (in / 32) : size_t(out) * (in / 32);
      const uint8_t special_codes[] = {0, 1, 2, 100, 127, 140, 200, 254, 255};
      for (size_t i = 0; i < scale_count; i += 4) codes[i] = special_codes[(i / 4) % 9];
    }
    for (int threads : {1, 2}) {
      k::SetPoolThreads(threads);
      INFO(k::WeightTypeName(t) << " threads=" << threads);
      CHECK(Mismatches(x, f.view, n) == 0);
    }
  }
  k::SetPoolThreads(2);
  // One subnormal x alone against the largest FP8 weight: read as zero, so the output is 0, not
  // 448 * 2^-126 as the smallest normal it would round to.
  k::OwnedWeight big = k::QuantizeWeight(std::vector<float>(64, 448.0f), 1, 64, WeightType::kFP8);
  for (float v : {0x1.fffffcp-127f, -1e-40f}) {
    std::vector<float> one(64, 0.0f), y(1), yr(1);
    one[5] = v;
    k::MatmulW(one.data(), big.view, y.data(), 1);
    k::ref::MatmulBf16A(one.data(), big.view, yr.data(), 1);
    INFO("x = " << v << ": " << y[0] << " reference " << yr[0]);
    CHECK(y[0] == 0.0f);
    CHECK(yr[0] == 0.0f);
  }
}

// |y_bf16 - y| <= 2^-8 sum_i |x_i w_i| + 2 (in + 8) eps sum_i |x_i w_i| (x rounded to 8
// significant bits: relative error at most 2^-9; then two summation orders), with y the
// F32-activation product and w the stored weights decoded.
static void CheckErrorBound(WeightType type) {
  const int n = 3, in = 512, out = 64;
  const auto x = Random(size_t(n) * in, 5), w = Random(size_t(out) * in, 6);
  const k::OwnedWeight s = k::QuantizeWeight(w, out, in, type);
  std::vector<float> yb(size_t(n) * out), yf(size_t(n) * out);
  k::MatmulW(x.data(), s.view, yf.data(), n);
  {
    ModeOn on;
    k::MatmulW(x.data(), s.view, yb.data(), n);
  }
  const double eps = std::numeric_limits<float>::epsilon();
  double worst = 0;
  int over = 0;
  for (int b = 0; b < n; ++b)
    for (int r = 0; r < out; ++r) {
      double mag = 0;
      for (int c = 0; c < in; ++c) mag += std::fabs(k::WeightAt(s.view, r, c) * x[size_t(b) * in + c]);
      const double bound = (std::ldexp(1.0, -9) + 2 * (in + 8) * eps) * mag;
      const double err = std::fabs(double(yb[size_t(b) * out + r]) - yf[size_t(b) * out + r]);
      worst = std::max(worst, err / bound);
      if (err > bound) ++over;
    }
  INFO(std::string(k::WeightTypeName(type)) << ": worst error / bound = " << worst);
  CHECK(over == 0);
  CHECK(worst > 0.0);  // the mode did change the product
}

TEST_CASE("BF16 activations cost at most the rounding of x to 8 significant bits (FP8, FP4 and INT8 weights)") {
  CheckErrorBound(WeightType::kFP8);
  CheckErrorBound(WeightType::kFP4);
  CheckErrorBound(WeightType::kI8);
}

// The product of an n x in by out x in weight of `type` with the mode off and on, bit for bit equal.
static bool SameWithModeOn(int n, int in, int out, uint64_t seed, WeightType type, bool int8_too = false) {
  const auto x = Random(size_t(n) * in, seed), w = Random(size_t(out) * in, seed + 1);
  const k::OwnedWeight s = k::QuantizeWeight(w, out, in, type);
  std::vector<float> off(size_t(n) * out), on_(size_t(n) * out);
  k::SetInt8Activations(int8_too);
  k::MatmulW(x.data(), s.view, off.data(), n);
  {
    ModeOn on;
    k::MatmulW(x.data(), s.view, on_.data(), n);
  }
  k::SetInt8Activations(false);
  return SameBits(off, on_);
}

TEST_CASE("shapes and types off the BF16-activation path give the product they had without it") {
  for (WeightType t : {WeightType::kFP8, WeightType::kFP4, WeightType::kI8}) {
    INFO(std::string(k::WeightTypeName(t)));
    CHECK(SameWithModeOn(4, 96, 20, 7, t));    // in not a multiple of 64
    CHECK(SameWithModeOn(17, 64, 24, 9, t));   // more than 16 rows: prefill keeps F32 activations
    CHECK(!SameWithModeOn(4, 64, 20, 7, t));   // a shape on the path does change (the check can fail)
  }
  for (WeightType t : {WeightType::kBF16, WeightType::kF32}) {  // types the path does not take
    INFO(std::string(k::WeightTypeName(t)));
    CHECK(SameWithModeOn(4, 64, 20, 7, t));
  }
  CHECK(!SameWithModeOn(4, 64, 20, 7, WeightType::kFP8, true));  // FP8 and FP4 take BF16 activations where both are on
  CHECK(!SameWithModeOn(4, 64, 20, 7, WeightType::kFP4, true));
  CHECK(SameWithModeOn(4, 96, 20, 7, WeightType::kFP4, true));   // off the BF16 path (96 inputs) FP4 keeps 8-bit ones
  CHECK(SameWithModeOn(4, 64, 20, 7, WeightType::kI8, true));    // INT8 stays on 8-bit activations
  k::SetInt8Activations(true);  // and FP4's product with both on is the BF16-activation reference's
  {
    ModeOn on;
    const auto x = Random(4 * 192, 41), w = Random(70 * 192, 42);
    CHECK(Mismatches(x, k::QuantizeWeight(w, 70, 192, WeightType::kFP4).view, 4) == 0);
  }
  k::SetInt8Activations(false);
}

#if defined(__AVX512F__)
// The kernels end 16 rows at once (kernels/hsum_rows_avx512.h): each sum must be HSum16's on that
// row alone, bit for bit, whatever the values (every exponent, signed zeros, subnormals, infinities,
// NaN) and however many rows are pending when a call ends.
TEST_CASE("16 rows summed at once give each row HSum16's bits") {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-150, 127), special(0, 63);
  auto value = [&] {
    switch (special(rng)) {
      case 0: return 0.0f;
      case 1: return -0.0f;
      case 2: return std::numeric_limits<float>::infinity();
      case 3: return -std::numeric_limits<float>::denorm_min();
      case 4: return std::numeric_limits<float>::quiet_NaN();
      default: return std::ldexp(unit(rng), exponent(rng) % 40 + (special(rng) < 4 ? exponent(rng) : 0));
    }
  };
  auto same = [](float a, float b) { return std::isnan(a) ? std::isnan(b) : std::memcmp(&a, &b, sizeof a) == 0; };
  int bad = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    const int rows = 1 + trial % 40;  // 1 to 40 rows: partial, whole and several flushes
    std::vector<float> lanes(size_t(rows) * 16), got(size_t(rows), -1.0f);
    for (float& v : lanes) v = value();
    k::internal::RowSums16 sums;
    for (int r = 0; r < rows; ++r) sums.Add(_mm512_loadu_ps(&lanes[size_t(r) * 16]), &got[size_t(r)]);
    sums.Flush();
    for (int r = 0; r < rows; ++r) bad += !same(got[size_t(r)], k::internal::HSum16(&lanes[size_t(r) * 16]));
  }
  CHECK(bad == 0);
}
#endif
