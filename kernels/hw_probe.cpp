#include "kernels/hw_probe.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "kernels/ops.h"
#include "kernels/thread_pool.h"

namespace cedar::kernels {

namespace {
double Seconds(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}
}  // namespace

double MeasureSgemmGflops(int n, int k, int m, int reps) {
  std::vector<float> x(size_t(n) * k, 0.5f), w(size_t(m) * k, 0.25f), y(size_t(n) * m);
  Matmul(x.data(), w.data(), y.data(), n, k, m);  // warm-up
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    Matmul(x.data(), w.data(), y.data(), n, k, m);
    best = std::min(best, Seconds(t0, std::chrono::steady_clock::now()));
  }
  return 2.0 * n * k * m / best / 1e9;
}

double MeasureReadBandwidthGBs(int mbytes, int reps) {
  const size_t n = size_t(mbytes) * 1024 * 1024 / sizeof(float);
  std::vector<float> buf(n, 1.0f);
  double best = 1e30;
  volatile float sink = 0;
  std::vector<float> partial(size_t(Threads()) * 16);
  for (int r = 0; r < reps; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    // Every pool thread streams its slice, as the decode's weight reads do.
    ParallelFor(int64_t(n), 1 << 20, [&](int64_t b, int64_t e) {
      float total = 0;
#pragma omp simd reduction(+ : total)
      for (int64_t i = b; i < e; ++i) total += buf[size_t(i)];
      partial[size_t(b * Threads() / int64_t(n)) * 16] = total;
    });
    best = std::min(best, Seconds(t0, std::chrono::steady_clock::now()));
    for (float p : partial) sink = sink + p;
  }
  return double(n * sizeof(float)) / best / 1e9;
}

}  // namespace cedar::kernels
