// INT8 and FP4 weights times 8-bit activations (kernels/matmul_i8a8.cpp, SetInt8Activations):
// the products equal their scalar reference bit for bit (the order is a definition, so the
// AVX-512 VNNI path and the scalar path give the same bits), FP4's equal the INT8 path's on the
// INT8 weight 2 * e2m1 with half the E8M0 scale, a row of a few-row product equals that row
// alone, the error against the F32-activation product stays within what rounding x to 8 bits
// per block of 32 allows, and shapes the path does not take (inputs not a multiple of 32, more
// than 16 rows, mode off) give exactly the F32-activation product.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/ops.h"
#include "kernels/quant_formats.h"
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
  // Some exact zeros and an all-zero block: q = 0 and s_a = 0 must work.
  for (size_t i = 0; i < n; i += 37) v[i] = 0.0f;
  if (n >= 64) std::fill(v.begin() + 32, v.begin() + 64, 0.0f);
  return v;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), sizeof(float) * a.size()) == 0;
}

struct ModeOn {
  ModeOn() { k::SetInt8Activations(true); }
  ~ModeOn() { k::SetInt8Activations(false); }
};

}  // namespace

TEST_CASE("8-bit-activation INT8 products equal their scalar reference bit for bit, and each row equals it alone") {
  ModeOn on;
  for (int threads : {1, 2}) {
    k::SetPoolThreads(threads);
    for (int n : {1, 2, 5, 8, 9, 16})
      for (int in : {32, 96, 256, 1056})
        for (int out : {1, 7, 70, 263}) {  // 70 and 263: decode reads a slice in parts (kSpreadI8A8)
          const auto x = Random(size_t(n) * in, 10 + n + in), w = Random(size_t(out) * in, 20 + out + in);
          const k::OwnedWeight s = k::QuantizeWeight(w, out, in, WeightType::kI8);
          std::vector<float> y(size_t(n) * out), yr(size_t(n) * out), row(static_cast<size_t>(out));
          k::MatmulW(x.data(), s.view, y.data(), n);
          k::ref::MatmulI8A8(x.data(), s.view, yr.data(), n);
          INFO("n=" << n << " in=" << in << " out=" << out << " threads=" << threads);
          CHECK(SameBits(y, yr));
          bool alone = true;
          for (int b = 0; b < n; ++b) {
            k::MatmulW(x.data() + size_t(b) * in, s.view, row.data(), 1);
            alone = alone && std::memcmp(row.data(), y.data() + size_t(b) * out, sizeof(float) * size_t(out)) == 0;
          }
          CHECK(alone);
        }
  }
  k::SetPoolThreads(2);
}

// The INT8 weight an FP4 weight is read as on the 8-bit path: q = 2 * e2m1 (an integer in
// [-12, 12]), scale = e8m0 / 2, built here from the scalar decoders, not from the kernel's tables.
static k::OwnedWeight Fp4AsInt8(const k::WeightView& f) {
  k::OwnedWeight o;
  const int64_t nbs = (f.cols + 31) / 32;
  o.data.resize(size_t(f.rows * f.cols));
  o.scales.resize(size_t(f.rows * nbs) * sizeof(uint16_t));
  auto* q = reinterpret_cast<int8_t*>(o.data.data());
  auto* s = reinterpret_cast<uint16_t*>(o.scales.data());  // bfloat16: e8m0 / 2 is a power of two, exact
  const auto* packed = static_cast<const uint8_t*>(f.data);
  const auto* codes = static_cast<const uint8_t*>(f.scales);
  int64_t inexact = 0;
  for (int64_t r = 0; r < f.rows; ++r) {
    for (int64_t c = 0; c < f.cols; ++c) {
      const uint8_t byte = packed[r * (f.cols / 2) + c / 2];
      const float v = 2.0f * k::DecodeE2M1(c % 2 ? uint8_t(byte >> 4) : uint8_t(byte & 0x0F));
      q[r * f.cols + c] = int8_t(v);
      inexact += float(q[r * f.cols + c]) != v;
    }
    for (int64_t b = 0; b < nbs; ++b) s[r * nbs + b] = k::FloatToBf16(k::DecodeE8M0(codes[r * nbs + b]) / 2.0f);
  }
  REQUIRE(inexact == 0);
  o.view = k::WeightView{k::WeightType::kI8, o.data.data(), o.scales.data(), f.rows, f.cols, 0};
  return o;
}

TEST_CASE("8-bit-activation FP4 products equal the INT8 path's on 2 * e2m1 with half the scale, bit for bit, and each row equals it alone") {
  ModeOn on;
  for (int threads : {1, 2}) {
    k::SetPoolThreads(threads);
    for (int n : {1, 2, 3, 5, 8, 16})
      // 1-5 blocks: every remainder of the 4-block loop; 704 / 928 / 1056: 5 / 7 / 8 groups of 4 blocks
      // (the VNNI kernel's loop of 4 groups and its single groups) and 1 pair / 1 block / 1 block after them
      for (int in : {32, 64, 96, 128, 160, 704, 928, 1056})
        for (int out : {1, 7, 70, 263}) {
          const auto x = Random(size_t(n) * in, 30 + n + in), w = Random(size_t(out) * in, 40 + out + in);
          const k::OwnedWeight f = k::QuantizeWeight(w, out, in, WeightType::kFP4);
          const k::OwnedWeight i8 = Fp4AsInt8(f.view);
          std::vector<float> y(size_t(n) * out), yr(size_t(n) * out), yi(size_t(n) * out), row(static_cast<size_t>(out));
          k::MatmulW(x.data(), f.view, y.data(), n);
          k::ref::MatmulI8A8(x.data(), f.view, yr.data(), n);
          k::ref::MatmulI8A8(x.data(), i8.view, yi.data(), n);
          INFO("n=" << n << " in=" << in << " out=" << out << " threads=" << threads);
          CHECK(SameBits(yr, yi));
          CHECK(SameBits(y, yr));
          bool alone = true;
          for (int b = 0; b < n; ++b) {
            k::MatmulW(x.data() + size_t(b) * in, f.view, row.data(), 1);
            alone = alone && std::memcmp(row.data(), y.data() + size_t(b) * out, sizeof(float) * size_t(out)) == 0;
          }
          CHECK(alone);
        }
  }
  k::SetPoolThreads(2);
}

TEST_CASE("8-bit-activation FP4 products keep the reference's bits for every E8M0 scale code") {
  // The VNNI kernel converts 16 codes at once by bit placement and sends codes 0, 1 (subnormal
  // halves) and 255 (NaN) to the table: put them, and the edges 2 and 254, in every position.
  ModeOn on;
  const int n = 2, in = 1056, out = 70;
  const auto x = Random(size_t(n) * in, 71), w = Random(size_t(out) * in, 72);
  k::OwnedWeight f = k::QuantizeWeight(w, out, in, WeightType::kFP4);
  auto* codes = const_cast<uint8_t*>(static_cast<const uint8_t*>(f.view.scales));
  auto* nibbles = const_cast<uint8_t*>(static_cast<const uint8_t*>(f.view.data));
  const uint8_t special[] = {0, 1, 2, 127, 100, 245};
  const int blocks = in / 32;
  for (int r = 0; r < out; ++r)
    for (int b = 0; b < blocks; ++b)
      if ((r * 7 + b * 3) % 5 == 0) codes[r * blocks + b] = special[size_t(r + b) % 6];
  // Every tenth row: one block with code 255 and zero weights, so its outputs are NaN only
  // where the NaN scale is read (0 times a finite scale would leave them finite).
  int nan_rows = 0;
  for (int r = 0; r < out; r += 10, ++nan_rows) {
    const int b = (r / 10 * 5) % blocks;
    codes[r * blocks + b] = 255;
    std::memset(nibbles + size_t(r) * (in / 2) + size_t(b) * 16, 0, 16);
  }
  for (int threads : {1, 2}) {
    k::SetPoolThreads(threads);
    std::vector<float> y(size_t(n) * out), yr(size_t(n) * out);
    k::MatmulW(x.data(), f.view, y.data(), n);
    k::ref::MatmulI8A8(x.data(), f.view, yr.data(), n);
    int same = 0, nan = 0;
    for (size_t i = 0; i < y.size(); ++i) {
      if (std::isnan(yr[i])) ++nan;
      same += std::isnan(yr[i]) ? std::isnan(y[i]) : std::memcmp(&y[i], &yr[i], sizeof(float)) == 0;
    }
    INFO("threads=" << threads << " NaN outputs " << nan);
    CHECK(same == int(y.size()));
    CHECK(nan == n * nan_rows);
  }
  k::SetPoolThreads(2);
}

// |y_a8 - y| <= sum_b (s_a(b) / 2) sum_{i in b} |w~_i| + 2 (in + 8) eps sum_i |x_i w~_i|, with w~
// the stored INT8 weights decoded, s_a(b) = amax_b / 127 and y the F32-activation product.
static void CheckErrorBound(WeightType type) {
  const int n = 3, in = 512, out = 64;
  const auto x = Random(size_t(n) * in, 5), w = Random(size_t(out) * in, 6);
  const k::OwnedWeight s = k::QuantizeWeight(w, out, in, type);
  std::vector<float> y8(size_t(n) * out), yf(size_t(n) * out);
  k::MatmulW(x.data(), s.view, yf.data(), n);
  {
    ModeOn on;
    k::MatmulW(x.data(), s.view, y8.data(), n);
  }
  const double eps = std::numeric_limits<float>::epsilon();
  double worst = 0;
  int over = 0;
  for (int b = 0; b < n; ++b)
    for (int r = 0; r < out; ++r) {
      double bound = 0, mag = 0;
      for (int blk = 0; blk < in / 32; ++blk) {
        float amax = 0;
        for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[size_t(b) * in + blk * 32 + i]));
        double wsum = 0;
        for (int i = 0; i < 32; ++i) {
          const double wt = k::WeightAt(s.view, r, blk * 32 + i);
          wsum += std::fabs(wt);
          mag += std::fabs(wt * x[size_t(b) * in + blk * 32 + i]);
        }
        bound += amax / 127.0 / 2 * wsum;
      }
      bound += 2 * (in + 8) * eps * mag;
      const double err = std::fabs(double(y8[size_t(b) * out + r]) - yf[size_t(b) * out + r]);
      worst = std::max(worst, err / bound);
      if (err > bound) ++over;
    }
  INFO(std::string(k::WeightTypeName(type)) << ": worst error / bound = " << worst);
  CHECK(over == 0);
  CHECK(worst > 0.0);  // the mode did change the product
}

TEST_CASE("8-bit activations cost at most half an activation step per element (INT8 and FP4 weights)") {
  CheckErrorBound(WeightType::kI8);
  CheckErrorBound(WeightType::kFP4);
}

// The product of an n x in by out x in weight of `type` with the mode off and on, bit for bit equal.
static bool SameWithModeOn(int n, int in, int out, uint64_t seed, WeightType type) {
  const auto x = Random(size_t(n) * in, seed), w = Random(size_t(out) * in, seed + 1);
  const k::OwnedWeight s = k::QuantizeWeight(w, out, in, type);
  std::vector<float> off(size_t(n) * out), on_(size_t(n) * out);
  k::MatmulW(x.data(), s.view, off.data(), n);
  {
    ModeOn on;
    k::MatmulW(x.data(), s.view, on_.data(), n);
  }
  return SameBits(off, on_);
}

TEST_CASE("shapes and types off the 8-bit path give the F32-activation product exactly") {
  CHECK(SameWithModeOn(4, 40, 20, 7, WeightType::kI8));  // in not a multiple of 32 (FP4 weights always are)
  CHECK(SameWithModeOn(4, 100, 20, 7, WeightType::kI8));
  for (WeightType t : {WeightType::kI8, WeightType::kFP4}) {
    INFO(std::string(k::WeightTypeName(t)));
    CHECK(SameWithModeOn(17, 64, 24, 9, t));   // more than 16 rows: prefill keeps F32 activations
    CHECK(!SameWithModeOn(4, 64, 20, 7, t));   // a shape on the path does change (the check can fail)
  }
  for (WeightType t : {WeightType::kBF16, WeightType::kFP8}) {  // types the path does not take
    INFO(std::string(k::WeightTypeName(t)));
    CHECK(SameWithModeOn(4, 64, 20, 7, t));
  }
}
