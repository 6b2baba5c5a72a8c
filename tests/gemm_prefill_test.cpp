// The many-row F32 product (kernels/gemm_prefill.h): bitwise equal to its scalar reference (one
// FMA chain per output), within float tolerance of a double-precision product, and each row's
// bits independent of how many rows share the product and where the row sits (what chunked ==
// whole prefill relies on), through Matmul and MatmulMany as the engine calls them; the same on
// rows packed once (PackedRows), and typed weights' many-row products on it.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu_internal.h"
#include "kernels/gemm_prefill.h"
#include "kernels/ops.h"
#include "kernels/thread_pool.h"
#include "kernels/weight_quantize.h"
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

TEST_CASE("GemmPackedRows (x packed once) equals GemmPrefillRows bit for bit") {
  for (int threads : {1, 2}) {
    k::SetPoolThreads(threads);
    for (int n : {1, 15, 16, 17, 48, 49, 97, 130})
      for (int in : {1, 9, 64, 515})
        for (int out : {1, 6, 7, 40}) {
          const auto x = Random(size_t(n) * in, 7 + n + in), w = Random(size_t(out) * in, 9 + out);
          std::vector<float> y(size_t(n) * out, NAN), yr(size_t(n) * out, NAN);
          ki::PackedRows px;
          px.Pack(x.data(), n, in);
          ki::GemmPackedRows(px, w.data(), y.data(), out, out);
          ki::ref::GemmPrefillRows(x.data(), w.data(), yr.data(), in, out, out, 0, n);
          INFO("n=" << n << " in=" << in << " out=" << out << " threads=" << threads);
          CHECK(SameBits(y.data(), yr.data(), y.size()));
        }
  }
  k::SetPoolThreads(2);
}

namespace {

// One typed job of a MatmulMany call: `out` weight rows (random, seed), x[rows, in].
struct TypedJob {
  int out;
  const std::vector<float>* x;
  int rows;
  uint64_t seed;
};

// The jobs' weights in `type` and what each job must give: ref::GemmPrefillRows on the decoded
// weights.
struct TypedJobs {
  std::vector<k::OwnedWeight> ws;
  std::vector<std::vector<float>> want;
};

// Runs the jobs through one MatmulMany, twice (the second call finds the worker still spinning,
// so it claims parts of every pass too), and checks every output bit for bit.
TypedJobs CheckTypedJobs(k::WeightType type, int in, const std::vector<TypedJob>& spec, int threads) {
  TypedJobs t;
  std::vector<std::vector<float>> ys;
  std::vector<k::MatmulJob> jobs;
  for (size_t i = 0; i < spec.size(); ++i) {
    const TypedJob& s = spec[i];
    t.ws.push_back(k::QuantizeWeight(Random(size_t(s.out) * in, s.seed), s.out, in, type));
    std::vector<float> dec(size_t(s.out) * in);
    ki::QuantDecodeRows(t.ws.back().view, 0, s.out, dec.data());
    t.want.emplace_back(size_t(s.rows) * s.out, NAN);
    ki::ref::GemmPrefillRows(s.x->data(), dec.data(), t.want.back().data(), in, s.out, s.out, 0, s.rows);
    ys.emplace_back(size_t(s.rows) * s.out, NAN);
  }
  for (size_t i = 0; i < spec.size(); ++i) {
    k::MatmulJob j{spec[i].x->data(), nullptr, ys[i].data(), spec[i].rows, in, spec[i].out};
    j.wv = t.ws[i].view;
    jobs.push_back(j);
  }
  for (int call = 0; call < 2; ++call) {
    for (auto& y : ys) std::fill(y.begin(), y.end(), NAN);
    k::MatmulMany(jobs.data(), int(jobs.size()));
    for (size_t i = 0; i < spec.size(); ++i) {
      INFO(k::WeightTypeName(type) << " job " << i << " threads=" << threads << " call " << call);
      CHECK(SameBits(ys[i].data(), t.want[i].data(), ys[i].size()));
    }
  }
  return t;
}

const k::WeightType kTypes[] = {k::WeightType::kBF16, k::WeightType::kI8, k::WeightType::kFP8, k::WeightType::kFP4};

}  // namespace

// Typed weights above kFewRowsMax rows: panels of weight rows decoded to F32, then the prefill
// GEMM's FMA chain per output over x packed once per product (MatmulMany shares the packing
// between jobs over the same x, as Wq_a and Wkv are): every output equals ref::GemmPrefillRows
// on the decoded weights, bit for bit, whichever jobs run beside it.
TEST_CASE("typed many-row products equal the prefill GEMM on the decoded weights, bit for bit") {
  for (int threads : {1, 2}) {
    k::SetPoolThreads(threads);
    for (k::WeightType type : kTypes) {
      // in = 8224: 112-row weight panels, so the 240-300-wide jobs have more than one panel per
      // slice and get x packed once (jobs 0 and 3 share it), the 33-wide job packs per panel;
      // job 2 has an x of its own.
      const int n = 70, in = 8224;
      REQUIRE(ki::TypedPanelRows(in) == 112);
      const auto x = Random(size_t(n) * in, 41), x2 = Random(size_t(20) * in, 42);
      const TypedJobs t = CheckTypedJobs(type, in, {{300, &x, n, 50}, {33, &x, n, 51}, {240, &x2, 20, 52}, {260, &x, n, 53}}, threads);
      std::vector<float> alone(t.want[0].size(), NAN);
      k::MatmulW(x.data(), t.ws[0].view, alone.data(), n);
      CHECK(SameBits(alone.data(), t.want[0].data(), alone.size()));
    }
  }
  k::SetPoolThreads(2);
}

// Typed products of at most a panel's size over 2048 rows of x or more (a prefill chunk) are
// decoded whole to F32 in one pool pass and run on the F32 path's row blocks (matmul_many.cpp
// DecodesWhole): the same bits as the prefill GEMM on the decoded weights.
TEST_CASE("typed products over 2048+ rows, decoded whole, equal the prefill GEMM on the decoded weights") {
  for (int threads : {1, 2}) {
    k::SetPoolThreads(threads);
    for (k::WeightType type : kTypes) {
      const int n = 2100, in = 96;
      const auto x = Random(size_t(n) * in, 61);
      CheckTypedJobs(type, in, {{40, &x, n, 70}, {72, &x, n, 71}, {8, &x, n, 72}}, threads);
    }
  }
  k::SetPoolThreads(2);
}
