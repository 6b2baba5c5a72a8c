// The many-row F32 product (kernels/gemm_prefill.h): bitwise equal to its scalar reference (one
// FMA chain per output), within float tolerance of a double-precision product, and each row's
// bits independent of how many rows share the product and where the row sits (what chunked ==
// whole prefill relies on), through Matmul and MatmulMany as the engine calls them.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu_internal.h"
#include "kernels/gemm_prefill.h"
#include "kernels/ops.h"
#include "tests/kernel_test_util.h"

namespace k = cedar::kernels;
namespace ki = cedar::kernels::internal;

namespace {

std::vector<float> Random(size_t n, uint64_t seed) { return cedar::test::RandomNormal(n, seed); }
using cedar::test::SameBits;

}  // namespace

TEST_CASE("GemmPrefillRows equals its scalar reference bit for bit, for any row range") {
  for (int n : {1, 5, 16, 17, 47, 48, 49, 100})
    for (int in : {0, 1, 7, 8, 9, 33, 320, 515})
      for (int out : {1, 5, 6, 7, 13, 64}) {
        const auto x = Random(size_t(n) * in, 3 + n), w = Random(size_t(out) * in, 5 + out + in);
        std::vector<float> y(size_t(n) * out, NAN), yr(size_t(n) * out, NAN);
        ki::GemmPrefillRows(x.data(), w.data(), y.data(), in, out, out, 0, n);
        ki::ref::GemmPrefillRows(x.data(), w.data(), yr.data(), in, out, out, 0, n);
        INFO("n=" << n << " in=" << in << " out=" << out);
        CHECK(SameBits(y.data(), yr.data(), y.size()));
        // Rows [3, n - 2) alone write exactly those rows, with the same bits.
        if (n > 5) {
          std::vector<float> ys(size_t(n) * out, NAN);
          ki::GemmPrefillRows(x.data(), w.data(), ys.data(), in, out, out, 3, n - 2);
          CHECK(std::isnan(ys[0]));
          CHECK(std::isnan(ys.back()));
          CHECK(SameBits(ys.data() + size_t(3) * out, y.data() + size_t(3) * out, size_t(n - 5) * out));
        }
      }
}

TEST_CASE("GemmPrefillRows is within float tolerance of the double-precision product") {
  const int n = 70, in = 512, out = 37;
  const auto x = Random(size_t(n) * in, 21), w = Random(size_t(out) * in, 22);
  std::vector<float> y(size_t(n) * out);
  ki::GemmPrefillRows(x.data(), w.data(), y.data(), in, out, out, 0, n);
  for (int r = 0; r < n; ++r)
    for (int o = 0; o < out; ++o) {
      double s = 0, a = 0;
      for (int i = 0; i < in; ++i) {
        s += double(x[size_t(r) * in + i]) * w[size_t(o) * in + i];
        a += std::fabs(double(x[size_t(r) * in + i]) * w[size_t(o) * in + i]);
      }
      // A chain of `in` float FMAs: each rounds once, by at most 2^-24 of the running sum.
      CHECK(std::fabs(y[size_t(r) * out + o] - s) <= in * 0x1p-24 * a);
    }
}

TEST_CASE("Matmul and MatmulMany rows above kFewRowsMax do not depend on the rows beside them") {
  if (!ki::kPrefillGemmFast) {  // no AVX2: those products stay on OpenBLAS sgemm
    MESSAGE("the prefill GEMM is not compiled in on this ISA: skipped");
    return;
  }
  const int in = 200, out = 90, n = 150;
  const auto x = Random(size_t(n) * in, 31), w = Random(size_t(out) * in, 32);
  std::vector<float> whole(size_t(n) * out), ref(size_t(n) * out);
  k::Matmul(x.data(), w.data(), whole.data(), n, in, out);
  ki::ref::GemmPrefillRows(x.data(), w.data(), ref.data(), in, out, out, 0, n);
  CHECK(SameBits(whole.data(), ref.data(), whole.size()));
  // The same rows in chunks of 17..60 (each above kFewRowsMax), as chunked prefill runs them,
  // and as two jobs of one MatmulMany.
  for (int chunk : {17, 33, 60}) {
    std::vector<float> parts(size_t(n) * out);
    for (int r = 0; r < n; r += chunk) {
      const int c = std::min(chunk, n - r);
      if (c <= ki::kFewRowsMax) continue;
      k::Matmul(x.data() + size_t(r) * in, w.data(), parts.data() + size_t(r) * out, c, in, out);
      INFO("chunk=" << chunk << " r=" << r);
      CHECK(SameBits(parts.data() + size_t(r) * out, whole.data() + size_t(r) * out, size_t(c) * out));
    }
  }
  std::vector<float> many(size_t(n) * out);
  const k::MatmulJob jobs[2] = {{x.data(), w.data(), many.data(), 64, in, out},
                                {x.data() + size_t(64) * in, w.data(), many.data() + size_t(64) * out, n - 64, in, out}};
  k::MatmulMany(jobs, 2);
  CHECK(SameBits(many.data(), whole.data(), whole.size()));
}
