// Quality of the engine's execution modes on real text (bench/quality/quality.py drives it).
//
//   build/bench/bench_quality --model DIR --tokens FILE [--cuts 128,320] [--decode 128]
//                             [--replay 128:144,384:400] [--modes exact,bounded,bounded-paper]
//                             [--threads T] [--weights f32|bf16|int8|as-stored|fp8-fp4] [--kl-ref f32]   (--help: all)
//
// FILE: one sequence per line, comma-separated token ids. For each sequence, with the C++
// engine (F32, or the matmul weights at --weights: compare `full`'s NLL across two runs for the
// price of a precision):
//   full     : the logits of every row, feeding one token at a time (decode = `full`, chunking
//              never changes a result); its log-probabilities are the reference for the rest.
//   <mode>@n : Prefill(tokens[0, n), mode), then DecodeStep for the next `decode` tokens
//              (teacher-forced): rows n-1 .. n-1+decode.
//   replay P:n: Prefill(tokens[0, P), full); drop every window entry and the H_E tail (what a
//              cache eviction drops; pools stay); EncoderReplay; Prefill(tokens[P, n), bounded);
//              then decode as above.
// Prints one JSON object per (sequence, scenario) with per-row arrays: the row, the next
// token's negative log-likelihood (nats) under the scenario and under full, KL(full || mode)
// (nats), whether the argmax agrees (ties toward the lower id), and max |logit difference|.
// With --kl-ref P, every scenario also runs on the model loaded at precision P (the same rows, the
// same mode) and each row adds `kl_ref` = KL(P's logits || these) in nats and `nll_ref`: the
// price of --weights within one mode (bench/quality/weights_kl.py aggregates it, docs/WEIGHTS.md).
// It never asserts; the Python driver aggregates and cross-checks against its own numbers.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <fstream>
#include <memory>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/bench_flags.h"
#include "engine/engine.h"
#include "engine/flag_values.h"
#include "kernels/ops.h"
#include "kernels/hw_probe.h"

namespace {

using cedar::Model;
using cedar::PrefillMode;
using cedar::SequenceState;
namespace po = boost::program_options;

// One line of the tokens file: comma-separated ids (`where` names the line in the error).
std::vector<int32_t> ParseIds(const std::string& line, const std::string& where) {
  try {
    return cedar::ParseIntListFlag<int32_t>(where, line, 0, INT32_MAX);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string(e.what()) + " (a token id)");
  }
}

std::vector<double> LogSoftmax(const std::vector<float>& x) {
  double mx = -INFINITY;
  for (float v : x) mx = std::max(mx, double(v));
  double s = 0;
  for (float v : x) s += std::exp(double(v) - mx);
  const double lse = mx + std::log(s);
  std::vector<double> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = double(x[i]) - lse;
  return out;
}

size_t Argmax(const std::vector<float>& x) {
  size_t b = 0;
  for (size_t i = 1; i < x.size(); ++i)
    if (x[i] > x[b]) b = i;
  return b;
}

struct Rows {
  nlohmann::json row = nlohmann::json::array(), nll = nlohmann::json::array(), nll_full = nlohmann::json::array(),
                 kl = nlohmann::json::array(), top1 = nlohmann::json::array(), maxabs = nlohmann::json::array();
  nlohmann::json kl_ref = nlohmann::json::array(), nll_ref = nlohmann::json::array();  // --kl-ref only
};

double Kl(const std::vector<double>& lp_ref, const std::vector<double>& lp) {
  double kl = 0;
  for (size_t i = 0; i < lp.size(); ++i) kl += std::exp(lp_ref[i]) * (lp_ref[i] - lp[i]);
  return kl;
}

// Adds the comparison of `logits` (row r) with the full logits of that row.
// `ref`: the same row's logits on the --kl-ref model (nullptr without it).
void AddRow(Rows& out, int64_t r, const std::vector<float>& logits, const std::vector<std::vector<float>>& full,
            const std::vector<int32_t>& toks, const std::vector<float>* ref = nullptr) {
  const auto& f = full[size_t(r)];
  const auto lp = LogSoftmax(logits), lf = LogSoftmax(f);
  double kl = 0, mx = 0;
  for (size_t i = 0; i < lp.size(); ++i) {
    kl += std::exp(lf[i]) * (lf[i] - lp[i]);
    mx = std::max(mx, std::fabs(double(logits[i]) - double(f[i])));
  }
  out.row.push_back(r);
  const bool has_next = size_t(r + 1) < toks.size();
  out.nll.push_back(has_next ? -lp[size_t(toks[size_t(r + 1)])] : 0.0);
  out.nll_full.push_back(has_next ? -lf[size_t(toks[size_t(r + 1)])] : 0.0);
  out.kl.push_back(kl);
  out.top1.push_back(Argmax(logits) == Argmax(f) ? 1 : 0);
  out.maxabs.push_back(mx);
  if (ref) {
    const auto lr = LogSoftmax(*ref);
    out.kl_ref.push_back(Kl(lr, lp));
    out.nll_ref.push_back(has_next ? -lr[size_t(toks[size_t(r + 1)])] : 0.0);
  }
}

nlohmann::json ToJson(const Rows& r) {
  nlohmann::json j = {{"row", r.row}, {"nll", r.nll}, {"nll_full", r.nll_full}, {"kl", r.kl}, {"top1", r.top1}, {"max_abs", r.maxabs}};
  if (!r.kl_ref.empty()) {
    j["kl_ref"] = r.kl_ref;
    j["nll_ref"] = r.nll_ref;
  }
  return j;
}

// Prefilled state `st` whose last logits are `logits` (row n-1): the logits of rows n-1 .. n-1+decode
// (decode teacher-forced, within the sequence).
std::vector<std::vector<float>> DecodeRows(const Model& m, SequenceState& st, std::vector<float> logits, int64_t n, int decode,
                                           const std::vector<int32_t>& toks) {
  std::vector<std::vector<float>> out{logits};
  for (int i = 0; i < decode && size_t(n + i) < toks.size(); ++i) out.push_back(cedar::DecodeStep(m, st, toks[size_t(n + i)]));
  return out;
}

// `full`: the logits of every row, one token at a time.
std::vector<std::vector<float>> RunFull(const Model& m, const std::vector<int32_t>& toks) {
  std::vector<std::vector<float>> full;
  SequenceState st(m.config());
  cedar::PrefillOptions opt;
  opt.mode = PrefillMode::kFull;
  full.push_back(cedar::Prefill(m, st, std::span<const int32_t>(toks.data(), 1), opt).logits);
  for (size_t r = 1; r < toks.size(); ++r) full.push_back(cedar::DecodeStep(m, st, toks[r]));
  return full;
}

// <mode>@n: rows n-1 .. n-1+decode.
std::vector<std::vector<float>> RunMode(const Model& m, const std::vector<int32_t>& toks, PrefillMode mode, int n, int decode,
                                        int64_t* units) {
  SequenceState st(m.config());
  cedar::PrefillOptions opt;
  opt.mode = mode;
  auto pr = cedar::Prefill(m, st, std::span<const int32_t>(toks.data(), size_t(n)), opt);
  *units = pr.stats.layer_token_units;
  return DecodeRows(m, st, pr.logits, n, decode, toks);
}

// replay P:n: rows n-1 .. n-1+decode after the eviction and the encoder replay.
std::vector<std::vector<float>> RunReplay(const Model& m, const std::vector<int32_t>& toks, int64_t P, int64_t n, int decode,
                                          int64_t* replay_units, int64_t* suffix_units) {
  if (n <= P) throw std::invalid_argument("--replay: n must be > P (a suffix to prefill)");
  SequenceState st(m.config());
  cedar::PrefillOptions opt;
  opt.mode = PrefillMode::kFull;
  cedar::Prefill(m, st, std::span<const int32_t>(toks.data(), size_t(P)), opt);
  st.DropWindowsAndResidual();
  *replay_units = cedar::EncoderReplay(m, st).layer_token_units;
  opt.mode = PrefillMode::kBounded;
  auto pr = cedar::Prefill(m, st, std::span<const int32_t>(toks.data() + P, size_t(n - P)), opt);
  *suffix_units = pr.stats.layer_token_units;
  return DecodeRows(m, st, pr.logits, n, decode, toks);
}

// The comparison of rows first_row.. (logits `got`, and `ref` on the --kl-ref model if not empty).
Rows Compare(int64_t first_row, const std::vector<std::vector<float>>& got, const std::vector<std::vector<float>>& ref,
             const std::vector<std::vector<float>>& full, const std::vector<int32_t>& toks) {
  Rows rows;
  for (size_t i = 0; i < got.size(); ++i) AddRow(rows, first_row + int64_t(i), got[i], full, toks, ref.empty() ? nullptr : &ref[i]);
  return rows;
}

int Main(int argc, char** argv) {
  std::string model_dir, tokens_file, replay_s, modes_s = "exact,bounded,bounded-paper", weights = "f32", kl_ref;
  int decode = 128, threads = 1;
  std::vector<int> cuts;
  auto desc = cedar::bench::Options(
      "bench_quality: per-row NLL, KL and top-1 agreement of the engine's modes against full, as JSON lines");
  desc.add_options()("model", po::value(&model_dir), "model directory (required)")(
      "tokens", po::value(&tokens_file), "file of sequences: one a line, comma-separated token ids (required)")(
      "cuts", cedar::bench::IntListOption("--cuts", &cuts, 1, 1 << 30), "prefill lengths n (comma-separated)")(
      "decode", cedar::cli::IntOption("--decode", &decode, 0, 1 << 24), "teacher-forced decode rows after each prefill")(
      "replay", po::value(&replay_s), "encoder-replay scenarios P:n with n > P >= 1 (comma-separated)")(
      "modes", po::value(&modes_s)->default_value(modes_s), "prefill modes (comma-separated)")(
      "threads", cedar::cli::IntOption("--threads", &threads, 0, 4096), "BLAS threads (0: the library's default)")(
      "weights", po::value(&weights)->default_value(weights),
      "matmul weights' precision for every scenario: f32|bf16|int8|as-stored|fp8-fp4 (docs/WEIGHTS.md)")(
      "int8-activations", "INT8 and FP4 weights: decode products on 8-bit activations (kernels::SetInt8Activations; the --kl-ref F32 run is unaffected)")(
      "bf16-activations", "FP8, FP4 and INT8 weights: decode products on BF16 activations (kernels::SetBf16Activations; the --kl-ref F32 run is unaffected)")(
      "kl-ref", po::value(&kl_ref),
      "also run every scenario at this precision and print kl_ref / nll_ref per row (bench/quality/weights_kl.py)");
  po::variables_map vm;
  if (const int rc = cedar::bench::ParseFlags("bench_quality", desc, argc, argv, &vm); rc >= 0) return rc;
  if (model_dir.empty() || tokens_file.empty()) return cedar::bench::FlagError("bench_quality", "--model and --tokens are required");
  std::vector<std::pair<int64_t, int64_t>> replays;
  {
    std::stringstream ss(replay_s);
    std::string item;
    while (std::getline(ss, item, ','))
      if (!item.empty()) {
        const size_t colon = item.find(':');
        if (colon == std::string::npos) return cedar::bench::FlagError("bench_quality", "--replay: expected P:n, found '" + item + "'");
        try {
          const int64_t P = cedar::ParseIntFlag<int64_t>("--replay P", item.substr(0, colon), 1, 1 << 30);
          const int64_t n = cedar::ParseIntFlag<int64_t>("--replay n", item.substr(colon + 1), P + 1, 1 << 30);
          replays.push_back({P, n});
        } catch (const std::invalid_argument& e) {
          return cedar::bench::FlagError("bench_quality", e.what());
        }
      }
  }
  cedar::kernels::SetThreads(threads);
  cedar::kernels::SetInt8Activations(vm.count("int8-activations") > 0);
  cedar::kernels::SetBf16Activations(vm.count("bf16-activations") > 0);
  cedar::LoadOptions load;
  load.weights = cedar::ParseWeightPrecision(weights);
  auto m = Model::Load(model_dir, load);
  std::unique_ptr<const Model> ref_model;
  if (!kl_ref.empty()) {
    cedar::LoadOptions lr;
    lr.weights = cedar::ParseWeightPrecision(kl_ref);
    ref_model = Model::Load(model_dir, lr);
  }
  std::vector<std::string> modes;
  {
    std::stringstream ss(modes_s);
    std::string item;
    while (std::getline(ss, item, ','))
      if (!item.empty()) modes.push_back(item);
  }
  std::ifstream in(tokens_file);
  if (!in) throw std::runtime_error("cannot open " + tokens_file);
  std::string line;
  int seq = 0;
  for (int line_no = 1; std::getline(in, line); ++line_no) {
    const auto toks = ParseIds(line, tokens_file + " line " + std::to_string(line_no));
    if (toks.size() < 2) continue;
    // full: one row at a time
    const std::vector<std::vector<float>> full = RunFull(*m, toks);
    const bool with_ref = ref_model != nullptr;
    {
      const std::vector<std::vector<float>> ref = with_ref ? RunFull(*ref_model, toks) : std::vector<std::vector<float>>{};
      std::vector<std::vector<float>> got(full.begin(), full.end() - 1), refr;
      if (with_ref) refr.assign(ref.begin(), ref.end() - 1);
      const Rows rows = Compare(0, got, refr, full, toks);
      nlohmann::json j = {{"seq", seq}, {"scenario", "full"}, {"impl", "cedar-cpp"}};
      j["nll"] = rows.nll;
      if (with_ref) {
        j["kl_ref"] = rows.kl_ref;
        j["nll_ref"] = rows.nll_ref;
      }
      std::printf("%s\n", j.dump().c_str());
    }
    for (const std::string& ms : modes) {
      PrefillMode mode;
      if (!cedar::ParseMode(ms, &mode)) throw std::invalid_argument("unknown mode " + ms);
      for (int n : cuts) {
        if (n < 1 || size_t(n) > toks.size()) continue;
        int64_t units = 0, ref_units = 0;
        const auto got = RunMode(*m, toks, mode, n, decode, &units);
        const auto ref = with_ref ? RunMode(*ref_model, toks, mode, n, decode, &ref_units) : std::vector<std::vector<float>>{};
        nlohmann::json j = {{"seq", seq}, {"scenario", ms}, {"impl", "cedar-cpp"}, {"n", n}, {"prefill_layer_token_units", units}};
        j.update(ToJson(Compare(n - 1, got, ref, full, toks)));
        std::printf("%s\n", j.dump().c_str());
      }
    }
    for (auto [P, n] : replays) {
      if (size_t(n) > toks.size()) continue;
      int64_t ru = 0, su = 0, rru = 0, rsu = 0;
      const auto got = RunReplay(*m, toks, P, n, decode, &ru, &su);
      const auto ref = with_ref ? RunReplay(*ref_model, toks, P, n, decode, &rru, &rsu) : std::vector<std::vector<float>>{};
      nlohmann::json j = {{"seq", seq}, {"scenario", "encoder-replay"}, {"impl", "cedar-cpp"}, {"P", P}, {"n", n},
                          {"replay_layer_token_units", ru}, {"suffix_layer_token_units", su}};
      j.update(ToJson(Compare(n - 1, got, ref, full, toks)));
      std::printf("%s\n", j.dump().c_str());
    }
    std::fflush(stdout);
    ++seq;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  cedar::kernels::KeepLargeAllocations();
  try {
    return Main(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_quality: %s\n", e.what());
    return 1;
  }
}
