#include "engine/benchmark.h"

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "engine/info.h"
#include "engine/init.h"
#include "kernels/hw_probe.h"
#include "kernels/ops.h"

namespace cedar {

namespace {

double Since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::vector<int> ParseList(const std::string& s) {
  std::vector<int> v;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) v.push_back(std::stoi(item));
  return v;
}

void Emit(const nlohmann::json& j) {
  std::printf("%s\n", j.dump().c_str());
  std::fflush(stdout);
}

}  // namespace

int RunEngineBenchMain(int argc, char** argv) {
  std::string model_dir, preset = "small", lengths_s = "512,4096,16384", batches_s = "1,8";
  int decode_n = 32, threads = 0;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
      return argv[++i];
    };
    if (a == "--help" || a == "-h") {
      std::printf("usage: cedar bench [--model DIR | --preset small] [--lengths 512,4096,16384] [--decode N] [--decode-batch 1,8] [--threads N]\n"
                  "Prints one JSON object per result: the machine's sgemm GFLOP/s and read bandwidth, then prefill\n"
                  "tokens/s per length in full and bounded, then decode tokens/s, each with its fraction of the hardware.\n");
      return 0;
    } else if (a == "--model") model_dir = next();
    else if (a == "--preset") preset = next();
    else if (a == "--lengths") lengths_s = next();
    else if (a == "--decode") decode_n = std::stoi(next());
    else if (a == "--threads") threads = std::stoi(next());
    else if (a == "--decode-batch") batches_s = next();
    else throw std::invalid_argument("unknown option " + a);
  }
  kernels::SetThreads(threads);
  if (model_dir.empty()) {
    ModelConfig c;
    if (!PresetConfig(preset, &c)) throw std::invalid_argument("unknown preset " + preset);
    model_dir = (std::filesystem::temp_directory_path() / ("cedar-bench-" + preset)).string();
    if (!std::filesystem::exists(model_dir + "/model.safetensors")) WriteRandomModel(c, 1, model_dir);
  }
  auto m = Model::Load(model_dir);
  const ModelConfig& c = m->config();
  const ModelInfo info = ComputeInfo(c);
  // Matmul parameters a row touches in one layer, averaged over layers (attention projections,
  // routed experts actually used, shared expert): the FLOPs below count 2 per parameter.
  const double layer_params = double(info.active_per_decode_token - info.head_params) / c.n_layers;

  const double sgemm = kernels::MeasureSgemmGflops(512, c.dim, 4 * c.dim, 5);
  const double bw = kernels::MeasureReadBandwidthGBs(1024, 3);
  Emit({{"bench", "machine"}, {"sgemm_gflops", sgemm}, {"sgemm_shape", {512, c.dim, 4 * c.dim}}, {"read_bandwidth_gbs", bw}});

  std::mt19937_64 rng(1);
  for (int n : ParseList(lengths_s)) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (auto& x : t) x = int32_t(rng() % uint64_t(c.vocab_size));
    double full_tps = 0;
    for (PrefillMode mode : {PrefillMode::kFull, PrefillMode::kBounded}) {
      SequenceState st(c);
      PrefillOptions opt;
      opt.mode = mode;
      opt.chunk_size = 2048;
      auto t0 = std::chrono::steady_clock::now();
      PrefillResult r = Prefill(*m, st, t, opt);
      const double s = Since(t0);
      const double tps = n / s;
      const double gflops = 2.0 * layer_params * double(r.stats.layer_token_units) / s / 1e9;
      nlohmann::json j = {{"bench", "prefill"}, {"model", c.dim == 512 ? preset : model_dir}, {"n_tokens", n},
                          {"mode", ModeName(mode)}, {"seconds", s}, {"tokens_per_s", tps},
                          {"layer_token_units", r.stats.layer_token_units}, {"matmul_gflops", gflops},
                          {"fraction_of_sgemm", gflops / sgemm}};
      if (mode == PrefillMode::kFull) full_tps = tps;
      else j["speedup_vs_full"] = tps / full_tps;
      Emit(j);
    }
  }
  for (int batch : ParseList(batches_s)) {
    // `batch` sequences of 512 tokens, then decode_n steps of all of them together.
    std::vector<SequenceState> states;
    std::vector<SequenceState*> ptrs;
    states.reserve(size_t(batch));
    for (int b = 0; b < batch; ++b) {
      states.emplace_back(c);
      std::vector<int32_t> t(512);
      for (auto& x : t) x = int32_t(rng() % uint64_t(c.vocab_size));
      PrefillOptions opt;
      opt.mode = PrefillMode::kBounded;
      Prefill(*m, states.back(), t, opt);
    }
    for (auto& st : states) ptrs.push_back(&st);
    std::vector<int32_t> toks(size_t(batch), 1);
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < decode_n; ++i) {
      auto logits = DecodeBatch(*m, ptrs, toks);
      for (int b = 0; b < batch; ++b) toks[size_t(b)] = int32_t(logits[size_t(b)].size() % 7 + b);
    }
    const double s = Since(t0);
    const double bytes_per_step = double(info.active_per_decode_token) * 4.0;  // routed experts differ per row: a lower bound
    const double bound = bw * 1e9 / bytes_per_step * batch;
    Emit({{"bench", "decode"}, {"batch", batch}, {"context", 512}, {"steps", decode_n}, {"tokens_per_s", batch * decode_n / s},
          {"weight_bytes_per_step_lower_bound", bytes_per_step}, {"weight_streaming_bound_tokens_per_s", bound},
          {"fraction_of_bound", batch * decode_n / s / bound}});
  }
  return 0;
}

}  // namespace cedar
