#include "engine/benchmark.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <stdlib.h>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "engine/spec_bench.h"

#include "engine/activation_modes.h"
#include "engine/backend.h"
#include "engine/engine.h"
#include "engine/expert_cache.h"
#include "engine/flag_values.h"
#include "engine/info.h"
#include "engine/init.h"
#include "engine/v41_info.h"
#include "engine/v41_load.h"
#include "kernels/hw_probe.h"
#include "kernels/ops.h"
#include "kernels/work_counters.h"
#ifdef CEDAR_HAVE_CUDA
#include "kernels/cuda/probe.h"
#endif

namespace cedar {

namespace {

double Since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The CPU kernels' work counters over one timed run, as three views of it: the projections'
// FLOPs over the whole time (`fraction_of_sgemm` above, from the parameter count), the rate
// the projections ran at while they ran, and every FLOP the model needs (projections + sparse
// attention + indexer) over the whole time.
void AddCpuWorkFigures(double sgemm, double seconds, nlohmann::json* j) {
  const kernels::WorkCounters w = kernels::ReadWorkCounters();
  const double model_flops = w.matmul_flops + w.attention_flops + w.index_flops;
  (*j)["matmul_seconds"] = w.matmul_seconds;
  (*j)["matmul_gflops_while_running"] = w.matmul_flops / w.matmul_seconds / 1e9;
  (*j)["matmul_fraction_of_sgemm_while_running"] = w.matmul_flops / w.matmul_seconds / 1e9 / sgemm;
  (*j)["attention_gflop"] = w.attention_flops / 1e9;
  (*j)["indexer_gflop"] = w.index_flops / 1e9;
  (*j)["model_gflops"] = model_flops / seconds / 1e9;
  (*j)["model_fraction_of_sgemm"] = model_flops / seconds / 1e9 / sgemm;
  // Where the rest of the time went: the attention (AttendRows, all heads and rows of a layer)
  // and everything that is neither (norms, RoPE, SwiGLU, routing, copies, the pool's hand-offs).
  (*j)["attention_seconds"] = w.attention_seconds;
  (*j)["other_seconds"] = seconds - w.matmul_seconds - w.attention_seconds;
}

// The 1-minute load average (-1 when unavailable): on a shared machine figures move 2-5x with
// load, so every line carries it.
double LoadAverage1() {
  double l[3] = {-1, -1, -1};
  return getloadavg(l, 3) >= 1 ? l[0] : -1.0;
}

void Emit(nlohmann::json j) {
  j["load1"] = LoadAverage1();
  std::printf("%s\n", j.dump().c_str());
  std::fflush(stdout);
}

// min / median / max of a figure over the timed reps.
struct Spread {
  double min = 0, median = 0, max = 0;
};
Spread SpreadOf(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return {v.front(), n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]), v.back()};
}
// Adds name_min / name_median / name_max.
void AddSpread(const std::string& name, const Spread& s, nlohmann::json* j) {
  (*j)[name + "_min"] = s.min;
  (*j)[name + "_median"] = s.median;
  (*j)[name + "_max"] = s.max;
}

// Without --model: where the benchmark model lives, whether this run wrote it, and its size.
struct BenchModel {
  std::string dir;
  bool written = false;  // this run wrote it (else reused from an earlier --keep-model run)
  uintmax_t bytes = 0;
};
uintmax_t DirectoryBytes(const std::string& dir) {
  uintmax_t total = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir))
    if (e.is_regular_file()) total += e.file_size();
  return total;
}

// The CPU's reference rate: OpenBLAS sgemm on 512 rows of the model's widest dense shape
// (dim -> 4 dim), the best of 5 runs. The machine line and the prefill lines' paired probes.
struct SgemmShape {
  int rows, in, out;  // x [rows, in] times w [in, out]
};
SgemmShape SgemmProbeShape(const ModelConfig& c) { return {512, c.dim, 4 * c.dim}; }
double ProbeSgemm(const ModelConfig& c) {
  const SgemmShape s = SgemmProbeShape(c);
  return kernels::MeasureSgemmGflops(s.rows, s.in, s.out, 5);
}

// The machine line: the CPU's sgemm rate and read bandwidth, or the GPU's BF16 GEMM rate and
// copy bandwidth (both as "matmul GFLOP/s" and "bandwidth GB/s" for the fractions below).
// probe_mib: the CPU read probe's buffer, at least what one decode step streams (so the probe
// is never served from cache more than decode is).
void MeasureMachine(const Backend& b, const ModelConfig& c, int probe_mib, double* matmul_gflops, double* bw_gbs) {
  if (std::string(b.name()) == "cpu") {
    *matmul_gflops = ProbeSgemm(c);
    *bw_gbs = kernels::MeasureReadBandwidthGBs(probe_mib, 5);
    const SgemmShape s = SgemmProbeShape(c);
    Emit({{"bench", "machine"}, {"device", "cpu"}, {"kernels", kernels::KernelIsa()}, {"blas_core", kernels::BlasCore()}, {"sgemm_gflops", *matmul_gflops}, {"sgemm_shape", {s.rows, s.in, s.out}},
          {"read_bandwidth_gbs", *bw_gbs}, {"read_probe_mib", probe_mib}});
    return;
  }
#ifdef CEDAR_HAVE_CUDA
  namespace cu = kernels::cuda;
  double tf = 0;
  const cu::Status s1 = cu::MeasureMatmulTflops(8192, 10, &tf), s2 = cu::MeasureCopyBandwidthGBs(size_t(1) << 30, 10, bw_gbs);
  if (!s1.ok() || !s2.ok()) throw std::runtime_error("device probes failed: " + s1.ToString() + "; " + s2.ToString());
  *matmul_gflops = tf * 1e3;
  Emit({{"bench", "machine"}, {"device", b.Describe()}, {"matmul_bf16_tflops", tf}, {"matmul_shape", {8192, 8192, 8192}},
        {"copy_bandwidth_gbs", *bw_gbs}});
#endif
}

// --max-ram: bytes, or a number with a binary K, M or G suffix.
int64_t ParseMaxRam(const std::string& text) {
  int64_t unit = 1;
  std::string digits = text;
  if (!digits.empty() && std::string("KMG").find(char(std::toupper(digits.back()))) != std::string::npos) {
    unit = int64_t(1) << (10 * (1 + int(std::string("KMG").find(char(std::toupper(digits.back()))))));
    digits.pop_back();
  }
  return ParseIntFlag<int64_t>("--max-ram", digits, 0, (int64_t(1) << 50) / unit) * unit;
}

}  // namespace

int RunEngineBenchMain(int argc, char** argv) {
  std::string model_dir, preset = "small", lengths_s = "512,4096,16384", batches_s = "1,8";
  std::string device = "auto";
  bool f32_weights = false, keep_model = false, row_invariant = false;
  LoadOptions load;  // --mmap-weights
  int decode_n = 32, threads = 0, reps = 3, decode_context = 512, spec_tokens = 0;
  bool help = false;
  CheckFlags([&] {  // whatever the command line gets wrong is a UsageError (exit 2)
    for (int i = 1; i < argc && !help; ++i) {
      std::string a = argv[i];
      auto next = [&]() -> std::string {
        if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
        return argv[++i];
      };
      if (a == "--help" || a == "-h") {
        std::printf("usage: cedar bench [--model DIR | --preset small|medium [--keep-model]] [--lengths 512,4096,16384]\n"
                    "                   [--decode N|0] [--decode-batch 1,8] [--decode-context 512] [--reps 3] [--threads N] [--spec-tokens K]\n"
                    "                   [--device cpu|cuda|auto] [--f32-weights] [--mmap-weights] [--row-invariant-matmul]\n"
                    "                   [--weights f32|bf16|int8|as-stored|fp8-fp4] [--int8-activations] [--bf16-activations] [--max-ram BYTES[K|M|G]]\n"
                    "Prints one JSON object per result: the machine's matmul rate and bandwidth (the CPU's sgemm and read\n"
                    "bandwidth, or the GPU's BF16 GEMM and copy bandwidth), then prefill tokens/s per length in full and\n"
                    "bounded, then decode tokens/s, each with its fraction of the hardware. Every figure is timed --reps\n"
                    "times after one untimed warm-up pass and reported as min / median / max (the plain figure is the\n"
                    "median); every line carries the 1-minute load average (load1). A prefill line's fractions divide by\n"
                    "sgemm_gflops, the best of the machine line's OpenBLAS probe and the probes before and after each `full` rep;\n"
                    "a CPU `full` line adds fraction_of_sgemm_paired, each rep against the mean of the two probes beside it. Decode runs --decode-batch sequences\n"
                    "of --decode-context prompt tokens each (--decode 0 or --decode-batch '' : no decode lines). Without --model the preset's random model is written under\n"
                    "$TMPDIR (a \"model\" line says where and how big) and removed at the end unless --keep-model; one\n"
                    "found there (kept by an earlier run) is reused and left.\n"
                    "--device auto (the default) is cuda when this build has CUDA and a device exists;\n"
                    "--f32-weights keeps F32 weights on the GPU; --mmap-weights reads F32 weights in place from the file\n"
                    "instead of the huge-page copy; --row-invariant-matmul runs products above 16 rows on the row-invariant\n"
                    "GEMM instead of sgemm (the machine line's sgemm is measured before it is switched on).\n"
                    "--spec-tokens K (released layout with DSpark, --preset v41-tiny|v41-small or --model DIR): greedy decode\n"
                    "of --decode N tokens after 4 prompts, plain and speculative with K drafts per pass (CPU): one JSON line\n"
                    "with the acceptance rate and both decode rates; nothing else runs.\n"
                    "--weights holds the CPU's matmul weights at that precision (the decode bound counts its bytes);\n"
                    "--int8-activations runs INT8 and FP4 weights' decode products on 8-bit activations (kernels::SetInt8Activations).\n"
                    "--bf16-activations runs FP8, FP4 and INT8 weights' decode products on BF16 activations (kernels::SetBf16Activations; FP4 too with both flags, INT8 then keeps 8-bit ones).\n"
                    "A released-layout model (cedar init --arch v41) also prints its load (dequantise-once seconds, stored\n"
                    "and F32 bytes); with --max-ram below its expert bytes the experts are dequantised on demand, and the\n"
                    "prefill and decode lines give the share of time spent dequantising and the shard bytes read per token.\n");
        help = true;
      } else if (a == "--model") model_dir = next();
      else if (a == "--preset") preset = next();
      else if (a == "--lengths") lengths_s = next();
      else if (a == "--decode") decode_n = ParseIntFlag("--decode", next(), 0, 1 << 20);  // 0: prefill lines only
      else if (a == "--decode-context") decode_context = ParseIntFlag("--decode-context", next(), 1, 1 << 24);
      else if (a == "--reps") reps = ParseIntFlag("--reps", next(), 1, 1000);
      else if (a == "--keep-model") keep_model = true;
      else if (a == "--row-invariant-matmul") row_invariant = true;
      else if (a == "--int8-activations") EnableInt8Activations();
      else if (a == "--bf16-activations") EnableBf16Activations();
      else if (a == "--threads") threads = ParseIntFlag("--threads", next(), 0, 4096);
      else if (a == "--decode-batch") batches_s = next();
      else if (a == "--device") device = next();
      else if (a == "--f32-weights") f32_weights = true;
      else if (a == "--mmap-weights") load.mmap_weights = true;
      else if (a == "--spec-tokens") spec_tokens = ParseIntFlag("--spec-tokens", next(), 1, 15);
      else if (a == "--weights") load.weights = ParseWeightPrecision(next());
      else if (a == "--max-ram") load.max_ram_bytes = ParseMaxRam(next());
      else throw std::invalid_argument("unknown option " + a);
    }
  });
  if (help) return 0;
  if (spec_tokens > 0 && decode_n == 0) throw UsageError("--decode 0 with --spec-tokens: speculative decoding needs at least 1 token to decode");
  if (spec_tokens > 0) {
    kernels::SetThreads(threads);
    RunSpecBench(model_dir, preset, spec_tokens, decode_n, 4);
    return 0;
  }
  // Checked before anything runs.
  const std::vector<int> lengths = CheckFlags([&] { return ParseIntListFlag<int>("--lengths", lengths_s, 1, 1 << 24); });
  std::vector<int> batches = CheckFlags([&] { return ParseIntListFlag<int>("--decode-batch", batches_s, 1, 4096); });
  if (decode_n == 0) batches.clear();  // --decode 0: no decode lines, as --decode-batch ''
  if (keep_model && !model_dir.empty()) throw UsageError("--keep-model is for the preset's written model; --model DIR is never removed");
  kernels::SetThreads(threads);
  std::string why;
  if (CheckFlags([&] { return ResolveDevice(device); }) == "cuda" && !CudaAvailable(&why))  // before writing a model it cannot run
    throw std::runtime_error("--device cuda: " + why);
  ModelConfig preset_config;
  if (model_dir.empty() && !PresetConfig(preset, &preset_config)) throw UsageError("--preset: " + UnknownPresetMessage(preset));
  BenchModel written;  // set when the model is the preset's, under $TMPDIR
  if (model_dir.empty()) {
    const ModelConfig& c = preset_config;
    written.dir = (std::filesystem::temp_directory_path() / ("cedar-bench-" + preset)).string();
    written.written = !std::filesystem::exists(written.dir + "/model.safetensors");
    if (written.written) WriteRandomModel(c, 1, written.dir);
    written.bytes = DirectoryBytes(written.dir);
    model_dir = written.dir;
    Emit({{"bench", "model"}, {"preset", preset}, {"path", written.dir}, {"bytes", written.bytes},
          {"written_now", written.written}, {"removed_at_end", written.written && !keep_model}});
  }
  // A model this run wrote goes when this function returns (also on an exception), unless
  // --keep-model; one it found (an earlier --keep-model run's, maybe in use) stays.
  struct RemoveAtEnd {
    std::string dir;
    ~RemoveAtEnd() {
      std::error_code ec;
      if (!dir.empty()) std::filesystem::remove_all(dir, ec);
    }
  } remover{written.written && !keep_model ? written.dir : std::string()};
  auto m = Model::Load(model_dir, load);
  const ModelConfig& c = m->config();
  BackendOptions bo;
  bo.device = device;
  bo.f32_weights = f32_weights;
  const std::unique_ptr<Backend> be = MakeBackend(*m, bo);
  const bool on_gpu = std::string(be->name()) == "cuda";
  // A --model directory is named by its path (whatever it contains); the preset's model, written or
  // found under $TMPDIR, by the preset.
  const std::string model_name = written.dir.empty() ? model_dir : preset;
  const ModelInfo info = ComputeInfo(c);
  // The released layout: what loading cost (every weight held once in the arena at --weights, or
  // the dense part only when --max-ram puts the experts on demand).
  const ExpertCache* experts = m->expert_cache();
  if (const ReleasedLoadReport* lr = m->released_load()) {
    Emit({{"bench", "load"}, {"model", model_name}, {"tensors", lr->tensors}, {"stored_bytes", lr->stored_bytes},
          {"weights", WeightPrecisionName(m->weight_precision())},
          {"dense_held_bytes", lr->dense_bytes}, {"expert_held_bytes", lr->expert_bytes}, {"check_seconds", lr->check_seconds},
          {"dequant_seconds", lr->dequant_seconds}, {"total_seconds", lr->total_seconds},
          {"experts_on_demand", experts != nullptr}, {"max_ram_bytes", load.max_ram_bytes}});
  }
  // Experts dequantised on demand since `before`: the share of `seconds` spent on it, and the
  // shard bytes read per token.
  auto add_on_demand = [&](const ExpertCache::Stats& before, double seconds, double tokens, nlohmann::json* j) {
    if (!experts) return;
    const ExpertCache::Stats now = experts->stats();
    (*j)["expert_misses"] = now.misses - before.misses;
    (*j)["expert_dequant_seconds"] = now.dequant_seconds - before.dequant_seconds;
    (*j)["dequant_share_of_time"] = (now.dequant_seconds - before.dequant_seconds) / seconds;
    (*j)["shard_bytes_read_per_token"] = double(now.stored_bytes_read - before.stored_bytes_read) / tokens;
  };
  // Matmul parameters a row touches in one layer, averaged over layers (attention projections,
  // routed experts actually used, shared expert): the FLOPs below count 2 per parameter.
  const double layer_params = double(info.active_per_decode_token - info.head_params) / c.n_layers;
  // Bytes one decode step streams: on the GPU its upload type for every parameter; on the CPU the
  // precision held (--weights), routed experts at theirs and the other matmul weights at theirs
  // (fp8-fp4 holds experts in FP4 and the rest in FP8, so the whole model's average, which the
  // inactive experts dominate, undercounted a decode token's bytes by a fifth on medium), and
  // the other active parameters (router, mixes, norms) F32. Routed experts differ per row: for a
  // batch this is a lower bound. weight_bytes: the decode's matmul bytes per parameter (its FLOPs
  // count 2 per parameter, which the work counters turn into bytes below).
  const double other_bytes = on_gpu ? (f32_weights ? 4.0 : 2.0) : 4.0;
  double bytes_per_step = on_gpu ? double(info.active_per_decode_token) * other_bytes
                                  : DecodeWeightBytesHeld(info, c, m->dense_matmul_bytes_per_param(), m->routed_expert_bytes_per_param());
  // A released checkpoint on the CPU: its tensors as held, from its config (engine/v41_info.h
  // V41Held, which v41_held_bytes_test checks against the loader to the byte). The estimate above
  // has no Engram and prices the routers, held BF16 there, at F32.
  if (!on_gpu && m->released_load())
    bytes_per_step = double(ComputeV41Held(LoadV41ConfigFile(ReleasedConfigPath(m->dir())), m->weight_precision()).decode_token_bytes);
  const double weight_bytes = (bytes_per_step - double(info.active_per_decode_token - info.matmul_active_per_decode_token) * other_bytes) /
                              double(std::max<int64_t>(info.matmul_active_per_decode_token, 1));
  const int probe_mib = std::max(1024, int(bytes_per_step / (1 << 20)) + 1);

  double sgemm = 0, bw = 0;  // on a GPU: its BF16 GEMM rate and copy bandwidth
  kernels::EnableWorkCounters(true);
  MeasureMachine(*be, c, probe_mib, &sgemm, &bw);
  kernels::SetRowInvariantMatmul(row_invariant);  // after the sgemm probe, which runs Matmul

  std::mt19937_64 rng(1);
  auto random_tokens = [&](int n) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (auto& x : t) x = int32_t(rng() % uint64_t(c.vocab_size));
    return t;
  };
  {
    // Warm-up, untimed: a short prefill and a few decode steps fault the weights in and ramp the
    // clocks (the first products of a process ran up to 35% slower here).
    auto st = be->NewSequence();
    PrefillOptions opt;
    opt.mode = PrefillMode::kFull;
    be->Prefill(*st, random_tokens(std::min(512, lengths.empty() ? 512 : lengths.front())), opt);
    std::vector<Sequence*> one{st.get()};
    for (int i = 0; i < 4; ++i) be->DecodeBatch(one, std::vector<int32_t>{1});
  }
  double sgemm_after = 0;  // the probe after the last `full` reps
  for (int n : lengths) {
    const std::vector<int32_t> t = random_tokens(n);
    double full_tps = 0;
    for (PrefillMode mode : {PrefillMode::kFull, PrefillMode::kBounded}) {
      std::vector<double> secs, tpss, gfs;
      PrefillResult r;
      ExpertCache::Stats before{};  // of the last rep
      // CPU `full`: an sgemm probe before the first rep and after each one, and each rep against
      // the mean of the two beside it (as decode's read probes): this VM's FMA rate moves 1.3x
      // within a minute (a pure-FMA loop on both cores read 134 and 170 GFLOP/s minutes apart),
      // so the run-wide fraction's best probe can be a fast moment that a slow rep never saw.
      const bool paired = !on_gpu && mode == PrefillMode::kFull;
      std::vector<double> sgemm_probes, paired_fractions;
      if (paired) sgemm_probes.push_back(ProbeSgemm(c));
      for (int rep = 0; rep < reps; ++rep) {
        auto st = be->NewSequence();
        PrefillOptions opt;
        opt.mode = mode;
        opt.chunk_size = 2048;
        kernels::ResetWorkCounters();
        before = experts ? experts->stats() : ExpertCache::Stats{};
        auto t0 = std::chrono::steady_clock::now();
        r = be->Prefill(*st, t, opt);
        const double s = Since(t0);
        secs.push_back(s);
        tpss.push_back(n / s);
        gfs.push_back(2.0 * layer_params * double(r.stats.layer_token_units) / s / 1e9);
        if (paired) {
          sgemm_probes.push_back(ProbeSgemm(c));
          paired_fractions.push_back(gfs.back() / (0.5 * (sgemm_probes[sgemm_probes.size() - 2] + sgemm_probes.back())));
        }
      }
      // The reference rate for this line: the best of the machine line's probe and the probes
      // beside these reps (a probe that met a busy moment would inflate every fraction; on this
      // shared VM it read 53-88 GFLOP/s at load 1-2 where the quiet machine reads ~180).
      if (paired) {
        sgemm_after = sgemm_probes.back();
        sgemm = std::max(sgemm, *std::max_element(sgemm_probes.begin(), sgemm_probes.end()));
      }
      const Spread tps = SpreadOf(tpss), gf = SpreadOf(gfs), sec = SpreadOf(secs);
      nlohmann::json j = {{"bench", "prefill"}, {"device", be->name()}, {"model", model_name}, {"weights", WeightPrecisionName(load.weights)}, {"int8_activations", kernels::Int8Activations()}, {"bf16_activations", kernels::Bf16Activations()}, {"n_tokens", n},
                          {"mode", ModeName(mode)}, {"reps", reps}, {"row_invariant_matmul", row_invariant}, {"seconds", sec.median}, {"tokens_per_s", tps.median},
                          {"layer_token_units", r.stats.layer_token_units}, {"matmul_gflops", gf.median},
                          {on_gpu ? "fraction_of_matmul" : "fraction_of_sgemm", gf.median / sgemm}};
      if (!on_gpu) {
        j["sgemm_gflops"] = sgemm;  // the rate the fractions divide by (best probe so far)
        j["sgemm_gflops_probe_after"] = sgemm_after;
      }
      AddSpread("tokens_per_s", tps, &j);
      AddSpread(on_gpu ? "fraction_of_matmul" : "fraction_of_sgemm", {gf.min / sgemm, gf.median / sgemm, gf.max / sgemm}, &j);
      if (!on_gpu) AddCpuWorkFigures(sgemm, secs.back(), &j);  // the work counters of the last rep (the probes use none)
      if (paired) {
        j["sgemm_probes_gflops"] = sgemm_probes;
        const Spread pf = SpreadOf(paired_fractions);
        j["fraction_of_sgemm_paired"] = pf.median;
        AddSpread("fraction_of_sgemm_paired", pf, &j);
      }
      add_on_demand(before, secs.back(), n, &j);
      if (mode == PrefillMode::kFull) full_tps = tps.median;
      else j["speedup_vs_full"] = tps.median / full_tps;
      Emit(j);
    }
  }
  for (int batch : batches) {
    // `batch` sequences of decode_context tokens, then reps x decode_n steps of all of them
    // together (each rep continues the same sequences: context grows by decode_n per rep).
    std::vector<std::unique_ptr<Sequence>> states;
    std::vector<Sequence*> ptrs;
    for (int b = 0; b < batch; ++b) {
      states.push_back(be->NewSequence());
      PrefillOptions opt;
      opt.mode = PrefillMode::kBounded;
      be->Prefill(*states.back(), random_tokens(decode_context), opt);
    }
    for (auto& st : states) ptrs.push_back(st.get());
    std::vector<int32_t> toks(size_t(batch), 1);
    std::vector<double> tpss;
    double in_matmul_gbs = 0, matmul_share = 0, attention_share = 0, matmul_bytes_per_token = 0, read_per_step = 0, s = 0;
    ExpertCache::Stats before{};  // of the last rep
    // CPU: a read probe before the first rep and after each one. This VM's bandwidth moves
    // +-10% over seconds (and dips by 40% at moments), so each rep is also divided by the probes
    // on either side of it: a paired fraction next to the run-wide one below.
    std::vector<double> probes, paired_fractions;
    // Decode tokens/s a second if the step's weight bytes streamed at `gbs`.
    auto bound_at = [&](double gbs) { return gbs * 1e9 / bytes_per_step * batch; };
    if (!on_gpu) probes.push_back(kernels::MeasureReadBandwidthGBs(probe_mib, 5));
    for (int rep = 0; rep < reps; ++rep) {
      kernels::ResetWorkCounters();
      before = experts ? experts->stats() : ExpertCache::Stats{};
      auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < decode_n; ++i) {
        auto logits = be->DecodeBatch(ptrs, toks);
        for (int b = 0; b < batch; ++b) toks[size_t(b)] = int32_t(logits[size_t(b)].size() % 7 + b);
      }
      s = Since(t0);
      tpss.push_back(batch * decode_n / s);
      if (!on_gpu) {
        const kernels::WorkCounters w = kernels::ReadWorkCounters();
        matmul_share = w.matmul_seconds / s;
        attention_share = w.attention_seconds / s;
        // Weight bytes the matmuls read per token (2 FLOPs per weight; batch 1: every row its own).
        matmul_bytes_per_token = w.matmul_flops / 2.0 * weight_bytes / (double(batch) * decode_n);
        // Weight bytes the products read (each product's weight once, whatever its rows: a batch's
        // rows routed to different experts read more than the lower bound), and per second in them.
        read_per_step = w.matmul_weight_bytes / decode_n;
        const double rep_in_matmul_gbs = w.matmul_weight_bytes / w.matmul_seconds / 1e9;
        in_matmul_gbs = std::max(in_matmul_gbs, rep_in_matmul_gbs);
        probes.push_back(kernels::MeasureReadBandwidthGBs(probe_mib, 5));
        double rep_bw = 0.5 * (probes[probes.size() - 2] + probes.back());
        if (batch == 1) rep_bw = std::max(rep_bw, rep_in_matmul_gbs);  // never below decode's own rate
        paired_fractions.push_back(tpss.back() / bound_at(rep_bw));
      }
    }
    // The bound's bandwidth: the best of the probe before, one right after the decode run (this
    // VM's bandwidth moves by +-30% over a minute), and, at batch 1, the rate decode's own
    // matmuls streamed weights at, so the bound is never below what decode itself reached.
    double bw_now = bw;
    if (!on_gpu) bw_now = std::max(bw, probes.back());
    const bool decode_faster = !on_gpu && batch == 1 && in_matmul_gbs > bw_now;
    if (decode_faster) bw_now = in_matmul_gbs;
    const double bound = bound_at(bw_now);
    const Spread tps = SpreadOf(tpss);
    nlohmann::json j = {{"bench", "decode"}, {"device", be->name()}, {"model", model_name}, {"weights", WeightPrecisionName(load.weights)}, {"int8_activations", kernels::Int8Activations()}, {"bf16_activations", kernels::Bf16Activations()}, {"batch", batch},
                        {"context", decode_context}, {"steps", decode_n}, {"reps", reps}, {"tokens_per_s", tps.median},
                        {"bandwidth_gbs", bw_now}, {"bandwidth_from_decode_itself", decode_faster},
                        {"weight_bytes_per_step_lower_bound", bytes_per_step},
                        {"weight_streaming_bound_tokens_per_s", bound}, {"fraction_of_bound", tps.median / bound}};
    AddSpread("tokens_per_s", tps, &j);
    AddSpread("fraction_of_bound", {tps.min / bound, tps.median / bound, tps.max / bound}, &j);
    if (!on_gpu) {
      j["matmul_share_of_time"] = matmul_share;  // of the last rep
      j["attention_share_of_time"] = attention_share;  // the same rep's attention (not in the bound)
      j["weight_gbs_while_in_matmuls"] = in_matmul_gbs;  // the best rep's
      j["matmul_weight_bytes_per_token"] = matmul_bytes_per_token;  // of the last rep, at the held precision
      // The last rep's bytes read a step by the products (the router's and other F32 products'
      // included), and the fraction of the bound over those bytes: at batch 1 the lower bound's
      // matmul bytes (plus the router's); in a batch, every expert some row was routed to.
      j["matmul_weight_bytes_read_per_step"] = read_per_step;
      j["fraction_of_bound_read"] = tps.median / batch * read_per_step / (bw_now * 1e9);
      // Each rep over the mean of the probes just before and after it (batch 1: or its own
      // products' rate, if higher); the probes in the order they ran.
      j["read_probes_gbs"] = probes;
      const Spread paired = SpreadOf(paired_fractions);
      j["fraction_of_bound_paired"] = paired.median;
      AddSpread("fraction_of_bound_paired", paired, &j);
    }
    add_on_demand(before, s, double(batch) * decode_n, &j);
    Emit(j);
  }
  return 0;
}

}  // namespace cedar
