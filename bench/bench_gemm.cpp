// The row-invariant GEMM (kernels/gemm_rowinv.h) against OpenBLAS sgemm in the same run, on the
// `small` preset's product shapes (or `medium`'s: --preset medium). Prints one JSON line per
// (shape, rows). Never asserts a timing.
//
//   bench_gemm [--rows 16,64,512,2048] [--reps 5] [--threads 0 (pool default)] [--stream] [--preset small|medium]
//
// --stream: one [32768, 2048] weight matrix (256 MiB, far above any cache) instead of small's
// shapes, i.e. decode's memory-bound regime (run it with --rows 1,8: MatVec vs sgemv).
//
// Each rep times sgemm then the row-invariant GEMM back to back (interleaved, so load on this
// shared machine hits both alike); the figures are the best rep of each and their ratio.
// sgemm runs as kernels::Matmul ran it above 16 rows: column slices of >= 64 over the pool.
// "matmul" is kernels::Matmul as routed in this build (above 16 rows: the prefill GEMM,
// kernels/gemm_prefill.h; matmul_over_sgemm is its rate over sgemm's). At 1 row the baseline is sgemv.
#include <cblas.h>
#include <sys/sysinfo.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_flags.h"
#include "bench/bench_stats.h"
#include "kernels/gemm_rowinv.h"
#include "kernels/ops.h"
#include "kernels/thread_pool.h"

using namespace cedar;
namespace po = boost::program_options;

namespace {

struct Shape {
  const char* name;
  int out, in;
};

double CpuNow() {
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

// Wall seconds and process CPU seconds of f. On a loaded machine the CPU seconds (all threads
// together) are the steadier figure: time spent descheduled is not counted.
std::pair<double, double> Seconds(const std::function<void()>& f) {
  const auto t0 = std::chrono::steady_clock::now();
  const double c0 = CpuNow();
  f();
  return {std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), CpuNow() - c0};
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> rows = {16, 64, 512, 2048};
  int reps = 5, threads = 0;
  bool stream = false;
  std::string preset = "small";
  auto desc = bench::Options("bench_gemm: the row-invariant GEMM against OpenBLAS sgemm on small's (or medium's) shapes, as JSON lines");
  desc.add_options()("rows", bench::IntListOption("--rows", &rows, 1, 1 << 20), "rows of x (comma-separated)")(
      "reps", cli::IntOption("--reps", &reps, 1, 1 << 20), "timed reps (the best is printed)")(
      "threads", cli::IntOption("--threads", &threads, 0, 4096), "pool threads (0: the pool's default)")(
      "stream", po::bool_switch(&stream), "one [32768, 2048] weight (256 MiB) instead of small's shapes")(
      "preset", po::value(&preset), "whose product shapes: small (default) or medium");
  if (const int rc = bench::ParseFlags("bench_gemm", desc, argc, argv); rc >= 0) return rc;
  openblas_set_num_threads(1);
  kernels::SetThreads(threads);
  // small: d 512, q_lora 256, 8 heads x 128, o groups 2 x rank 256, experts inter 320, vocab 512.
  // medium: d 2048, q_lora 1024, 16 heads x 256, o groups 4 x rank 1024, experts inter 1024, vocab 512.
  if (preset != "small" && preset != "medium") {
    std::fprintf(stderr, "bench_gemm: --preset: expected small or medium, found '%s'\n", preset.c_str());
    return 2;
  }
  const std::vector<Shape> shapes =
      stream ? std::vector<Shape>{{"stream", 32768, 2048}}
      : preset == "medium"
          ? std::vector<Shape>{{"q_a", 1024, 2048},        {"q_b", 4096, 1024},         {"o_a", 1024, 1024}, {"o_b", 2048, 4096},
                               {"expert_up", 1024, 2048}, {"expert_down", 2048, 1024}, {"head", 512, 2048}}
          : std::vector<Shape>{{"q_a", 256, 512},       {"q_b", 1024, 256},        {"o_a", 256, 512}, {"o_b", 512, 512},
                               {"expert_up", 320, 512}, {"expert_down", 512, 320}, {"head", 512, 512}};
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (const Shape& s : shapes) {
    std::vector<float> w(size_t(s.out) * s.in);
    for (float& v : w) v = u(rng);
    for (int n : rows) {
      std::vector<float> x(size_t(n) * s.in), y(size_t(n) * s.out);
      for (float& v : x) v = u(rng);
      auto sgemm = [&] {
        kernels::ParallelFor(s.out, 64, [&](int64_t b, int64_t e) {
          if (n == 1)  // the one-row baseline is sgemv (what MatVec was on AVX2 before the lane-16 order)
            cblas_sgemv(CblasRowMajor, CblasNoTrans, int(e - b), s.in, 1.0f, w.data() + size_t(b) * s.in, s.in,
                        x.data(), 1, 0.0f, y.data() + b, 1);
          else
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, int(e - b), s.in, 1.0f, x.data(), s.in,
                      w.data() + size_t(b) * s.in, s.in, 0.0f, y.data() + b, s.out);
        });
      };
      auto rowinv = [&] { kernels::MatmulRowInvariant(x.data(), w.data(), y.data(), n, s.in, s.out); };
      auto matmul = [&] { kernels::Matmul(x.data(), w.data(), y.data(), n, s.in, s.out); };
      // Enough calls per timing for ~20 ms of work at ~50 GFLOP/s.
      const double flop = 2.0 * n * s.in * s.out;
      const int calls = std::max(1, int(1e9 / flop));
      auto timed = [&](const std::function<void()>& f) {
        auto [wall, cpu] = Seconds([&] {
          for (int c = 0; c < calls; ++c) f();
        });
        return std::pair<double, double>(wall / calls, cpu / calls);
      };
      sgemm();
      rowinv();
      matmul();  // warm-up
      // Best rep of each, by wall time and by CPU time.
      std::pair<double, double> ts{1e30, 1e30}, tr = ts, tm = ts;
      auto keep = [](std::pair<double, double>& best, std::pair<double, double> t) {
        best.first = std::min(best.first, t.first);
        best.second = std::min(best.second, t.second);
      };
      for (int r = 0; r < reps; ++r) {
        keep(ts, timed(sgemm));
        keep(tr, timed(rowinv));
        keep(tm, timed(matmul));
      }
      std::printf(
          "{\"shape\":\"%s\",\"out\":%d,\"in\":%d,\"rows\":%d,\"threads\":%d,\"sgemm_gflops\":%.1f,"
          "\"rowinv_gflops\":%.1f,\"matmul_gflops\":%.1f,\"rowinv_over_sgemm\":%.3f,\"matmul_over_sgemm\":%.3f,"
          "\"sgemm_gflops_per_cpu_s\":%.1f,\"rowinv_gflops_per_cpu_s\":%.1f,\"rowinv_over_sgemm_cpu\":%.3f,"
          "\"load1\":%.2f}\n",
          s.name, s.out, s.in, n, kernels::Threads(), flop / ts.first * 1e-9, flop / tr.first * 1e-9,
          flop / tm.first * 1e-9, ts.first / tr.first, ts.first / tm.first, flop / ts.second * 1e-9, flop / tr.second * 1e-9,
          ts.second / tr.second, cedar::bench::Load1());
      std::fflush(stdout);
    }
  }
  return 0;
}
