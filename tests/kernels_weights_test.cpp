// The typed-weight products (kernels/weight_view.h, issue 20): BF16, INT8 (block 32), FP8 E4M3
// (32x32 E8M0 blocks) and FP4 E2M1 (E8M0 per 32), each against its scalar reference and against
// the F32 product of the weights before conversion, with tolerances derived from the format.
// Failures name the worst element with both values.
//
// Two bounds, per output y = sum_i x_i w_i:
//  * kernel vs reference (same stored weights): only the summation order differs; a sum of m
//    products in float is within gamma_m * sum |x_i w_i| (gamma_m = m eps / (1 - m eps)), so the
//    tolerance is (in + 8) * eps * sum_i |x_i| |w~_i| (w~: the stored weight decoded).
//  * stored vs F32: |y~ - y| <= sum_i |x_i| e_i + the above, where e_i bounds |w~_i - w_i|:
//      BF16: round to nearest with 8 significant bits (unit roundoff 2^-8): e_i = 2^-8 |w_i|;
//      INT8: q = round(w / s), s = amax / 127: e_i = s_b / 2 (plus float rounding of q*s, 2^-24 |w_i|);
//      FP8 E4M3: 4 significant bits (unit roundoff 2^-4): e_i = 2^-4 |w_i| for normals, half the subnormal step
//            2^-10 * scale below 2^-6 * scale (the block scale keeps |w / scale| <= 448, no saturation);
//      FP4 E2M1: grid steps 0.5 below 2, 1 below 4, 2 up to 6 (times the block scale, and
//            |w / scale| <= 6): e_i = half the step at |w_i / scale|.
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

constexpr double kEps = std::numeric_limits<float>::epsilon();

std::vector<float> Random(size_t n, uint64_t seed, float scale = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// A weight converted to `type`, owning its bytes.
using Stored = k::OwnedWeight;
Stored Convert(const std::vector<float>& w, int64_t rows, int64_t cols, WeightType type) {
  return k::QuantizeWeight(w, rows, cols, type);
}

// e_i of the header for element (r, c) with original value w.
double ElementBound(const k::WeightView& v, int64_t r, int64_t c, float w) {
  const int64_t nb = (v.cols + 31) / 32, b = c / 32;
  switch (v.type) {
    case WeightType::kF32: return 0;
    case WeightType::kBF16: return std::ldexp(std::fabs(w), -8);
    case WeightType::kI8: return k::I8ScaleAt(v.scales, r * nb + b) / 2 + std::ldexp(std::fabs(w), -23);
    case WeightType::kFP8: {
      const double s = k::DecodeE8M0(static_cast<const uint8_t*>(v.scales)[((v.row0 + r) / 32) * nb + b]);
      return std::max(std::ldexp(double(std::fabs(w)), -4), std::ldexp(s, -10));
    }
    case WeightType::kFP4: {
      const double s = k::DecodeE8M0(static_cast<const uint8_t*>(v.scales)[r * nb + b]), a = std::fabs(w) / s;
      return s * (a < 2 ? 0.25 : a < 4 ? 0.5 : 1.0);
    }
  }
  return 0;
}

// Checks got against want with a per-element tolerance; names the worst element.
void ExpectWithin(const std::string& what, const std::vector<float>& got, const std::vector<float>& want,
                  const std::vector<double>& tol) {
  REQUIRE(got.size() == want.size());
  double worst = 0;
  size_t at = 0;
  bool ok = true;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(double(got[i]) - want[i]);
    if (!(err <= tol[i])) ok = false;
    const double ratio = err / (tol[i] > 0 ? tol[i] : 1e-30);
    if (ratio > worst || !(err == err)) {
      worst = ratio;
      at = i;
    }
  }
  INFO(what << ": worst element " << at << " got " << (got.empty() ? 0 : got[at]) << " expected " << (want.empty() ? 0 : want[at])
            << " (error/tolerance " << worst << ")");
  CHECK(ok);
}

const WeightType kTypes[] = {WeightType::kBF16, WeightType::kI8, WeightType::kFP8, WeightType::kFP4};

}  // namespace

TEST_CASE("typed-weight products match their scalar reference and the F32 product within the format's bound") {
  for (int threads : {1, 2}) {
    k::SetPoolThreads(threads);
    for (WeightType type : kTypes)
      for (int n : threads == 1 ? std::vector<int>{1, 17} : std::vector<int>{1, 2, 9, 16, 17, 40})
        for (int in : {2, 33, 64, 130, 256})
          for (int out : {1, 9, 65}) {
            if (type == WeightType::kFP4 && in % 32 != 0) continue;  // the released FP4 layout: whole blocks
            auto x = Random(size_t(n) * in, 10 + n + in), w = Random(size_t(out) * in, 20 + out + in, 0.05f);
            Stored s = Convert(w, out, in, type);
            std::vector<float> y(size_t(n) * out, NAN), yr(y.size(), NAN), yf(y.size(), NAN);
            k::MatmulW(x.data(), s.view, y.data(), n);
            k::ref::MatmulW(x.data(), s.view, yr.data(), n);
            k::ref::Matmul(x.data(), w.data(), yf.data(), n, in, out);
            std::vector<double> tol_ref(y.size()), tol_f32(y.size());
            for (int b = 0; b < n; ++b)
              for (int r = 0; r < out; ++r) {
                double mag = 0, quant = 0;
                for (int c = 0; c < in; ++c) {
                  const double xi = std::fabs(x[size_t(b) * in + c]);
                  mag += xi * std::fabs(k::WeightAt(s.view, r, c));
                  quant += xi * ElementBound(s.view, r, c, w[size_t(r) * in + c]);
                }
                tol_ref[size_t(b) * out + r] = (in + 8) * kEps * mag;
                tol_f32[size_t(b) * out + r] = quant + 2 * (in + 8) * kEps * mag;
              }
            const std::string what = std::string(k::WeightTypeName(type)) + " n=" + std::to_string(n) + " in=" +
                                     std::to_string(in) + " out=" + std::to_string(out) + " threads=" + std::to_string(threads);
            ExpectWithin(what + " vs reference", y, yr, tol_ref);
            ExpectWithin(what + " vs F32", y, yf, tol_f32);
          }
  }
  k::SetPoolThreads(2);
}

// Whether every row of the n-row product x [n, in] * s [out, in]^T is, bit for bit, the one-row
// product of that row alone (memcmp: -0.0 and +0.0 differ, NaNs compare by bits).
static bool RowsEqualAlone(const std::vector<float>& x, const Stored& s, int n, int in, int out) {
  std::vector<float> y(size_t(n) * out), row(static_cast<size_t>(out));
  k::MatmulW(x.data(), s.view, y.data(), n);
  for (int b = 0; b < n; ++b) {
    k::MatmulW(x.data() + size_t(b) * in, s.view, row.data(), 1);
    if (std::memcmp(row.data(), y.data() + size_t(b) * out, sizeof(float) * size_t(out)) != 0) return false;
  }
  return true;
}

TEST_CASE("a row of a few-row typed product equals the same row alone, bit for bit (batched decode == decode)") {
  for (int threads : {1, 2}) {
    k::SetPoolThreads(threads);
    for (WeightType type : kTypes)
      for (int n : {2, 3, 5, 8, 9, 16})
        for (int in : {32, 64, 100, 256})
          for (int out : {1, 7, 64, 263}) {
            if (type == WeightType::kFP4 && in % 32 != 0) continue;
            auto x = Random(size_t(n) * in, 300 + n), w = Random(size_t(out) * in, 400 + out);
            Stored s = Convert(w, out, in, type);
            INFO(k::WeightTypeName(type) << " n=" << n << " in=" << in << " out=" << out << " threads=" << threads);
            CHECK(RowsEqualAlone(x, s, n, in, out));
          }
  }
  k::SetPoolThreads(2);
}

// Decode's one-row path against rows of a 3-row product (the few-row path), bit for bit, at the
// widths decode runs (up to 16k columns, with and without a partial last block) and over rows past
// the 64-row blocks of FewRowsT (71 = 64 + 7).
TEST_CASE("the one-row typed product equals the few-row product at decode widths, bit for bit") {
  k::SetPoolThreads(1);
  for (WeightType type : kTypes)
    for (int in : {200, 512, 1000, 4096, 8200, 16416}) {
      if (type == WeightType::kFP4 && in % 32 != 0) continue;
      const int n = 3, out = 71;
      auto x = Random(size_t(n) * in, 500 + in), w = Random(size_t(out) * in, 600 + in);
      Stored s = Convert(w, out, in, type);
      INFO(k::WeightTypeName(type) << " in=" << in);
      CHECK(RowsEqualAlone(x, s, n, in, out));
    }
  k::SetPoolThreads(2);
}

TEST_CASE("MatmulMany runs typed and F32 jobs together, each equal to its reference") {
  const int shapes[][3] = {{1, 64, 320}, {3, 96, 70}, {20, 64, 33}, {1, 256, 9}, {16, 32, 100}, {0, 64, 8}};
  std::vector<Stored> stored;
  std::vector<std::vector<float>> xs, ys, yr;
  std::vector<k::MatmulJob> jobs;
  for (size_t i = 0; i < std::size(shapes); ++i) {
    const int n = shapes[i][0], in = shapes[i][1], out = shapes[i][2];
    const WeightType type = i % 3 == 2 ? WeightType::kF32 : kTypes[i % 4];
    xs.push_back(Random(size_t(n) * in, 70 + i));
    stored.push_back(Convert(Random(size_t(out) * in, 80 + i, 0.1f), out, in, type));
    ys.emplace_back(size_t(n) * out, NAN);
    yr.emplace_back(size_t(n) * out, NAN);
  }
  for (size_t i = 0; i < std::size(shapes); ++i) {
    k::MatmulJob j{xs[i].data(), nullptr, ys[i].data(), shapes[i][0], shapes[i][1], shapes[i][2]};
    if (stored[i].view.type == WeightType::kF32)
      j.w = reinterpret_cast<const float*>(stored[i].data.data());
    else
      j.wv = stored[i].view;
    jobs.push_back(j);
  }
  k::MatmulMany(jobs.data(), int(jobs.size()));
  for (size_t i = 0; i < jobs.size(); ++i) jobs[i].y = yr[i].data();
  k::ref::MatmulMany(jobs.data(), int(jobs.size()));
  for (size_t i = 0; i < std::size(shapes); ++i) {
    std::vector<double> tol(ys[i].size());
    for (size_t e = 0; e < tol.size(); ++e) tol[e] = 4 * kEps * (shapes[i][1] + 8) * (1 + std::fabs(yr[i][e])) * 4;
    ExpectWithin("MatmulMany job " + std::to_string(i) + " (" + k::WeightTypeName(stored[i].view.type) + ")", ys[i], yr[i], tol);
  }
}

TEST_CASE("decode's products give the same bits wherever x sits in memory (MatmulMany's aligned copies of x)") {
  // Few-row jobs whose x is not 64-byte aligned read a copy that is (kernels/matmul_many.cpp);
  // jobs over the same x share one copy when it holds enough rows. The jobs: one row of x, then
  // three rows of the same x (longer: a copy of its own), then those three rows again on other
  // weights (shares the second's copy), then another x.
  const WeightType types[] = {WeightType::kF32, WeightType::kBF16, WeightType::kI8, WeightType::kFP8, WeightType::kFP4};
  for (WeightType type : types)
    for (int in : {200, 2048}) {
      if (type == WeightType::kFP4 && in % 32 != 0) continue;
      const int out = 70, n = 3;
      const auto xv = Random(size_t(n) * in, 900 + in), x2v = Random(size_t(in), 901 + in);
      std::vector<Stored> ws;
      for (int j = 0; j < 3; ++j) ws.push_back(Convert(Random(size_t(out) * in, 910 + j, 0.1f), out, in, type));
      std::vector<float> buf(size_t(n) * in + 64), buf2(size_t(in) + 64);
      auto aligned = [](std::vector<float>& b) {
        return b.data() + (16 - reinterpret_cast<uintptr_t>(b.data()) / sizeof(float) % 16) % 16;
      };
      auto run = [&](int off, int off2) {
        float* x = aligned(buf) + off;
        float* x2 = aligned(buf2) + off2;
        std::copy(xv.begin(), xv.end(), x);
        std::copy(x2v.begin(), x2v.end(), x2);
        std::vector<float> y(size_t(out) * (1 + 2 * n + 1), NAN);
        const int rows[] = {1, n, n, 1};
        const float* xs[] = {x, x, x, x2};
        const int wi[] = {0, 1, 2, 0};
        std::vector<k::MatmulJob> jobs;
        float* yp = y.data();
        for (int j = 0; j < 4; ++j) {
          k::MatmulJob m{xs[j], nullptr, yp, rows[j], in, out};
          if (type == WeightType::kF32) m.w = reinterpret_cast<const float*>(ws[size_t(wi[j])].data.data());
          else m.wv = ws[size_t(wi[j])].view;
          jobs.push_back(m);
          yp += size_t(rows[j]) * out;
        }
        k::MatmulMany(jobs.data(), int(jobs.size()));
        return y;
      };
      const std::vector<float> want = run(0, 0);
      for (int off = 1; off < 16; ++off) {
        const std::vector<float> got = run(off, (off * 7) % 16);
        INFO(k::WeightTypeName(type) << " in=" << in << " x offset " << off << " floats");
        CHECK(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)) == 0);
      }
    }
}

TEST_CASE("INT8 block quantisation is within half a scale per element, and DecodeRows equals WeightAt") {
  for (int64_t cols : {1, 31, 32, 33, 100}) {
    const int64_t rows = 5;
    auto w = Random(size_t(rows * cols), 900 + cols);
    w[0] = 0.0f;
    Stored s = Convert(w, rows, cols, WeightType::kI8);
    const int64_t nb = (cols + 31) / 32;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        const float sc = k::I8ScaleAt(s.scales.data(), r * nb + c / 32);
        CHECK(std::fabs(k::WeightAt(s.view, r, c) - w[size_t(r * cols + c)]) <= sc / 2 * (1 + 1e-6) + 1e-30);
      }
    // Each scale is the block's amax / 127 rounded to the nearest bfloat16, and the block's largest
    // element is +-127 (the rounded scale never pushes it to 128: the header's argument).
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t b = 0; b < nb; ++b) {
        float amax = 0;
        int qmax = 0;
        for (int64_t c = b * 32; c < std::min(cols, b * 32 + 32); ++c) {
          amax = std::max(amax, std::fabs(w[size_t(r * cols + c)]));
          qmax = std::max(qmax, std::abs(int(reinterpret_cast<const int8_t*>(s.data.data())[r * cols + c])));
        }
        CHECK(reinterpret_cast<const uint16_t*>(s.scales.data())[r * nb + b] == k::FloatToBf16(amax / 127.0f));
        CHECK(qmax == (amax > 0 ? 127 : 0));
      }
    for (WeightType type : kTypes) {
      if (type == WeightType::kFP4 && cols % 32 != 0) continue;
      Stored t = Convert(w, rows, cols, type);
      std::vector<float> dec(size_t(rows * cols));
      k::DecodeRows(t.view, 1, rows - 1, dec.data());
      bool same = true;
      for (int64_t r = 1; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) same = same && dec[size_t((r - 1) * cols + c)] == k::WeightAt(t.view, r, c);
      INFO(k::WeightTypeName(type) << " cols=" << cols);
      CHECK(same);
    }
  }
}

TEST_CASE("FP8 row slices keep their 32-row scale blocks") {
  const int64_t rows = 96, cols = 64;
  auto w = Random(size_t(rows * cols), 5);
  for (int64_t r = 0; r < 32; ++r)
    for (int64_t c = 0; c < cols; ++c) w[size_t(r * cols + c)] *= 100;  // distinct scales per row block
  Stored s = Convert(w, rows, cols, WeightType::kFP8);
  const k::WeightView part = s.view.Rows(20, 40);
  for (int64_t r = 0; r < 40; ++r)
    for (int64_t c = 0; c < cols; ++c) REQUIRE(k::WeightAt(part, r, c) == k::WeightAt(s.view, r + 20, c));
  auto x = Random(size_t(cols), 6);
  std::vector<float> y(40), yr(40);
  k::MatmulW(x.data(), part, y.data(), 1);
  k::ref::MatmulW(x.data(), part, yr.data(), 1);
  for (int r = 0; r < 40; ++r) CHECK(std::fabs(y[size_t(r)] - yr[size_t(r)]) <= 1e-3 * (1 + std::fabs(yr[size_t(r)])));
}

// One row of `cols` weights of `type` decoded by the vector kernels' DecodeRows.
static std::vector<float> DecodeOneRow(WeightType type, const void* data, const void* scales, int cols) {
  k::WeightView v;
  v.type = type;
  v.data = data;
  v.scales = scales;
  v.rows = 1;
  v.cols = cols;
  std::vector<float> dec(size_t(cols), 0.0f);
  k::DecodeRows(v, 0, 1, dec.data());
  return dec;
}

// The vector decoders (kernels/matmul_quant.cpp: bit placement for E4M3, byte tables for E2M1)
// against the scalar definitions, for every code, bit for bit (the sign of zero included):
// DecodeRows runs the same Load the products do, with block scales of 1 (E8M0 code 127).
TEST_CASE("every FP8 and FP4 code and INT8 value decodes in the vector kernels exactly as the scalar decoder does") {
  auto same_bits = [](float a, float b) { return std::memcmp(&a, &b, 4) == 0; };
  {
    std::vector<uint8_t> codes(256), scales(8, 127);  // one row of 256 elements: 8 blocks of 32
    for (int i = 0; i < 256; ++i) codes[size_t(i)] = uint8_t(i);
    const std::vector<float> dec = DecodeOneRow(WeightType::kFP8, codes.data(), scales.data(), 256);
    for (int i = 0; i < 256; ++i) {
      if ((i & 0x7F) == 0x7F) continue;  // NaN codes: documented to decode as +-480 in the kernels
      INFO("E4M3 code " << i << " vector " << dec[size_t(i)] << " scalar " << k::DecodeE4M3(uint8_t(i)));
      CHECK(same_bits(dec[size_t(i)], k::DecodeE4M3(uint8_t(i))));
    }
  }
  {
    std::vector<int8_t> codes(256);  // INT8: every value, scale 1
    std::vector<uint16_t> scales(8, k::FloatToBf16(1.0f));
    for (int i = 0; i < 256; ++i) codes[size_t(i)] = int8_t(i - 128);
    const std::vector<float> dec = DecodeOneRow(WeightType::kI8, codes.data(), scales.data(), 256);
    for (int i = 0; i < 256; ++i) {
      INFO("INT8 value " << i - 128 << " vector " << dec[size_t(i)]);
      CHECK(same_bits(dec[size_t(i)], float(i - 128)));
    }
  }
  {
    std::vector<uint8_t> packed(256), scales(16, 127);  // one row of 512 elements: every byte = nibble pair
    for (int i = 0; i < 256; ++i) packed[size_t(i)] = uint8_t(i);
    const std::vector<float> dec = DecodeOneRow(WeightType::kFP4, packed.data(), scales.data(), 512);
    for (int i = 0; i < 256; ++i) {
      INFO("E2M1 byte " << i);
      CHECK(same_bits(dec[size_t(2 * i)], k::DecodeE2M1(uint8_t(i & 0xF))));
      CHECK(same_bits(dec[size_t(2 * i + 1)], k::DecodeE2M1(uint8_t(i >> 4))));
    }
  }
}

// The summation order the typed products promise (kernels/matmul_quant.cpp), written out in
// scalar code: the AVX2 path (8-lane halves) and the AVX-512 path (16-lane halves folded to 8)
// must both give exactly these bits, so decode results do not depend on the machine's ISA.
static float TwinOrderedDot(const k::WeightView& v, int64_t r, const float* x) {
  const int64_t in = v.cols, nb = (in + 31) / 32;
  auto raw = [&](int64_t c) -> float {
    switch (v.type) {
      case WeightType::kBF16: return k::Bf16ToFloat(static_cast<const uint16_t*>(v.data)[r * in + c]);
      case WeightType::kI8: return float(static_cast<const int8_t*>(v.data)[r * in + c]);
      case WeightType::kFP8: return k::DecodeE4M3(static_cast<const uint8_t*>(v.data)[r * in + c]);
      default: {
        const uint8_t byte = static_cast<const uint8_t*>(v.data)[r * (in / 2) + c / 2];
        return k::DecodeE2M1(c % 2 ? uint8_t(byte >> 4) : uint8_t(byte & 0xF));
      }
    }
  };
  auto scale = [&](int64_t b) -> float {
    switch (v.type) {
      case WeightType::kI8: return k::I8ScaleAt(v.scales, r * nb + b);
      case WeightType::kFP8: return k::DecodeE8M0(static_cast<const uint8_t*>(v.scales)[((v.row0 + r) / 32) * nb + b]);
      case WeightType::kFP4: return k::DecodeE8M0(static_cast<const uint8_t*>(v.scales)[r * nb + b]);
      default: return 1.0f;
    }
  };
  float acc[8] = {};
  for (int64_t b = 0; b < nb; ++b) {
    float e[32] = {}, xe[32] = {};
    for (int64_t c = b * 32; c < std::min(in, b * 32 + 32); ++c) e[c - b * 32] = raw(c), xe[c - b * 32] = x[c];
    for (int i = 0; i < 8; ++i) {
      const float t0 = std::fma(e[16 + i], xe[16 + i], e[i] * xe[i]);
      const float t1 = std::fma(e[24 + i], xe[24 + i], e[8 + i] * xe[8 + i]);
      acc[i] = v.type == WeightType::kBF16 ? acc[i] + (t0 + t1) : std::fma(t0 + t1, scale(b), acc[i]);
    }
  }
  return ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
}

TEST_CASE("typed products follow the documented summation order bit for bit, on any ISA (scalar twin)") {
  for (int threads : {1, 2}) {
    k::SetPoolThreads(threads);
    for (WeightType type : kTypes)
      for (int n : {1, 3, 8, 16})
        for (int in : {32, 100, 256, 1056})
          for (int out : {1, 9, 70, 263}) {  // 70 and 263: decode reads a slice in parts (kSpreadOf)
            if (type == WeightType::kFP4 && in % 32 != 0) continue;
            auto x = Random(size_t(n) * in, 900 + n + in), w = Random(size_t(out) * in, 950 + out);
            Stored s = Convert(w, out, in, type);
            std::vector<float> y(size_t(n) * out);
            k::MatmulW(x.data(), s.view, y.data(), n);
            int mismatches = 0;
            for (int b = 0; b < n; ++b)
              for (int r = 0; r < out; ++r) {
                const float t = TwinOrderedDot(s.view, r, x.data() + size_t(b) * in);
                if (std::memcmp(&t, &y[size_t(b) * out + r], sizeof t) != 0) ++mismatches;
              }
            INFO(k::WeightTypeName(type) << " n=" << n << " in=" << in << " out=" << out << " threads=" << threads);
            CHECK(mismatches == 0);
          }
  }
  k::SetPoolThreads(2);
}

// Activations near F32's underflow (x ~ 2^-125, so that many products w x are subnormal): the
// typed kernels round every product as w x rounds, i.e. keep the scalar twin's bits. A decoder
// that loads weights times a power of two below 1 and undoes it on the outputs would not (an FP8
// decode through F16, w 2^-8, was tried that way in session 23 and fails here; it measured no
// faster and was not kept). A type whose products load w times 2^24 in this process
// (ProductsScaleWeights: INT8 on AVX2 machines without AVX-512) is left out: its products w 2^24 x
// are normal where w x is not, so they keep more bits than the twin's there (documented in DecI8;
// activations of 2^-126 do not occur in a model's products). FP4 was left out on AVX2 too until its
// Load gave the weights themselves (session 44).
TEST_CASE("typed products keep the scalar twin's bits for activations near F32's underflow") {
  for (WeightType type : kTypes) {
    if (k::ProductsScaleWeights(type)) continue;
    for (int n : {1, 3})
      for (int in : {64, 100}) {
        if (type == WeightType::kFP4 && in % 32 != 0) continue;
        const int out = 70;
        auto x = Random(size_t(n) * in, 700 + n + in), w = Random(size_t(out) * in, 750 + in);
        for (float& v : x) v = std::ldexp(v, -125);
        Stored s = Convert(w, out, in, type);
        std::vector<float> y(size_t(n) * out);
        k::MatmulW(x.data(), s.view, y.data(), n);
        int mismatches = 0, subnormal = 0;
        for (int b = 0; b < n; ++b)
          for (int r = 0; r < out; ++r) {
            const float t = TwinOrderedDot(s.view, r, x.data() + size_t(b) * in);
            subnormal += t != 0.0f && std::fabs(t) < std::numeric_limits<float>::min();
            if (std::memcmp(&t, &y[size_t(b) * out + r], sizeof t) != 0) ++mismatches;
          }
        INFO(std::string(k::WeightTypeName(type)) << " n=" << n << " in=" << in << " subnormal outputs " << subnormal);
        CHECK(mismatches == 0);
      }
  }
}

// Activations at and above 2^8: FP8's products on AVX2 take x times 2^120 where every |x| of the
// call is below 2^8 (DecFp8X) and x as given otherwise. Both must keep the twin's bits: the
// largest float below 2^8 (x 2^120 is then just below F32's largest), 2^8 itself, values far above
// it, and a batch where one row's large value sends the whole call to the other path, each row
// also equal to itself alone. (Not beyond ~2^96: INT8's products on AVX2 hold w 2^24 x, which
// overflows there, ProductsScaleWeights.)
TEST_CASE("typed products keep the scalar twin's bits for activations at and above 2^8") {
  const float below = std::nextafter(256.0f, 0.0f);
  struct Case {
    const char* what;
    float scale;                             // of the normal activations
    std::vector<std::pair<int, float>> set;  // (index into x, value)
  };
  const Case cases[] = {{"largest below 2^8", 40.0f, {{5, below}, {17, -below}}},
                        {"2^8", 40.0f, {{5, 256.0f}}},
                        {"-2^8", 1.0f, {{0, -256.0f}}},
                        {"far above", 1e6f, {{3, 1e20f}}},
                        {"row 1 of 3 large", 1.0f, {{100 + 7, 3e4f}}}};
  auto check = [&](WeightType type, const Case& c, int n, int in, bool prescaled) {
    const int out = 70;
    auto x = Random(size_t(n) * in, 600 + n + in, c.scale), w = Random(size_t(out) * in, 650 + in);
    for (float& v : x) v = std::clamp(v, -below, below);
    for (auto [i, v] : c.set)
      if (i < n * in) x[size_t(i)] = v;
    Stored s = Convert(w, out, in, type);
    std::vector<float> y(size_t(n) * out), alone(out);
    k::MatmulW(x.data(), s.view, y.data(), n);
    int mismatches = 0, alone_mismatches = 0, infinite = 0;
    for (int b = 0; b < n; ++b) {
      k::MatmulW(x.data() + size_t(b) * in, s.view, alone.data(), 1);
      for (int r = 0; r < out; ++r) {
        const float t = TwinOrderedDot(s.view, r, x.data() + size_t(b) * in), got = y[size_t(b) * out + r];
        infinite += !std::isfinite(t);
        if (std::memcmp(&t, &got, sizeof t) != 0) ++mismatches;
        if (std::memcmp(&alone[size_t(r)], &got, sizeof t) != 0) ++alone_mismatches;
      }
    }
    const std::string label = std::string(k::WeightTypeName(type)) + ", " + c.what + ", n=" + std::to_string(n) +
                              " in=" + std::to_string(in) + (prescaled ? "" : ", FP8 prescale off");
    INFO(label);
    CHECK(infinite == 0);
    CHECK(mismatches == 0);
    CHECK(alone_mismatches == 0);
  };
  for (bool prescaled : {true, false}) {
    k::SetFp8PrescaledActivations(prescaled);
    for (WeightType type : kTypes)
      for (const Case& c : cases)
        for (int n : {1, 3})
          for (int in : {64, 100})
            if (type != WeightType::kFP4 || in % 32 == 0) check(type, c, n, in, prescaled);
  }
  k::SetFp8PrescaledActivations(true);
}
