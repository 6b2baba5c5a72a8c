// Small helpers shared by the scheduler benchmarks (bench_scheduler, bench_trace_replay):
// milliseconds between two clock readings and a nearest-rank percentile, so both report
// their latencies the same way.
#pragma once
#include <algorithm>
#include <chrono>
#include <vector>

namespace cedar::bench {

using Clock = std::chrono::steady_clock;

inline double Ms(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// The p-th percentile (p in [0, 100]) of v, nearest rank (p 100 = the max); -1 when v is empty.
inline double Pct(std::vector<double> v, double p) {
  if (v.empty()) return -1;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, size_t(p / 100.0 * double(v.size() - 1) + 0.5));
  return v[i];
}

// x / y, or -1 when y is not positive (a ratio that cannot be formed).
inline double Ratio(double x, double y) { return y > 0 ? x / y : -1.0; }

}  // namespace cedar::bench
