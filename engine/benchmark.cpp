#include "engine/benchmark.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/backend.h"
#include "engine/engine.h"
#include "engine/expert_cache.h"
#include "engine/flag_values.h"
#include "engine/info.h"
#include "engine/init.h"
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
}

void Emit(const nlohmann::json& j) {
  std::printf("%s\n", j.dump().c_str());
  std::fflush(stdout);
}

// The machine line: the CPU's sgemm rate and read bandwidth, or the GPU's BF16 GEMM rate and
// copy bandwidth (both as "matmul GFLOP/s" and "bandwidth GB/s" for the fractions below).
void MeasureMachine(const Backend& b, const ModelConfig& c, double* matmul_gflops, double* bw_gbs) {
  if (std::string(b.name()) == "cpu") {
    *matmul_gflops = kernels::MeasureSgemmGflops(512, c.dim, 4 * c.dim, 5);
    *bw_gbs = kernels::MeasureReadBandwidthGBs(1024, 5);
    Emit({{"bench", "machine"}, {"device", "cpu"}, {"sgemm_gflops", *matmul_gflops}, {"sgemm_shape", {512, c.dim, 4 * c.dim}},
          {"read_bandwidth_gbs", *bw_gbs}});
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
  bool f32_weights = false;
  LoadOptions load;  // --mmap-weights
  int decode_n = 32, threads = 0;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
      return argv[++i];
    };
    if (a == "--help" || a == "-h") {
      std::printf("usage: cedar bench [--model DIR | --preset small|medium] [--lengths 512,4096,16384] [--decode N] [--decode-batch 1,8]\n"
                  "                   [--threads N] [--device cpu|cuda|auto] [--f32-weights] [--mmap-weights] [--max-ram BYTES[K|M|G]]\n"
                  "Prints one JSON object per result: the machine's matmul rate and bandwidth (the CPU's sgemm and read\n"
                  "bandwidth, or the GPU's BF16 GEMM and copy bandwidth), then prefill tokens/s per length in full and\n"
                  "bounded, then decode tokens/s, each with its fraction of the hardware. --device auto (the default)\n"
                  "is cuda when this build has CUDA and a device exists; --f32-weights keeps F32 weights on the GPU;\n"
                  "--mmap-weights reads F32 weights in place from the file instead of the huge-page copy.\n"
                  "A released-layout model (cedar init --arch v41) also prints its load (dequantise-once seconds, stored\n"
                  "and F32 bytes); with --max-ram below its expert bytes the experts are dequantised on demand, and the\n"
                  "prefill and decode lines give the share of time spent dequantising and the shard bytes read per token.\n");
      return 0;
    } else if (a == "--model") model_dir = next();
    else if (a == "--preset") preset = next();
    else if (a == "--lengths") lengths_s = next();
    else if (a == "--decode") decode_n = ParseIntFlag("--decode", next(), 0, 1 << 20);
    else if (a == "--threads") threads = ParseIntFlag("--threads", next(), 0, 4096);
    else if (a == "--decode-batch") batches_s = next();
    else if (a == "--device") device = next();
    else if (a == "--f32-weights") f32_weights = true;
    else if (a == "--mmap-weights") load.mmap_weights = true;
    else if (a == "--max-ram") load.max_ram_bytes = ParseMaxRam(next());
    else throw std::invalid_argument("unknown option " + a);
  }
  // Checked before anything runs.
  const std::vector<int> lengths = ParseIntListFlag<int>("--lengths", lengths_s, 1, 1 << 24);
  const std::vector<int> batches = ParseIntListFlag<int>("--decode-batch", batches_s, 1, 4096);
  kernels::SetThreads(threads);
  std::string why;
  if (ResolveDevice(device) == "cuda" && !CudaAvailable(&why))  // before writing a model it cannot run
    throw std::runtime_error("--device cuda: " + why);
  if (model_dir.empty()) {
    ModelConfig c;
    if (!PresetConfig(preset, &c)) throw std::invalid_argument("unknown preset " + preset);
    model_dir = (std::filesystem::temp_directory_path() / ("cedar-bench-" + preset)).string();
    if (!std::filesystem::exists(model_dir + "/model.safetensors")) WriteRandomModel(c, 1, model_dir);
  }
  auto m = Model::Load(model_dir, load);
  const ModelConfig& c = m->config();
  BackendOptions bo;
  bo.device = device;
  bo.f32_weights = f32_weights;
  const std::unique_ptr<Backend> be = MakeBackend(*m, bo);
  const bool on_gpu = std::string(be->name()) == "cuda";
  const std::string model_name = model_dir.find("cedar-bench-") != std::string::npos ? preset : model_dir;
  const ModelInfo info = ComputeInfo(c);
  // The released layout: what loading cost (every weight dequantised once into the arena, or the
  // dense part only when --max-ram puts the experts on demand).
  const ExpertCache* experts = m->expert_cache();
  if (const ReleasedLoadReport* lr = m->released_load()) {
    Emit({{"bench", "load"}, {"model", model_name}, {"tensors", lr->tensors}, {"stored_bytes", lr->stored_bytes},
          {"dense_f32_bytes", lr->dense_bytes}, {"expert_f32_bytes", lr->expert_bytes}, {"check_seconds", lr->check_seconds},
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

  double sgemm = 0, bw = 0;  // on a GPU: its BF16 GEMM rate and copy bandwidth
  kernels::EnableWorkCounters(true);
  MeasureMachine(*be, c, &sgemm, &bw);
  const double weight_bytes = on_gpu && !f32_weights ? 2.0 : 4.0;

  std::mt19937_64 rng(1);
  for (int n : lengths) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (auto& x : t) x = int32_t(rng() % uint64_t(c.vocab_size));
    double full_tps = 0;
    for (PrefillMode mode : {PrefillMode::kFull, PrefillMode::kBounded}) {
      auto st = be->NewSequence();
      PrefillOptions opt;
      opt.mode = mode;
      opt.chunk_size = 2048;
      kernels::ResetWorkCounters();
      const ExpertCache::Stats before = experts ? experts->stats() : ExpertCache::Stats{};
      auto t0 = std::chrono::steady_clock::now();
      PrefillResult r = be->Prefill(*st, t, opt);
      const double s = Since(t0);
      const double tps = n / s;
      const double gflops = 2.0 * layer_params * double(r.stats.layer_token_units) / s / 1e9;
      nlohmann::json j = {{"bench", "prefill"}, {"device", be->name()}, {"model", model_name}, {"n_tokens", n},
                          {"mode", ModeName(mode)}, {"seconds", s}, {"tokens_per_s", tps},
                          {"layer_token_units", r.stats.layer_token_units}, {"matmul_gflops", gflops},
                          {on_gpu ? "fraction_of_matmul" : "fraction_of_sgemm", gflops / sgemm}};
      if (!on_gpu) AddCpuWorkFigures(sgemm, s, &j);
      add_on_demand(before, s, n, &j);
      if (mode == PrefillMode::kFull) full_tps = tps;
      else j["speedup_vs_full"] = tps / full_tps;
      Emit(j);
    }
  }
  for (int batch : batches) {
    // `batch` sequences of 512 tokens, then decode_n steps of all of them together.
    std::vector<std::unique_ptr<Sequence>> states;
    std::vector<Sequence*> ptrs;
    for (int b = 0; b < batch; ++b) {
      states.push_back(be->NewSequence());
      std::vector<int32_t> t(512);
      for (auto& x : t) x = int32_t(rng() % uint64_t(c.vocab_size));
      PrefillOptions opt;
      opt.mode = PrefillMode::kBounded;
      be->Prefill(*states.back(), t, opt);
    }
    for (auto& st : states) ptrs.push_back(st.get());
    std::vector<int32_t> toks(size_t(batch), 1);
    kernels::ResetWorkCounters();
    const ExpertCache::Stats before = experts ? experts->stats() : ExpertCache::Stats{};
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < decode_n; ++i) {
      auto logits = be->DecodeBatch(ptrs, toks);
      for (int b = 0; b < batch; ++b) toks[size_t(b)] = int32_t(logits[size_t(b)].size() % 7 + b);
    }
    const double s = Since(t0);
    // This VM's bandwidth moves by +-30% over a minute, so on the CPU the bound takes the best
    // of the first probe and one taken right after the decode run.
    double bw_now = bw;
    if (!on_gpu) bw_now = std::max(bw, kernels::MeasureReadBandwidthGBs(1024, 5));
    const double bytes_per_step = double(info.active_per_decode_token) * weight_bytes;  // routed experts differ per row: a lower bound
    const double bound = bw_now * 1e9 / bytes_per_step * batch;
    nlohmann::json j = {{"bench", "decode"}, {"device", be->name()}, {"model", model_name}, {"batch", batch}, {"context", 512},
                        {"steps", decode_n}, {"tokens_per_s", batch * decode_n / s}, {"bandwidth_gbs", bw_now},
                        {"weight_bytes_per_step_lower_bound", bytes_per_step},
                        {"weight_streaming_bound_tokens_per_s", bound}, {"fraction_of_bound", batch * decode_n / s / bound}};
    if (!on_gpu) {
      // Where the step's time goes: the share spent inside matmul calls, and the weight bytes
      // those calls streamed per second (F32: 4 bytes per weight; 2 FLOPs per weight).
      const kernels::WorkCounters w = kernels::ReadWorkCounters();
      j["matmul_share_of_time"] = w.matmul_seconds / s;
      // (batch 1 only: in a batch each routed expert sees a different number of rows)
      if (batch == 1) j["weight_gbs_while_in_matmuls"] = w.matmul_flops / 2.0 * 4.0 / w.matmul_seconds / 1e9;
      // F32 weight bytes the matmuls read per token (2 FLOPs per weight; batch 1: every row its own).
      j["matmul_weight_bytes_per_token"] = w.matmul_flops / 2.0 * 4.0 / (double(batch) * decode_n);
    }
    add_on_demand(before, s, double(batch) * decode_n, &j);
    Emit(j);
  }
  return 0;
}

}  // namespace cedar
