// The typed-weight products at decode (one row of x), kernel by kernel (issue 20):
//
//   build/bench/bench_weights [--rows 8192] [--cols 4096] [--reps 20] [--threads 1,2] [--int8-activations 0|1]
//
// For F32, BF16, INT8, FP8 and FP4 weights [rows, cols] (64+ MB as F32, so each pass streams
// from memory): seconds per product, GB/s of the stored bytes (scales included) and the
// fraction of the probed read bandwidth. Then the INT8 alternative the issue asks about: x
// quantised per row to INT8 (one scale per 32, symmetric) and the dot products in integers
// (AVX2 maddubs + madd, one FMA per block for the two scales), against dequantising the weights to
// F32 in registers (what MatmulW does); both timed on one thread, with their error against a
// float64 product of the same stored weights. One JSON object per result; nothing asserted.
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <cstdio>
#include <ctime>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/bench_flags.h"
#include "kernels/weight_quantize.h"
#include "kernels/hw_probe.h"
#include "kernels/ops.h"
#include "kernels/quant_formats.h"
#include "kernels/thread_pool.h"
#include "kernels/weight_view.h"

namespace k = cedar::kernels;

namespace {

double Now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
// CPU seconds of this process (all threads): on a shared machine, wall time includes the time the
// scheduler gave to others; CPU time does not (memory contention from others still counts).
double CpuNow() {
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

#if defined(__AVX2__)
// y[r] = sum_b (wq[r, b] . xq[b]) * ws[r, b] * xs[b] with INT8 x: abs(w) (unsigned) times
// sign(x, w) (signed) in maddubs, pairs to int32 with madd, then one FMA per block.
void I8I8MatVec(const int8_t* wq, const float* ws, const int8_t* xq, const float* xs, float* y, int64_t rows, int64_t cols) {
  const int64_t nb = cols / 32;
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t r = 0; r < rows; r += 4) {
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int64_t b = 0; b < nb; ++b) {
      const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + b * 32));
      for (int k2 = 0; k2 < 4; ++k2) {
        const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wq + (r + k2) * cols + b * 32));
        const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(wv, wv), _mm256_sign_epi8(xv, wv)), ones);
        acc[k2] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(ws[(r + k2) * nb + b] * xs[b]), acc[k2]);
      }
    }
    for (int k2 = 0; k2 < 4; ++k2) {
      alignas(32) float t[8];
      _mm256_store_ps(t, acc[k2]);
      y[r + k2] = ((t[0] + t[4]) + (t[2] + t[6])) + ((t[1] + t[5]) + (t[3] + t[7]));
    }
  }
}
#endif

double Load1() {
  double l = -1;
  if (FILE* f = std::fopen("/proc/loadavg", "r")) {
    if (std::fscanf(f, "%lf", &l) != 1) l = -1;
    std::fclose(f);
  }
  return l;
}

using Stored = k::OwnedWeight;
Stored Make(const std::vector<float>& w, int64_t rows, int64_t cols, k::WeightType t) {
  return k::QuantizeWeight(w, rows, cols, t);
}

}  // namespace

int main(int argc, char** argv) {
  int64_t rows = 8192, cols = 4096;
  int reps = 20;
  int int8_acts_flag = 1;  // --int8-activations 0 skips the INT8-activation comparison (slow to set up)
  std::vector<int> threads = {1, 2};
  auto desc = cedar::bench::Options("bench_weights: typed-weight products at decode, kernel by kernel, as JSON lines");
  desc.add_options()("rows", cedar::cli::IntOption<int64_t>("--rows", &rows, 4, int64_t(1) << 20),
                     "weight rows (rounded down to a multiple of 4)")(
      "cols", cedar::cli::IntOption<int64_t>("--cols", &cols, 32, int64_t(1) << 20),
      "weight columns (rounded down to a multiple of 32)")(
      "reps", cedar::cli::IntOption("--reps", &reps, 1, 1 << 20), "products timed per figure")(
      "int8-activations", cedar::cli::IntOption("--int8-activations", &int8_acts_flag, 0, 1),
      "1: also time the INT8-activation comparison (slow to set up); 0 skips it")(
      "threads", cedar::bench::IntListOption("--threads", &threads, 1, 4096), "pool sizes to run (comma-separated)");
  if (const int rc = cedar::bench::ParseFlags("bench_weights", desc, argc, argv); rc >= 0) return rc;
  cols = cols / 32 * 32;
  const bool int8_acts = int8_acts_flag != 0;
  rows = rows / 4 * 4;
  std::mt19937_64 rng(1);
  std::normal_distribution<float> nd(0.0f, 0.02f);
  std::vector<float> w(static_cast<size_t>(rows * cols)), x(static_cast<size_t>(cols)), y(static_cast<size_t>(rows));
  for (float& v : w) v = nd(rng);
  for (float& v : x) v = nd(rng) * 50;
  const double bw = k::MeasureReadBandwidthGBs(1024, 5);
  std::printf("%s\n", nlohmann::json{{"bench", "bandwidth"}, {"read_gbs", bw}}.dump().c_str());
  for (int th : threads) {
    k::SetPoolThreads(th);
    // int8-a8: INT8 weights with kernels::SetInt8Activations (8-bit activations, VNNI).
    const std::pair<k::WeightType, bool> kinds[] = {{k::WeightType::kF32, false}, {k::WeightType::kBF16, false}, {k::WeightType::kI8, false},
                                                    {k::WeightType::kI8, true},   {k::WeightType::kFP8, false}, {k::WeightType::kFP4, false}};
    for (const auto& [t, a8] : kinds) {
      k::SetInt8Activations(a8);
      Stored s = Make(w, rows, cols, t);
      const double bytes = double(rows) * k::WeightRowBytes(t, cols);
      k::MatmulW(x.data(), s.view, y.data(), 1);  // warm-up
      std::vector<double> secs, cpu;
      for (int r = 0; r < reps; ++r) {
        const double t0 = Now(), c0 = CpuNow();
        k::MatmulW(x.data(), s.view, y.data(), 1);
        secs.push_back(Now() - t0);
        cpu.push_back(CpuNow() - c0);
      }
      std::sort(secs.begin(), secs.end());
      std::sort(cpu.begin(), cpu.end());
      const double med = secs[secs.size() / 2];
      k::SetInt8Activations(false);
      std::printf("%s\n", nlohmann::json{{"bench", "matvec"}, {"weights", a8 ? "int8-a8" : k::WeightTypeName(t)}, {"threads", th}, {"rows", rows},
                                         {"cols", cols}, {"bytes", bytes}, {"seconds_min", secs.front()}, {"seconds_median", med},
                                         {"gbs_median", bytes / med / 1e9}, {"fraction_of_read_bandwidth", bytes / med / 1e9 / bw},
                                         {"cpu_seconds_median", cpu[cpu.size() / 2]},
                                         {"gbs_per_cpu_thread", bytes / (cpu[cpu.size() / 2] / th) / 1e9}, {"load1", Load1()}}
                                  .dump().c_str());
    }
  }
#if defined(__AVX2__)
  // INT8 weights: activations F32 (dequantise in registers) vs activations INT8 (maddubs).
  if (!int8_acts) return 0;
  k::SetPoolThreads(1);
  Stored s = Make(w, rows, cols, k::WeightType::kI8);
  const int64_t nb = cols / 32;
  std::vector<double> exact(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    double a = 0;
    for (int64_t c = 0; c < cols; ++c) a += double(x[size_t(c)]) * k::WeightAt(s.view, r, c);
    exact[size_t(r)] = a;
  }
  double ref_scale = 0;
  for (double e : exact) ref_scale = std::max(ref_scale, std::fabs(e));
  auto err = [&](const std::vector<float>& got) {
    double m = 0;
    for (int64_t r = 0; r < rows; ++r) m = std::max(m, std::fabs(got[size_t(r)] - exact[size_t(r)]));
    return m / ref_scale;
  };
  std::vector<int8_t> xq(static_cast<size_t>(cols));
  std::vector<float> xs(static_cast<size_t>(nb)), y2(static_cast<size_t>(rows));
  auto time = [&](auto&& fn) {
    fn();
    std::vector<double> secs;
    for (int r = 0; r < reps; ++r) {
      const double t0 = Now();
      fn();
      secs.push_back(Now() - t0);
    }
    std::sort(secs.begin(), secs.end());
    return secs[secs.size() / 2];
  };
  const double t_deq = time([&] { k::MatmulW(x.data(), s.view, y.data(), 1); });
  const double t_i8 = time([&] {
    k::QuantizeI8(x.data(), 1, cols, xq.data(), xs.data());  // per call: part of the cost
    I8I8MatVec(reinterpret_cast<const int8_t*>(s.data.data()), reinterpret_cast<const float*>(s.scales.data()), xq.data(), xs.data(),
               y2.data(), rows, cols);
  });
  const double bytes = double(rows) * k::WeightRowBytes(k::WeightType::kI8, cols);
  std::printf("%s\n", nlohmann::json{{"bench", "int8_activations"}, {"threads", 1}, {"rows", rows}, {"cols", cols},
                                     {"dequant_weights_seconds", t_deq}, {"dequant_weights_gbs", bytes / t_deq / 1e9},
                                     {"dequant_weights_max_rel_error", err(y)},
                                     {"int8_activations_seconds", t_i8}, {"int8_activations_gbs", bytes / t_i8 / 1e9},
                                     {"int8_activations_max_rel_error", err(y2)}}
                          .dump().c_str());
  // The same from cache (a 1 MiB matrix, repeated): the compute rate of each, without memory's cap.
  const int64_t small_rows = std::max<int64_t>(4, (int64_t(1) << 20) / cols / 4 * 4);
  k::WeightView sv = s.view;
  sv.rows = small_rows;
  const double c_deq = time([&] { for (int i = 0; i < 50; ++i) k::MatmulW(x.data(), sv, y.data(), 1); });
  const double c_i8 = time([&] {
    for (int i = 0; i < 50; ++i) {
      k::QuantizeI8(x.data(), 1, cols, xq.data(), xs.data());
      I8I8MatVec(reinterpret_cast<const int8_t*>(s.data.data()), reinterpret_cast<const float*>(s.scales.data()), xq.data(), xs.data(),
                 y2.data(), small_rows, cols);
    }
  });
  const double cb = 50.0 * double(small_rows) * k::WeightRowBytes(k::WeightType::kI8, cols);
  std::printf("%s\n", nlohmann::json{{"bench", "int8_activations_in_cache"}, {"threads", 1}, {"rows", small_rows}, {"cols", cols},
                                     {"dequant_weights_gbs", cb / c_deq / 1e9}, {"int8_activations_gbs", cb / c_i8 / 1e9}}
                          .dump().c_str());
#endif
  return 0;
}
