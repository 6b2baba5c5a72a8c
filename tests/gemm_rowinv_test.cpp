// The row-invariant GEMM (kernels/gemm_rowinv.h): bitwise equal to its scalar reference (the
// lane-16 order is a definition, not an approximation), within float tolerance of the plain
// reference product, and every row of an n-row product bitwise equal to the one-row product
// (MatVec, decode) of that row alone, for n = 1..300 at random shapes including odd sizes.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu_internal.h"
#include "kernels/gemm_rowinv.h"
#include "kernels/ops.h"
#include "kernels/thread_pool.h"
#include "tests/kernel_test_util.h"

namespace k = cedar::kernels;

namespace {

std::vector<float> Random(size_t n, uint64_t seed) { return cedar::test::RandomNormal(n, seed); }
using cedar::test::SameBits;

// A non-F32 storage through the panel interface: int8 codes times one scale per row.
struct Int8Rows {
  std::vector<int8_t> codes;  // [out, in]
  std::vector<float> scale;   // [out]
};
void DecodeInt8Rows(const k::WeightPanelSource& s, int row0, int nrows, int k0, int nk, float* dst) {
  const auto* q = static_cast<const Int8Rows*>(s.ctx);
  for (int r = 0; r < nrows; ++r)
    for (int c = 0; c < nk; ++c)
      dst[size_t(r) * nk + c] = float(q->codes[size_t(row0 + r) * s.in + k0 + c]) * q->scale[size_t(row0 + r)];
}

}  // namespace

TEST_CASE("GemmRowInvariant equals its scalar reference bit for bit, for any column range") {
  for (int n : {1, 2, 3, 4, 5, 7, 9, 33, 70})
    for (int in : {0, 1, 3, 15, 16, 17, 33, 130, 520, 1030})
      for (int out : {1, 2, 4, 47, 49, 100}) {
        const auto x = Random(size_t(n) * in, 11 + n), w = Random(size_t(out) * in, 13 + out + in);
        const k::WeightPanelSource src = k::F32Panels(w.data(), out, in);
        std::vector<float> y(size_t(n) * out, NAN), yr(size_t(n) * out, NAN);
        k::GemmRowInvariant(x.data(), n, src, y.data(), out, 0, out);
        k::ref::GemmRowInvariant(x.data(), n, src, yr.data(), out, 0, out);
        INFO("n=" << n << " in=" << in << " out=" << out);
        CHECK(SameBits(y.data(), yr.data(), y.size()));
        // A slice of the columns writes exactly those columns, with the same bits.
        const int c0 = out / 3, c1 = out - out / 4;
        std::vector<float> ys(size_t(n) * out, -7.0f);
        k::GemmRowInvariant(x.data(), n, src, ys.data(), out, c0, c1);
        bool slice_ok = true;
        for (int b = 0; b < n; ++b)
          for (int c = 0; c < out; ++c) {
            const float got = ys[size_t(b) * out + c];
            slice_ok = slice_ok && (c >= c0 && c < c1 ? std::memcmp(&got, &yr[size_t(b) * out + c], 4) == 0 : got == -7.0f);
          }
        CHECK(slice_ok);
      }
}

TEST_CASE("MatmulRowInvariant is within float tolerance of the plain reference product") {
  for (int n : {1, 6, 40})
    for (int in : {1, 17, 256, 700})
      for (int out : {3, 65, 130}) {
        const auto x = Random(size_t(n) * in, 21 + n), w = Random(size_t(out) * in, 23 + out);
        std::vector<float> y(size_t(n) * out), yr(size_t(n) * out);
        k::MatmulRowInvariant(x.data(), w.data(), y.data(), n, in, out);
        k::ref::Matmul(x.data(), w.data(), yr.data(), n, in, out);
        // Summation-order error of a length-`in` dot product of unit normals: ~eps * sqrt(in)
        // per term magnitude; 16 * eps * sqrt(in) * (1 + |y|) leaves no room for a wrong term.
        double worst = 0;
        for (size_t i = 0; i < y.size(); ++i) {
          const double tol = 16.0 * std::numeric_limits<float>::epsilon() * std::sqrt(double(in)) * (1.0 + std::fabs(yr[i]));
          worst = std::max(worst, std::fabs(double(y[i]) - yr[i]) / tol);
        }
        INFO("n=" << n << " in=" << in << " out=" << out << " worst error/tolerance " << worst);
        CHECK(worst <= 1.0);
      }
}

TEST_CASE("every row of an n-row product equals that row alone (MatVec), bit for bit, n = 1..300") {
  std::mt19937 rng(2026);
  std::uniform_int_distribution<int> in_d(1, 160), out_d(1, 90);
  for (int threads : {1, 2}) {
    k::SetPoolThreads(threads);
    for (int n = 1; n <= 300; n += threads == 1 ? 1 : 7) {
      const int in = in_d(rng), out = out_d(rng);
      const auto x = Random(size_t(n) * in, 1000 + n), w = Random(size_t(out) * in, 2000 + n);
      std::vector<float> y(size_t(n) * out), row(static_cast<size_t>(out)), one(static_cast<size_t>(out));
      k::MatmulRowInvariant(x.data(), w.data(), y.data(), n, in, out);
      bool same = true;
      int bad_row = -1;
      for (int b = 0; b < n && same; ++b) {
        k::internal::MatVec(w.data(), x.data() + size_t(b) * in, row.data(), out, in);
        k::MatmulRowInvariant(x.data() + size_t(b) * in, w.data(), one.data(), 1, in, out);
        same = SameBits(row.data(), y.data() + size_t(b) * out, size_t(out)) && SameBits(one.data(), row.data(), size_t(out));
        if (!same) bad_row = b;
      }
      INFO("n=" << n << " in=" << in << " out=" << out << " threads=" << threads << " first differing row " << bad_row);
      CHECK(same);
    }
  }
  k::SetPoolThreads(2);
}

TEST_CASE("MatVec sums in the lane-16 order (ref::DotLane16), so decode and the GEMM agree") {
  for (int in : {1, 7, 8, 9, 15, 16, 17, 31, 100, 512, 515})
    for (int rows : {1, 2, 3, 5, 6, 7, 13, 63, 64, 67, 130, 263}) {  // 64 up: the slice read in 4 parts
      const auto x = Random(size_t(in), 31 + in), w = Random(size_t(rows) * in, 37 + rows);
      std::vector<float> y(static_cast<size_t>(rows)), yr(static_cast<size_t>(rows));
      k::internal::MatVec(w.data(), x.data(), y.data(), rows, in);
      for (int r = 0; r < rows; ++r) yr[size_t(r)] = k::ref::DotLane16(w.data() + size_t(r) * in, x.data(), in);
      INFO("in=" << in << " rows=" << rows);
      CHECK(SameBits(y.data(), yr.data(), y.size()));
    }
}

TEST_CASE("a quantised source decodes through the panel interface: equals the reference on the decoded weights") {
  const int n = 37, in = 200, out = 101;
  Int8Rows q;
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> code(-127, 127);
  q.codes.resize(size_t(out) * in);
  for (auto& c : q.codes) c = int8_t(code(rng));
  q.scale = Random(size_t(out), 9);
  k::WeightPanelSource src;
  src.decode = DecodeInt8Rows;
  src.ctx = &q;
  src.out = out;
  src.in = in;
  const auto x = Random(size_t(n) * in, 77);
  std::vector<float> y(size_t(n) * out), yr(size_t(n) * out), wf(size_t(out) * in), yf(size_t(n) * out);
  k::GemmRowInvariant(x.data(), n, src, y.data(), out, 0, out);
  k::ref::GemmRowInvariant(x.data(), n, src, yr.data(), out, 0, out);
  CHECK(SameBits(y.data(), yr.data(), y.size()));
  // The same weights decoded up front as F32 give the same bits.
  DecodeInt8Rows(src, 0, out, 0, in, wf.data());
  k::MatmulRowInvariant(x.data(), wf.data(), yf.data(), n, in, out);
  CHECK(SameBits(y.data(), yf.data(), y.size()));
}

TEST_CASE("with SetRowInvariantMatmul(true), Matmul, MatmulAccumulate and MatmulMany rows equal decode's bit for bit") {
  k::SetRowInvariantMatmul(true);
  for (int threads : {1, 2}) {
    k::SetPoolThreads(threads);
    for (int n : {1, 5, 16, 17, 40, 129})
      for (int in : {9, 64, 300})
        for (int out : {7, 100, 130}) {
          const auto x = Random(size_t(n) * in, 500 + n), w = Random(size_t(out) * in, 600 + out);
          std::vector<float> y(size_t(n) * out), acc(size_t(n) * out, 0.5f), many(size_t(n) * out), row(static_cast<size_t>(out));
          k::Matmul(x.data(), w.data(), y.data(), n, in, out);
          k::MatmulAccumulate(x.data(), w.data(), acc.data(), n, in, out);
          const k::MatmulJob job{x.data(), w.data(), many.data(), n, in, out};
          k::MatmulMany(&job, 1);
          bool same = true;
          for (int b = 0; b < n; ++b) {
            k::internal::MatVec(w.data(), x.data() + size_t(b) * in, row.data(), out, in);
            same = same && SameBits(row.data(), y.data() + size_t(b) * out, size_t(out)) &&
                   SameBits(row.data(), many.data() + size_t(b) * out, size_t(out));
            for (int c = 0; c < out; ++c) {
              const float want = 0.5f + row[size_t(c)];
              same = same && std::memcmp(&want, &acc[size_t(b) * out + c], 4) == 0;
            }
          }
          INFO("n=" << n << " in=" << in << " out=" << out << " threads=" << threads);
          CHECK(same);
        }
  }
  k::SetRowInvariantMatmul(false);
  k::SetPoolThreads(2);
}
