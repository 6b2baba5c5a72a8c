// One table of op cases, run against every CPU kernel and its scalar reference. The tolerance
// comes from the dtype (float32 epsilon) times the size of the reduction and the magnitude of
// the inputs; a failure names the worst element with both values.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/avx2_runtime.h"
#include "kernels/gemm_rowinv.h"
#include "kernels/hw_probe.h"
#include "kernels/ops.h"
#include "kernels/thread_pool.h"

namespace k = cedar::kernels;

namespace {

constexpr double kEps = std::numeric_limits<float>::epsilon();

std::vector<float> Random(size_t n, uint64_t seed, float scale = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// Compares element-wise; tol = kEps * growth * (1 + |expected|) per element.
void ExpectClose(const std::string& what, const std::vector<float>& got, const std::vector<float>& want, double growth) {
  REQUIRE(got.size() == want.size());
  double worst = 0;
  size_t at = 0;
  bool ok = true;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(double(got[i]) - want[i]);
    const double tol = kEps * growth * (1.0 + std::fabs(want[i]));
    if (!(err <= tol)) ok = false;
    if (err / (tol > 0 ? tol : 1) > worst) {
      worst = err / (tol > 0 ? tol : 1);
      at = i;
    }
  }
  INFO(what << ": worst element " << at << " got " << (got.empty() ? 0 : got[at]) << " expected "
            << (want.empty() ? 0 : want[at]) << " (error/tolerance " << worst << ")");
  CHECK(ok);
}

const int kSizes[] = {0, 1, 2, 3, 7, 8, 15, 16, 17, 31, 64, 100, 129};

}  // namespace

TEST_CASE("Matmul and MatmulAccumulate match the reference over a sweep of shapes") {
  for (int n : {0, 1, 2, 5, 17, 33})
    for (int in : {0, 1, 3, 16, 31, 130})
      for (int out : {1, 2, 9, 64, 65}) {
        auto x = Random(size_t(n) * in, 1 + n), w = Random(size_t(out) * in, 2 + out);
        std::vector<float> y(size_t(n) * out, 0.5f), yr = y;
        k::Matmul(x.data(), w.data(), y.data(), n, in, out);
        k::ref::Matmul(x.data(), w.data(), yr.data(), n, in, out);
        const double growth = 4.0 * std::sqrt(double(std::max(in, 1))) * 4;
        ExpectClose("Matmul n=" + std::to_string(n) + " in=" + std::to_string(in) + " out=" + std::to_string(out), y, yr, growth);
        std::vector<float> a(size_t(n) * out, 0.25f), ar = a;
        k::MatmulAccumulate(x.data(), w.data(), a.data(), n, in, out);
        k::ref::MatmulAccumulate(x.data(), w.data(), ar.data(), n, in, out);
        ExpectClose("MatmulAccumulate", a, ar, growth);
      }
}

TEST_CASE("the row-invariant GEMM matches the reference over a sweep of shapes") {
  for (int n : {1, 2, 5, 17, 33})
    for (int in : {1, 3, 16, 31, 130})
      for (int out : {1, 2, 9, 64, 65}) {
        auto x = Random(size_t(n) * in, 1 + n), w = Random(size_t(out) * in, 2 + out);
        std::vector<float> y(size_t(n) * out, 0.5f), yr = y;
        k::MatmulRowInvariant(x.data(), w.data(), y.data(), n, in, out);
        k::ref::Matmul(x.data(), w.data(), yr.data(), n, in, out);
        const double growth = 4.0 * std::sqrt(double(std::max(in, 1))) * 4;  // as Matmul's row above
        ExpectClose("MatmulRowInvariant n=" + std::to_string(n) + " in=" + std::to_string(in) + " out=" + std::to_string(out), y, yr, growth);
      }
}

TEST_CASE("a row of a few-row product equals the same row alone, bit for bit (batched decode == decode)") {
  for (int threads : {1, 2}) {
    k::SetPoolThreads(threads);
    // n covers every pass shape of the AVX2 kernel (2-6 rows in one pass, near-equal passes of
    // 3 and 4 above: 7 = 3 + 4, 9 = 3 x 3, 13 = 3 + 3 + 3 + 4, 16 = 4 x 4) and out = 7, 64, 263
    // leave rows over after its parts; in = 600 makes its blocks 9-27 rows per part, so out = 263
    // crosses several.
    for (int n : {2, 3, 4, 5, 6, 7, 8, 9, 13, 16})
      for (int in : {1, 17, 64, 200, 600})
        for (int out : {1, 7, 64, 263}) {
          auto x = Random(size_t(n) * in, 300 + n), w = Random(size_t(out) * in, 400 + out);
          std::vector<float> y(size_t(n) * out), row(static_cast<size_t>(out));
          k::Matmul(x.data(), w.data(), y.data(), n, in, out);
          bool same = true;
          for (int b = 0; b < n; ++b) {
            k::Matmul(x.data() + size_t(b) * in, w.data(), row.data(), 1, in, out);
            same = same && std::equal(row.begin(), row.end(), y.begin() + size_t(b) * out);
          }
          INFO("n=" << n << " in=" << in << " out=" << out << " threads=" << threads);
          CHECK(same);
        }
  }
  k::SetPoolThreads(2);
}

TEST_CASE("MatmulMany equals one Matmul per job, for jobs of mixed sizes including empty ones") {
  for (int threads : {1, 2, 3}) {
    k::SetPoolThreads(threads);
    const int shapes[][3] = {{1, 64, 320}, {1, 64, 7}, {0, 8, 8}, {5, 31, 129}, {1, 0, 9}, {33, 16, 64}, {1, 130, 1},
                              {1, 200, 263}, {1, 17, 45}, {1, 512, 100}, {8, 200, 263}, {16, 33, 100},
                              {3, 512, 70}, {13, 17, 45}};
    std::vector<std::vector<float>> xs, ws, ys, yr;
    std::vector<k::MatmulJob> jobs;
    for (size_t i = 0; i < std::size(shapes); ++i) {
      const int n = shapes[i][0], in = shapes[i][1], out = shapes[i][2];
      xs.push_back(Random(size_t(n) * in, 70 + i));
      ws.push_back(Random(size_t(out) * in, 80 + i));
      ys.emplace_back(size_t(n) * out, NAN);
      yr.emplace_back(size_t(n) * out, NAN);
    }
    for (size_t i = 0; i < std::size(shapes); ++i)
      jobs.push_back({xs[i].data(), ws[i].data(), ys[i].data(), shapes[i][0], shapes[i][1], shapes[i][2]});
    k::MatmulMany(jobs.data(), int(jobs.size()));
    for (auto& j : jobs) j.y = yr[size_t(&j - jobs.data())].data();
    k::ref::MatmulMany(jobs.data(), int(jobs.size()));
    for (size_t i = 0; i < std::size(shapes); ++i)
      ExpectClose("MatmulMany job " + std::to_string(i), ys[i], yr[i], 4.0 * (1 + shapes[i][1]));
  }
  k::SetPoolThreads(2);
}

TEST_CASE("RmsNorm, Softmax, Dot and SwiGLU match the reference for every size") {
  for (int n : kSizes) {
    auto x = Random(size_t(n) * 3, 10 + n, 3.0f), w = Random(size_t(std::max(n, 1)), 11 + n);
    std::vector<float> y(x.size()), yr(x.size());
    k::RmsNorm(x.data(), w.data(), y.data(), 3, n, 1e-6f);
    k::ref::RmsNorm(x.data(), w.data(), yr.data(), 3, n, 1e-6f);
    ExpectClose("RmsNorm dim=" + std::to_string(n), y, yr, 8.0 * (1 + std::sqrt(double(n))));

    std::vector<float> s(x.begin(), x.begin() + n), sr = s;
    k::Softmax(s.data(), n);
    k::ref::Softmax(sr.data(), n);
    ExpectClose("Softmax n=" + std::to_string(n), s, sr, 8.0 * (1 + n));

    std::vector<float> d{k::Dot(x.data(), w.data(), n)}, dr{k::ref::Dot(x.data(), w.data(), n)};
    ExpectClose("Dot n=" + std::to_string(n), d, dr, 16.0 * (1 + n));

    auto g = Random(size_t(n), 20 + n, 8.0f), u = Random(size_t(n), 21 + n, 8.0f);
    for (float limit : {0.0f, 10.0f, 2.5f}) {
      std::vector<float> o(static_cast<size_t>(n)), orf(static_cast<size_t>(n));
      k::SwiGLU(g.data(), u.data(), o.data(), n, limit);
      k::ref::SwiGLU(g.data(), u.data(), orf.data(), n, limit);
      ExpectClose("SwiGLU n=" + std::to_string(n) + " limit=" + std::to_string(limit), o, orf, 16.0);
    }
  }
}

TEST_CASE("SwiGLU: an element's bits do not depend on where it sits (vector body, padded tail, pool part)") {
  // 70000 elements split over the pool in parts; every sub-range recomputed alone must give the
  // same bits (decode's one row and a prefill's thousands run the same function).
  const int n = 70000;
  const auto g = Random(size_t(n), 41, 6.0f), u = Random(size_t(n), 42, 6.0f);
  for (float limit : {0.0f, 7.0f}) {
    std::vector<float> whole(static_cast<size_t>(n));
    k::SwiGLU(g.data(), u.data(), whole.data(), n, limit);
    for (int b : {0, 1, 7, 8, 13, 16389}) {
      const int len = std::min(n - b, 37);
      std::vector<float> part(static_cast<size_t>(len));
      k::SwiGLU(g.data() + b, u.data() + b, part.data(), len, limit);
      INFO("b=" << b << " limit=" << limit);
      CHECK(std::memcmp(part.data(), whole.data() + b, size_t(len) * sizeof(float)) == 0);
    }
  }
}

TEST_CASE("Rope matches the reference, and the inverse rotation undoes it") {
  for (int rows : {0, 1, 3, 9})
    for (int rope : {0, 2, 8, 16}) {
      const int dim = 32, vecs = 3;
      auto x = Random(size_t(rows) * vecs * dim, 30 + rows + rope);
      std::vector<int64_t> pos(static_cast<size_t>(rows));
      for (int r = 0; r < rows; ++r) pos[size_t(r)] = int64_t(r) * 977 + 3;  // large positions too
      std::vector<float> a = x, b = x;
      k::Rope(a.data(), rows, vecs, dim, rope, pos.data(), 160000.0f, 1);
      k::ref::Rope(b.data(), rows, vecs, dim, rope, pos.data(), 160000.0f, 1);
      ExpectClose("Rope rows=" + std::to_string(rows) + " rope=" + std::to_string(rope), a, b, 64.0);
      k::Rope(a.data(), rows, vecs, dim, rope, pos.data(), 160000.0f, -1);
      ExpectClose("Rope inverse", a, x, 64.0);
    }
}

// SinkAttention of one row (heads x dim; n_win window entries, then n_sel selections of a pool
// of pool_n) against the scalar reference; the inputs drawn from seeds seed + dim, seed + 1 +
// n_win, seed + 2 and seed + 3.
static void ExpectSinkAttentionMatchesReference(int n_win, int n_sel, int dim, int heads, int pool_n, uint64_t seed) {
  auto q = Random(size_t(heads) * dim, seed + dim, 2.0f), win = Random(size_t(n_win) * dim, seed + 1 + n_win);
  auto pool = Random(size_t(pool_n) * dim, seed + 2), sink = Random(size_t(heads), seed + 3);
  std::vector<int32_t> sel(static_cast<size_t>(n_sel));
  for (int i = 0; i < n_sel; ++i) sel[size_t(i)] = (i * 7 + 3) % pool_n;
  std::vector<float> o(size_t(heads) * dim), orf(size_t(heads) * dim);
  const float scale = 1.0f / std::sqrt(float(dim));
  k::SinkAttention(q.data(), heads, dim, win.data(), n_win, pool.data(), sel.data(), n_sel, sink.data(), scale, o.data());
  k::ref::SinkAttention(q.data(), heads, dim, win.data(), n_win, pool.data(), sel.data(), n_sel, sink.data(), scale, orf.data());
  ExpectClose("SinkAttention heads=" + std::to_string(heads) + " win=" + std::to_string(n_win) + " sel=" + std::to_string(n_sel) +
                  " dim=" + std::to_string(dim),
              o, orf, 32.0 * (1 + std::sqrt(double(dim))) * (1 + std::sqrt(double(n_win + n_sel))));
}

TEST_CASE("SinkAttention matches the reference with windows, selections and empty sources") {
  for (int n_win : {0, 1, 5, 16})
    for (int n_sel : {0, 1, 7, 33})
      for (int dim : {1, 8, 16, 33, 48, 128})
        for (int heads : {1, 3, 4, 8, 13}) ExpectSinkAttentionMatchesReference(n_win, n_sel, dim, heads, 40, 40);
}

TEST_CASE("SinkAttention over more entries than one score block") {
  // The AVX2 path scores ~96 KiB of entries at a time for all head groups (96 entries at dim
  // 256, 192 at 128): rows of medium's shape (window 128 + selections) cross several blocks,
  // and a block boundary must not drop, repeat or reorder an entry.
  for (int dim : {128, 256})
    for (int heads : {4, 16})
      for (int n_sel : {95, 97, 300}) ExpectSinkAttentionMatchesReference(128, n_sel, dim, heads, 512, 70);
}

TEST_CASE("SinkAttention: a head's result is the same bits with its row's other heads or in a group of 4 alone") {
  // AttendRows splits a row's heads into groups of 4 when rows are fewer than threads (decode) and
  // gives whole rows otherwise (prefill, mixed steps): a row's output must not depend on which.
  for (int n : {0, 1, 2, 3, 4, 31, 32, 33, 100, 200})
    for (int dim : {16, 32, 128}) {
      const int heads = 8, pool_n = 300;
      auto q = Random(size_t(heads) * dim, 60 + dim, 2.0f), win = Random(size_t(16) * dim, 61);
      auto pool = Random(size_t(pool_n) * dim, 62), sink = Random(size_t(heads), 63);
      const int n_win = std::min(n, 16), n_sel = n - n_win;
      std::vector<int32_t> sel(static_cast<size_t>(n_sel));
      for (int i = 0; i < n_sel; ++i) sel[size_t(i)] = (i * 7 + 3) % pool_n;
      std::vector<float> whole(size_t(heads) * dim), split(size_t(heads) * dim);
      const float scale = 1.0f / std::sqrt(float(dim));
      k::SinkAttention(q.data(), heads, dim, win.data(), n_win, pool.data(), sel.data(), n_sel, sink.data(), scale, whole.data());
      for (int h = 0; h < heads; h += 4)
        k::SinkAttention(q.data() + size_t(h) * dim, 4, dim, win.data(), n_win, pool.data(), sel.data(), n_sel, sink.data() + h,
                         scale, split.data() + size_t(h) * dim);
      INFO("entries " << n << " dim " << dim);
      CHECK(std::memcmp(whole.data(), split.data(), whole.size() * sizeof(float)) == 0);
    }
}

TEST_CASE("IndexScores matches the reference") {
  // heads 4 and 8 with hd 8 and 64 (the model's): the one- and two-row (decode) path's 4-head tiles.
  for (int rows : {0, 1, 2, 4, 13})
    for (int keys : {0, 1, 9, 100})
      for (int hd : {1, 8, 20, 64})
        for (int heads : {3, 4, 8}) {
          auto q = Random(size_t(rows) * heads * hd, 50 + rows), w = Random(size_t(rows) * heads, 51);
          auto kv = Random(size_t(keys) * hd, 52 + keys);
          std::vector<float> s(size_t(rows) * keys), sr(size_t(rows) * keys);
          k::IndexScores(q.data(), w.data(), kv.data(), rows, heads, hd, keys, s.data());
          k::ref::IndexScores(q.data(), w.data(), kv.data(), rows, heads, hd, keys, sr.data());
          ExpectClose("IndexScores rows=" + std::to_string(rows) + " keys=" + std::to_string(keys) + " hd=" + std::to_string(hd) +
                          " heads=" + std::to_string(heads),
                      s, sr, 16.0 * heads * (1 + std::sqrt(double(hd))) * 4);
        }
}

// The benchmark's machine line names the kernels that ran. A build without -march takes its AVX2
// kernels exactly where the CPU has AVX2 and FMA and CEDAR_NO_AVX2 is unset: the _noavx2 runs
// here and the runs on qemu's Nehalem (kernels_portable_cpu_test) must report "plain".
TEST_CASE("KernelIsa names the kernels this process runs") {
  const std::string isa = k::KernelIsa();
#if defined(CEDAR_AVX2_AT_RUNTIME)
  __builtin_cpu_init();
  const bool cpu = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  const char* no = std::getenv("CEDAR_NO_AVX2");
  const bool refused = no && *no && std::string(no) != "0";
  CHECK(isa == (cpu && !refused ? "avx2-at-run-time" : "plain"));
#elif defined(__AVX512F__)
  CHECK(isa.rfind("avx512", 0) == 0);
#elif defined(__AVX2__) && defined(__FMA__)
  CHECK(isa == "avx2");
#else
  CHECK(isa == "plain");
#endif
}

#if defined(CEDAR_AVX2_KERNELS)  // (builds and CPUs without AVX2 score every row through sgemm)
TEST_CASE("IndexScores at decode adds in its documented order (8 lanes, a fixed tree, heads in order)") {
  if (!k::internal::Avx2KernelsRun()) return;  // a portable build on its plain loops (CEDAR_NO_AVX2)
  // The one- and two-row path's order: per head, lane l sums q[i] * key[i] over i = l mod 8 by
  // FMA; the lanes are added as ((0 + 1) + (2 + 3)) + ((4 + 5) + (6 + 7)); the ReLU-weighted heads
  // are added in head order from 0, each by one FMA. The AVX2 and AVX-512 loops must both give
  // exactly this.
  for (int rows : {1, 2})
    for (int keys : {1, 2, 3, 5, 8, 67}) {
      const int heads = 8, hd = 128;
      auto q = Random(size_t(rows) * heads * hd, 70 + keys), w = Random(size_t(rows) * heads, 71);
      auto kv = Random(size_t(keys) * hd, 72 + keys);
      std::vector<float> got(size_t(rows) * keys), want(size_t(rows) * keys);
      k::IndexScores(q.data(), w.data(), kv.data(), rows, heads, hd, keys, got.data());
      for (int r = 0; r < rows; ++r)
        for (int j = 0; j < keys; ++j) {
          float acc = 0.0f;
          for (int h = 0; h < heads; ++h) {
            float lane[8] = {};
            for (int i = 0; i < hd; ++i)
              lane[i % 8] = std::fma(q[(size_t(r) * heads + h) * hd + size_t(i)], kv[size_t(j) * hd + size_t(i)], lane[i % 8]);
            volatile float d = ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
            acc = std::fma(w[size_t(r) * heads + size_t(h)], d > 0.0f ? d : 0.0f, acc);
          }
          want[size_t(r) * keys + size_t(j)] = acc;
        }
      CHECK_MESSAGE(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) == 0, "rows ", rows, " keys ", keys);
    }
}
#endif

TEST_CASE("IndexScores at decode gives the same bits whether its keys are split over the pool or not") {
  // The one- and two-row path splits the keys over the threads: each key's sum must not change.
  const int pool_before = k::Threads();
  for (int rows : {1, 2})
    for (int keys : {65, 130, 1001, 4096}) {
      const int heads = 8, hd = 128;
      auto q = Random(size_t(rows) * heads * hd, 60 + keys), w = Random(size_t(rows) * heads, 61);
      auto kv = Random(size_t(keys) * hd, 62 + keys);
      std::vector<float> one(size_t(rows) * keys), two(size_t(rows) * keys, -1.0f);
      k::SetPoolThreads(1);
      k::IndexScores(q.data(), w.data(), kv.data(), rows, heads, hd, keys, one.data());
      k::SetPoolThreads(2);
      k::IndexScores(q.data(), w.data(), kv.data(), rows, heads, hd, keys, two.data());
      CHECK_MESSAGE(std::memcmp(one.data(), two.data(), one.size() * sizeof(float)) == 0, "rows ", rows, " keys ", keys);
    }
  k::SetPoolThreads(pool_before);  // the later cases run on the pool they would have had
}

TEST_CASE("TopK matches the reference, breaks ties toward the lower index and skips -inf") {
  std::mt19937_64 rng(7);
  for (int n : kSizes)
    for (int kk : {0, 1, 3, 8, 200}) {
      std::vector<float> s(static_cast<size_t>(n));
      for (int i = 0; i < n; ++i) s[size_t(i)] = float(rng() % 5);  // many ties
      if (n > 3) s[2] = -std::numeric_limits<float>::infinity();
      std::vector<int32_t> a(size_t(std::max(kk, 1))), b(size_t(std::max(kk, 1)));
      const int na = k::TopK(s.data(), n, kk, a.data()), nb = k::ref::TopK(s.data(), n, kk, b.data());
      REQUIRE(na == nb);
      a.resize(size_t(na));
      b.resize(size_t(nb));
      CHECK(a == b);
      for (int32_t i : a) CHECK(std::isfinite(s[size_t(i)]));
    }
}

TEST_CASE("TopK at the model's sizes: k = 512 of thousands with ties, and fewer finite scores than k") {
  std::mt19937_64 rng(9);
  for (int n : {511, 512, 513, 4096, 5000})
    for (int kk : {512, 64, 1, 3000}) {
      std::vector<float> s(static_cast<size_t>(n));
      // Negative and positive scores, many ties, -0 beside +0 (equal, so a tie), and -inf.
      for (int i = 0; i < n; ++i) s[size_t(i)] = (float(rng() % 97) - 48.0f) * 0.25f;
      for (int i = 0; i < n; i += 7) s[size_t(i)] = (i % 2) ? -0.0f : 0.0f;
      for (int i = 0; i < n; i += 3) s[size_t(i)] = -std::numeric_limits<float>::infinity();
      std::vector<int32_t> a(static_cast<size_t>(kk)), b(static_cast<size_t>(kk));
      const int na = k::TopK(s.data(), n, kk, a.data()), nb = k::ref::TopK(s.data(), n, kk, b.data());
      REQUIRE(na == nb);
      a.resize(size_t(na));
      b.resize(size_t(nb));
      CHECK(a == b);
    }
}

#include <atomic>

#include "kernels/thread_pool.h"

TEST_CASE("ParallelFor covers every index exactly once, runs nested calls inline, and survives resizing") {
  // 8 threads on a small machine: workers are often not running when a job is posted, so
  // the caller claims their parts (each index must still run exactly once).
  for (int threads : {1, 2, 3, 8}) {
    k::SetPoolThreads(threads);
    CHECK(k::Threads() == threads);
    for (int64_t n : {0, 1, 2, 7, 1000}) {
      for (int64_t grain : {1, 3, 64}) {
        std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
        for (int rep = 0; rep < 50; ++rep)
          k::ParallelFor(n, grain, [&](int64_t b, int64_t e) {
            for (int64_t i = b; i < e; ++i) hits[size_t(i)]++;
            k::ParallelFor(4, 1, [&](int64_t, int64_t) {});  // nested: inline, no deadlock
          });
        for (auto& h : hits) CHECK(h.load() == 50);
      }
    }
  }
  k::SetPoolThreads(2);
}
