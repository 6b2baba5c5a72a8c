// Small helpers shared by the benchmarks (bench_scheduler, bench_trace_replay, bench_decode_ab,
// bench_gemm): milliseconds between two clock readings, a nearest-rank percentile and the load
// average, so they report them the same way.
#pragma once
#include <algorithm>
#include <chrono>
#include <cstdlib>
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

// The 1-minute load average, -1 when unavailable: on a shared machine figures move with load.
inline double Load1() {
  double l[1] = {-1};
  return getloadavg(l, 1) == 1 ? l[0] : -1.0;
}

// x / y, or -1 when y is not positive (a ratio that cannot be formed).
inline double Ratio(double x, double y) { return y > 0 ? x / y : -1.0; }

}  // namespace cedar::bench
