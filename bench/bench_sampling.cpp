// Sampler::Sample against the full stable sort it replaced (Sampler::SampleFullSort), per token (CPU
// ms of this thread) on the released vocabulary (129,280 logits): random logits (every id has p > 0, the radix-sort
// path) and a grammar-style mask (a dozen allowed ids). One JSON object per case; no assertion.
//   bench_sampling [--draws N]
#include <cstdio>
#include <ctime>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_flags.h"
#include "engine/sampling.h"

using namespace cedar;

// This thread's CPU seconds: on a shared machine wall time also counts other processes' turns.
static double CpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

int main(int argc, char** argv) {
  int draws = 200;
  auto desc = bench::Options("bench_sampling: Sampler::Sample against the full sort, CPU ms per token, as JSON lines");
  desc.add_options()("draws", cli::IntOption("--draws", &draws, 1, 1 << 30), "tokens sampled per case");
  if (const int rc = bench::ParseFlags("bench_sampling", desc, argc, argv); rc >= 0) return rc;
  const size_t n = 129280;
  std::mt19937_64 rng(1);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> random(n), masked(n, -std::numeric_limits<float>::infinity());
  for (float& x : random) x = normal(rng);
  for (int k = 0; k < 12; ++k) masked[rng() % n] = normal(rng);
  for (const auto& [name, logits] : {std::pair{"random", &random}, std::pair{"masked", &masked}}) {
    double ms[2];
    int64_t checksum[2] = {0, 0};
    for (int path = 0; path < 2; ++path) {
      Sampler s({0.8f, 0.95f, 7});
      const double t0 = CpuSeconds();
      for (int d = 0; d < draws; ++d) checksum[path] += path ? s.SampleFullSort(*logits) : s.Sample(*logits);
      ms[path] = 1e3 * (CpuSeconds() - t0) / draws;
    }
    std::printf("{\"bench\":\"sampling\",\"logits\":\"%s\",\"vocab\":%zu,\"draws\":%d,\"sample_ms\":%.3f,"
                "\"full_sort_ms\":%.3f,\"speedup\":%.1f,\"same_tokens\":%s}\n",
                name, n, draws, ms[0], ms[1], ms[1] / ms[0], checksum[0] == checksum[1] ? "true" : "false");
  }
}
