// Two settings of the same decode, step by step in one process (issue 20):
//
//   build/bench/bench_decode_ab --model DIR --b bf16a=1 [--a bf16a=0] [--weights int8] [--context 512]
//                               [--steps 200] [--batch 1]
//
// A setting is a comma-separated list of switches: bf16a=0|1 (kernels::SetBf16Activations),
// int8a=0|1 (SetInt8Activations), fp8x=0|1 (SetFp8PrescaledActivations), threads=N
// (SetPoolThreads); a switch that a side does not name keeps the process default (off, off, on,
// all cores). A side's switches are set before its step's clock starts (threads=N restarts the
// pool there). The model is loaded once at --weights, --batch states are prefilled with
// --context tokens (`exact`), and then each step decodes one token for every state, the steps
// alternating between setting A and setting B.
// Why one process: this 2-core VM's runs move by 10-25% from one process to the next. Its read
// probe gave 44-82 GB/s over a day. Two sides with the same setting read within ~1% of each
// other (docs/WEIGHTS.md, session 29; here 1.0001 on medium). Two different settings still see
// the machine's state differently, so their ratio moves between runs: INT8 on BF16 activations
// against F32 ones read 0.82, 0.89 and 0.93 in three runs. The tokens are fixed, not sampled, so
// both sides decode the same sequence of
// tokens. The state is one, and a switch that changes results (BF16 activations do) leaves the
// other side to continue from a slightly different state, which costs the same.
//
// One JSON object per side (median, quartiles and tokens/s over its steps), then one with the
// ratio B / A of the medians and the 1-minute load average. Nothing is asserted.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/bench_flags.h"
#include "bench/bench_stats.h"
#include "engine/engine.h"
#include "engine/flag_values.h"
#include "kernels/ops.h"
#include "kernels/thread_pool.h"

namespace k = cedar::kernels;

namespace {

// One side's switches; -1 = the process default.
struct Setting {
  std::string text;
  int bf16a = -1, int8a = -1, fp8x = -1, threads = -1;
};

// "bf16a=1,threads=1" -> Setting. Throws std::invalid_argument naming `flag` on a bad item.
Setting ParseSetting(const char* flag, const std::string& text) {
  Setting s;
  s.text = text;
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, ',');) {
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    const std::string key = item.substr(0, eq), value = eq == std::string::npos ? "" : item.substr(eq + 1);
    if (eq == std::string::npos || value.empty())
      throw std::invalid_argument(std::string(flag) + ": expected SWITCH=VALUE, got '" + item + "'");
    if (key == "bf16a") s.bf16a = cedar::ParseIntFlag<int>(flag, value, 0, 1);
    else if (key == "int8a") s.int8a = cedar::ParseIntFlag<int>(flag, value, 0, 1);
    else if (key == "fp8x") s.fp8x = cedar::ParseIntFlag<int>(flag, value, 0, 1);
    else if (key == "threads") s.threads = cedar::ParseIntFlag<int>(flag, value, 1, 4096);
    else throw std::invalid_argument(std::string(flag) + ": unknown switch '" + key + "' (bf16a, int8a, fp8x, threads)");
  }
  return s;
}

// Puts the process in setting `s` (the defaults where it names nothing).
void Apply(const Setting& s, int default_threads) {
  k::SetBf16Activations(s.bf16a == 1);
  k::SetInt8Activations(s.int8a == 1);
  k::SetFp8PrescaledActivations(s.fp8x != 0);
  const int th = s.threads > 0 ? s.threads : default_threads;
  if (k::Threads() != th) k::SetPoolThreads(th);
}

}  // namespace

int main(int argc, char** argv) {
  std::string model_dir, weights = "as-stored", a_text, b_text;
  int context = 512, steps = 200, batch = 1, warmup = 8;
  auto desc = cedar::bench::Options("bench_decode_ab: decode steps alternating between two settings in one process, as JSON lines");
  desc.add_options()("model", cedar::bench::po::value(&model_dir)->required(), "model directory (cedar init --out)")(
      "weights", cedar::bench::po::value(&weights)->default_value(weights), "f32 | bf16 | int8 | as-stored | fp8-fp4")(
      "a", cedar::bench::po::value(&a_text)->default_value(""), "setting A: SWITCH=VALUE,... (bf16a=0|1, int8a=0|1, fp8x=0|1, threads=N); empty: the defaults")(
      "b", cedar::bench::po::value(&b_text)->required(), "setting B, as --a")(
      "context", cedar::cli::IntOption("--context", &context, 1, 1 << 20), "prompt tokens prefilled before decoding")(
      "steps", cedar::cli::IntOption("--steps", &steps, 1, 1 << 20), "timed steps per side")(
      "warmup", cedar::cli::IntOption("--warmup", &warmup, 0, 1 << 20), "untimed steps per side first")(
      "batch", cedar::cli::IntOption("--batch", &batch, 1, 256), "sequences decoded together (DecodeBatch above 1)");
  if (const int rc = cedar::bench::ParseFlags("bench_decode_ab", desc, argc, argv); rc >= 0) return rc;
  Setting sides[2];
  cedar::LoadOptions load;
  try {
    sides[0] = ParseSetting("--a", a_text);
    sides[1] = ParseSetting("--b", b_text);
    load.weights = cedar::ParseWeightPrecision(weights);
  } catch (const std::exception& e) {
    return cedar::bench::FlagError("bench_decode_ab", e.what());
  }
  try {
    const int default_threads = k::Threads();
    auto m = cedar::Model::Load(model_dir, load);
    const cedar::ModelConfig& c = m->config();
    if (int64_t(context) + warmup + steps + 1 > c.max_seq_len)
      throw std::invalid_argument("--context + --warmup + --steps exceeds the model's max_seq_len " + std::to_string(c.max_seq_len));
    std::vector<std::unique_ptr<cedar::SequenceState>> owned;
    std::vector<cedar::SequenceState*> states;
    for (int s = 0; s < batch; ++s) {
      std::vector<int32_t> prompt(static_cast<size_t>(context));
      for (int i = 0; i < context; ++i) prompt[size_t(i)] = int32_t((int64_t(i) * 7919 + s * 31) % c.vocab_size);
      owned.push_back(std::make_unique<cedar::SequenceState>(c));
      states.push_back(owned.back().get());
      cedar::PrefillOptions po;
      po.mode = cedar::PrefillMode::kExact;
      cedar::Prefill(*m, *states.back(), prompt, po);
    }
    std::vector<double> ms[2];
    std::vector<int32_t> tokens(static_cast<size_t>(batch));
    for (int i = 0; i < 2 * (warmup + steps); ++i) {
      const int side = i % 2;
      Apply(sides[side], default_threads);
      for (int s = 0; s < batch; ++s) tokens[size_t(s)] = int32_t((i / 2 * 13 + s * 7 + 1) % c.vocab_size);
      const auto t0 = cedar::bench::Clock::now();
      if (batch == 1) cedar::DecodeStep(*m, *states[0], tokens[0]);
      else cedar::DecodeBatch(*m, states, tokens);
      const double t = cedar::bench::Ms(t0, cedar::bench::Clock::now());
      if (i >= 2 * warmup) ms[side].push_back(t);
    }
    double median[2];
    for (int side = 0; side < 2; ++side) {
      median[side] = cedar::bench::Pct(ms[side], 50);
      nlohmann::json j = {{"bench", "decode_ab"}, {"side", side ? "b" : "a"}, {"setting", sides[side].text},
                          {"model", model_dir}, {"weights", weights}, {"context", context}, {"batch", batch},
                          {"steps", steps}, {"step_ms_median", median[side]}, {"step_ms_p25", cedar::bench::Pct(ms[side], 25)},
                          {"step_ms_p75", cedar::bench::Pct(ms[side], 75)}, {"tokens_per_s", batch * 1e3 / median[side]}};
      std::printf("%s\n", j.dump().c_str());
    }
    std::printf("%s\n", nlohmann::json{{"bench", "decode_ab"}, {"ratio_b_over_a", median[1] / median[0]}, {"a", sides[0].text},
                                       {"b", sides[1].text}, {"load1", cedar::bench::Load1()}}.dump().c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_decode_ab: %s\n", e.what());
    return 1;
  }
  return 0;
}
