// The typed-weight products at decode (one row of x), kernel by kernel (issue 20):
//
//   build/bench/bench_weights [--rows 8192] [--cols 4096] [--reps 20] [--threads 1,2] [--int8-activations 0|1]
//                             [--from-memory-mib N]
//   build/bench/bench_weights --v41-layer 20 [--threads 1,2]   (one V4.1-Flash layer's decode products: BenchV41Layer)
//
// For F32, BF16, INT8, FP8 and FP4 weights [rows, cols]: seconds per product, GB/s of the stored
// bytes (scales included) and the fraction of the probed read bandwidth. The weights sit on huge
// pages, as the engine's loader places them. One copy of a weight stays in the last-level cache
// where it fits (this project's AVX-512 VM reports 508 MB of L3: the default 8192 x 4096 matrix,
// 16-128 MB, never leaves it); --from-memory-mib N copies it to enough places to fill N MiB and
// each product reads the next copy, so with N above the cache every product streams from memory.
// Then the INT8 alternative the issue asks about: x quantised per row to INT8 (one scale per 32,
// symmetric) and the dot products in integers (AVX2 maddubs + madd, one FMA per block for the two
// scales), against dequantising the weights to F32 in registers (what MatmulW does); both timed on
// one thread, with their error against a float64 product of the same stored weights. One JSON
// object per result; nothing asserted.
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
#include "engine/weight_arena.h"
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
void I8I8MatVec(const int8_t* wq, const uint16_t* ws, const int8_t* xq, const uint16_t* xs, float* y, int64_t rows, int64_t cols) {  // bfloat16 scales
  const int64_t nb = cols / 32;
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t r = 0; r < rows; r += 4) {
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int64_t b = 0; b < nb; ++b) {
      const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + b * 32));
      for (int k2 = 0; k2 < 4; ++k2) {
        const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wq + (r + k2) * cols + b * 32));
        const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(wv, wv), _mm256_sign_epi8(xv, wv)), ones);
        acc[k2] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(cedar::kernels::Bf16ToFloat(ws[(r + k2) * nb + b]) * cedar::kernels::Bf16ToFloat(xs[b])), acc[k2]);
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

// Weights on huge pages, where the engine's loader puts them (engine/weight_arena.h): the floats
// a byte buffer takes in an arena (whole 64-byte lines), and a copy of it there (nullptr if empty).
size_t ArenaFloats(const std::vector<uint8_t>& b) { return (b.size() + 63) / 64 * 16; }
uint8_t* CopyToArena(cedar::WeightArena& arena, const std::vector<uint8_t>& b) {
  if (b.empty()) return nullptr;
  auto* d = reinterpret_cast<uint8_t*>(arena.Allocate(ArenaFloats(b)));
  std::memcpy(d, b.data(), b.size());
  return d;
}
Stored Make(const std::vector<float>& w, int64_t rows, int64_t cols, k::WeightType t) {
  return k::QuantizeWeight(w, rows, cols, t);
}


// --v41-layer N: one decode token's products of one DeepSeek-V4.1-Flash layer, N passes, at the
// released precisions (../shared/spec/v41-released-notes.md section 1.1: d 5120, q rank 1280,
// 64 heads x 512, 8 output groups x 1024, 1 shared + top-6 routed experts of inner dim 2304):
// the attention projections and the shared expert FP8 (32x32 E8M0 blocks), the six routed
// experts FP4 (E8M0 per 32). Grouped into MatmulMany calls as the engine groups them (wq_a with
// wkv; wq_b; the 8 wo_a groups; wo_b; every expert's w1 and w3; their w2). The compressor and
// indexer projections are left out (a few percent of the layer). Two layers of distinct weights
// alternate, ~550 MB on huge pages (as the engine loads weights; before session 27 on 4 KiB
// pages), just above a 508 MB L3, so a pass reads mostly from memory. Weights are random bytes
// (no NaN codes): the products' speed does not depend on the values. Each pass runs three ways,
// alternating: F32 activations; FP4's products on 8-bit ones (kernels::SetInt8Activations); FP8's
// and FP4's on BF16 ones (kernels::SetBf16Activations).
struct TypedMatrix {
  std::vector<uint8_t> data, scales;
  k::WeightView view;
};

TypedMatrix RandomTyped(k::WeightType t, int64_t rows, int64_t cols, std::mt19937_64& rng) {
  TypedMatrix m;
  const bool fp4 = t == k::WeightType::kFP4;
  m.data.resize(size_t(fp4 ? rows * cols / 2 : rows * cols));
  m.scales.resize(size_t(fp4 ? rows * (cols / 32) : ((rows + 31) / 32) * ((cols + 31) / 32)));
  for (uint8_t& b : m.data) {
    b = uint8_t(rng());
    if (!fp4 && (b & 0x7F) == 0x7F) b ^= 1;  // E4M3's NaN codes
  }
  for (uint8_t& s : m.scales) s = uint8_t(118 + rng() % 6);
  m.view = k::WeightView{t, m.data.data(), m.scales.data(), rows, cols, 0};
  return m;
}

void BenchV41Layer(int passes, const std::vector<int>& threads) {
  using WT = k::WeightType;
  constexpr int64_t d = 5120, q_rank = 1280, heads = 64, c = 512, groups = 8, group_rank = 1024, inter = 2304, routed = 6;
  struct Layer {
    std::vector<TypedMatrix> attn;                     // wq_a, wkv, wq_b, wo_a x 8, wo_b
    std::vector<TypedMatrix> w13, w2;                  // shared first, then the routed experts
  };
  std::mt19937_64 rng(7);
  std::vector<Layer> layers(2);
  for (Layer& l : layers) {
    l.attn.push_back(RandomTyped(WT::kFP8, q_rank, d, rng));
    l.attn.push_back(RandomTyped(WT::kFP8, c, d, rng));
    l.attn.push_back(RandomTyped(WT::kFP8, heads * c, q_rank, rng));
    for (int g = 0; g < groups; ++g) l.attn.push_back(RandomTyped(WT::kFP8, group_rank, heads / groups * c, rng));
    l.attn.push_back(RandomTyped(WT::kFP8, d, groups * group_rank, rng));
    for (int e = 0; e <= routed; ++e) {
      const WT t = e == 0 ? WT::kFP8 : WT::kFP4;
      l.w13.push_back(RandomTyped(t, inter, d, rng));
      l.w13.push_back(RandomTyped(t, inter, d, rng));
      l.w2.push_back(RandomTyped(t, d, inter, rng));
    }
  }
  // Every matrix's bytes and scales moved onto huge pages.
  size_t floats = 0;
  auto each = [&](auto&& f) {
    for (Layer& l : layers)
      for (auto* v : {&l.attn, &l.w13, &l.w2})
        for (TypedMatrix& m : *v) f(m);
  };
  each([&](TypedMatrix& m) { floats += ArenaFloats(m.data) + ArenaFloats(m.scales); });
  cedar::WeightArena arena(floats * sizeof(float) + 64);
  each([&](TypedMatrix& m) {
    m.view.data = CopyToArena(arena, m.data), m.view.scales = CopyToArena(arena, m.scales);
    std::vector<uint8_t>().swap(m.data);
    std::vector<uint8_t>().swap(m.scales);
  });
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(size_t(heads * c)), y(size_t(heads * c * 2));
  for (float& v : x) v = nd(rng);
  double dense_bytes = 0, expert_bytes = 0;
  auto bytes = [](const TypedMatrix& m) { return double(m.view.rows) * k::WeightRowBytes(m.view.type, m.view.cols); };
  for (const TypedMatrix& m : layers[0].attn) dense_bytes += bytes(m);
  for (const auto* v : {&layers[0].w13, &layers[0].w2})
    for (const TypedMatrix& m : *v) (m.view.type == WT::kFP4 ? expert_bytes : dense_bytes) += bytes(m);
  // One layer's products: seconds in the attention projections and in the experts.
  auto run = [&](const Layer& l, double* attn_s, double* expert_s) {
    const double t0 = Now();
    std::vector<k::MatmulJob> jobs;
    auto call = [&](std::initializer_list<const TypedMatrix*> ms) {
      jobs.clear();
      float* out = y.data();
      for (const TypedMatrix* m : ms) {
        jobs.push_back(k::JobW(x.data(), m->view, out, 1));
        out += m->view.rows;
      }
      k::MatmulMany(jobs.data(), int(jobs.size()));
    };
    call({&l.attn[0], &l.attn[1]});
    call({&l.attn[2]});
    call({&l.attn[3], &l.attn[4], &l.attn[5], &l.attn[6], &l.attn[7], &l.attn[8], &l.attn[9], &l.attn[10]});
    call({&l.attn[11]});
    const double t1 = Now();
    jobs.clear();
    for (size_t i = 0; i < l.w13.size(); ++i) jobs.push_back(k::JobW(x.data(), l.w13[i].view, y.data() + i * inter, 1));
    k::MatmulMany(jobs.data(), int(jobs.size()));
    jobs.clear();
    for (size_t i = 0; i < l.w2.size(); ++i) jobs.push_back(k::JobW(x.data(), l.w2[i].view, y.data() + i * d, 1));
    k::MatmulMany(jobs.data(), int(jobs.size()));
    *attn_s += t1 - t0;
    *expert_s += Now() - t1;
  };
  const double bw = k::MeasureReadBandwidthGBs(1024, 5);
  for (int th : threads) {
    k::SetPoolThreads(th);
    // Activation modes: 0 F32, 1 FP4 on 8-bit activations, 2 FP8 and FP4 on BF16 ones.
    std::vector<double> total[3], attn[3], expert[3];
    for (int p = -1; p < passes; ++p)  // pass -1: warm-up
      for (int mode = 0; mode < 3; ++mode) {
        k::SetInt8Activations(mode == 1);
        k::SetBf16Activations(mode == 2);
        double as = 0, es = 0;
        for (const Layer& l : layers) run(l, &as, &es);
        k::SetInt8Activations(false);
        k::SetBf16Activations(false);
        if (p < 0) continue;
        attn[mode].push_back(as / 2);
        expert[mode].push_back(es / 2);
        total[mode].push_back((as + es) / 2);
      }
    auto med = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return v[v.size() / 2];
    };
    for (int mode = 0; mode < 3; ++mode) {
      const double t = med(total[mode]), ts = med(attn[mode]), te = med(expert[mode]);
      std::printf("%s\n", nlohmann::json{{"bench", "v41_flash_layer_decode_products"}, {"threads", th}, {"fp4_int8_activations", mode == 1},
                                         {"bf16_activations", mode == 2},
                                         {"passes", passes}, {"dense_fp8_bytes", dense_bytes}, {"expert_fp4_bytes", expert_bytes},
                                         {"seconds_median", t}, {"gbs", (dense_bytes + expert_bytes) / t / 1e9},
                                         {"fraction_of_read_bandwidth", (dense_bytes + expert_bytes) / t / 1e9 / bw},
                                         {"attention_seconds_median", ts}, {"experts_seconds_median", te},
                                         {"experts_gbs", expert_bytes / te / 1e9}, {"read_gbs", bw}, {"load1", Load1()}}
                                  .dump().c_str());
    }
  }
}
}  // namespace

int main(int argc, char** argv) {
  int64_t rows = 8192, cols = 4096;
  int reps = 20;
  int int8_acts_flag = 1;  // --int8-activations 0 skips the INT8-activation comparison (slow to set up)
  int v41_layer = 0;       // --v41-layer N: only the V4.1-Flash layer pass, N times
  int from_memory_mib = 0; // --from-memory-mib N: copies of each weight filling N MiB, read in turn (0: one copy)
  std::vector<int> threads = {1, 2};
  auto desc = cedar::bench::Options("bench_weights: typed-weight products at decode, kernel by kernel, as JSON lines");
  desc.add_options()("rows", cedar::cli::IntOption<int64_t>("--rows", &rows, 4, int64_t(1) << 20),
                     "weight rows (rounded down to a multiple of 4)")(
      "cols", cedar::cli::IntOption<int64_t>("--cols", &cols, 32, int64_t(1) << 20),
      "weight columns (rounded down to a multiple of 32)")(
      "reps", cedar::cli::IntOption("--reps", &reps, 1, 1 << 20), "products timed per figure")(
      "int8-activations", cedar::cli::IntOption("--int8-activations", &int8_acts_flag, 0, 1),
      "1: also time the INT8-activation comparison (slow to set up); 0 skips it")(
      "threads", cedar::bench::IntListOption("--threads", &threads, 1, 4096), "pool sizes to run (comma-separated)")(
      "from-memory-mib", cedar::cli::IntOption("--from-memory-mib", &from_memory_mib, 0, 1 << 20),
      "N > 0: copy each weight to enough places to fill N MiB and read them in turn (N above the last-level cache: every product from memory); 0: one copy")(
      "v41-layer", cedar::cli::IntOption("--v41-layer", &v41_layer, 0, 1 << 20),
      "N > 0: instead, N passes of one DeepSeek-V4.1-Flash layer's decode products at the released precisions (FP8 dense, FP4 experts), on F32 activations, with FP4 on 8-bit ones, and with FP8 and FP4 on BF16 ones");
  if (const int rc = cedar::bench::ParseFlags("bench_weights", desc, argc, argv); rc >= 0) return rc;
  if (v41_layer > 0) {
    BenchV41Layer(v41_layer, threads);
    return 0;
  }
  cols = cols / 32 * 32;
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
    // int8-a8 / fp4-a8: INT8 / FP4 weights with kernels::SetInt8Activations (8-bit activations);
    // int8-bf16a / fp8-bf16a / fp4-bf16a: INT8 / FP8 / FP4 with kernels::SetBf16Activations (BF16 activations).
    enum Acts { kF32Acts, kA8, kBf16A };
    const std::pair<k::WeightType, Acts> kinds[] = {{k::WeightType::kF32, kF32Acts}, {k::WeightType::kBF16, kF32Acts}, {k::WeightType::kI8, kF32Acts},
                                                    {k::WeightType::kI8, kA8},        {k::WeightType::kI8, kBf16A},    {k::WeightType::kFP8, kF32Acts}, {k::WeightType::kFP8, kBf16A},
                                                    {k::WeightType::kFP4, kF32Acts},  {k::WeightType::kFP4, kA8},      {k::WeightType::kFP4, kBf16A}};
    for (const auto& [t, acts] : kinds) {
      const std::string name = std::string(k::WeightTypeName(t)) + (acts == kA8 ? "-a8" : acts == kBf16A ? "-bf16a" : "");
      // A mode without its kernel in this build (or on this CPU) would time the scalar reference
      // loop, which the CLI flags refuse to run (they warn and keep F32 activations): say so instead.
      if ((acts == kA8 && !k::Int8ActivationsVectorised()) || (acts == kBf16A && !k::Bf16ActivationsVectorised())) {
        std::printf("%s\n", nlohmann::json{{"bench", "matvec"}, {"weights", name},
                                           {"threads", th}, {"skipped", "no kernel for these activations in this build on this CPU"}}
                                .dump().c_str());
        continue;
      }
      k::SetInt8Activations(acts == kA8);
      k::SetBf16Activations(acts == kBf16A);
      Stored s = Make(w, rows, cols, t);
      const double bytes = double(rows) * k::WeightRowBytes(t, cols);
      // The bytes and scales on huge pages: out of the vectors' 4 KiB pages FP8 with BF16
      // activations read 17-20 GB/s on one thread where it reads 37-38 here (session 27, both
      // from the L3).
      const size_t copies = std::max<size_t>(1, size_t((double(from_memory_mib) * (1 << 20) + bytes - 1) / bytes));
      cedar::WeightArena arena(copies * (ArenaFloats(s.data) + ArenaFloats(s.scales)) * sizeof(float) + 64);
      std::vector<k::WeightView> views(copies, s.view);
      for (k::WeightView& v : views) {
        v.data = CopyToArena(arena, s.data);
        if (!s.scales.empty()) v.scales = CopyToArena(arena, s.scales);
      }
      k::MatmulW(x.data(), views[0], y.data(), 1);  // warm-up
      std::vector<double> secs, cpu;
      for (int r = 0; r < reps; ++r) {
        const double t0 = Now(), c0 = CpuNow();
        k::MatmulW(x.data(), views[size_t(r + 1) % copies], y.data(), 1);
        secs.push_back(Now() - t0);
        cpu.push_back(CpuNow() - c0);
      }
      std::sort(secs.begin(), secs.end());
      std::sort(cpu.begin(), cpu.end());
      const double med = secs[secs.size() / 2];
      k::SetInt8Activations(false);
      k::SetBf16Activations(false);
      std::printf("%s\n", nlohmann::json{{"bench", "matvec"}, {"weights", name}, {"threads", th}, {"rows", rows},
                                         {"cols", cols}, {"bytes", bytes}, {"copies", copies}, {"seconds_min", secs.front()}, {"seconds_median", med},
                                         {"gbs_median", bytes / med / 1e9}, {"fraction_of_read_bandwidth", bytes / med / 1e9 / bw},
                                         {"cpu_seconds_median", cpu[cpu.size() / 2]},
                                         {"gbs_per_cpu_thread", bytes / (cpu[cpu.size() / 2] / th) / 1e9}, {"load1", Load1()}}
                                  .dump().c_str());
    }
  }
#if defined(__AVX2__)
  // INT8 weights: activations F32 (dequantise in registers) vs activations INT8 (maddubs).
  if (int8_acts_flag == 0) return 0;
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
  std::vector<uint16_t> xs(static_cast<size_t>(nb));
  std::vector<float> y2(static_cast<size_t>(rows));
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
    I8I8MatVec(reinterpret_cast<const int8_t*>(s.data.data()), reinterpret_cast<const uint16_t*>(s.scales.data()), xq.data(), xs.data(),
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
  // (At most the matrix's rows: y and y2 hold `rows` outputs.)
  const int64_t small_rows = std::min(rows, std::max<int64_t>(4, (int64_t(1) << 20) / cols / 4 * 4));
  k::WeightView sv = s.view;
  sv.rows = small_rows;
  const double c_deq = time([&] { for (int i = 0; i < 50; ++i) k::MatmulW(x.data(), sv, y.data(), 1); });
  const double c_i8 = time([&] {
    for (int i = 0; i < 50; ++i) {
      k::QuantizeI8(x.data(), 1, cols, xq.data(), xs.data());
      I8I8MatVec(reinterpret_cast<const int8_t*>(s.data.data()), reinterpret_cast<const uint16_t*>(s.scales.data()), xq.data(), xs.data(),
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
