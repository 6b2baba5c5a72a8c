// Issue 4's benchmark: a session with a long context that appends a tool result N times.
// Per turn: time to first token and layer-token units for Cedar (SessionManager: live state,
// encoder on the new tokens, decoder replay), for the same engine run as a decoder-only model
// with an exact prefix cache (every new token through all L layers, from a live state), and
// with no cache (the whole context from scratch; measured on a few turns, it is slow).
// Prints one JSON object per result.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>
#include <iostream>
#include <set>
#include <string>

#include <boost/program_options.hpp>

#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "engine/flag_values.h"
#include "engine/info.h"
#include "engine/init.h"
#include "session/session_manager.h"
#include "kernels/hw_probe.h"

using namespace cedar;

namespace {
double Since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}
std::vector<int32_t> Random(int n, std::mt19937_64& rng) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (auto& x : v) x = int32_t(rng() % 256);
  return v;
}
}  // namespace

int main(int argc, char** argv) {
  cedar::kernels::KeepLargeAllocations();
  int context = 16384, append = 512, turns = 20;
  std::string preset = "small", model_dir;
  std::set<int> no_cache_turns = {1, 10, 20};
  // Boost.program_options, as the `cedar` subcommands: --help prints this and exits, and a bad
  // value is an error naming the flag (engine/flag_values.h), never a library's message.
  namespace po = boost::program_options;
  std::string context_s = "16384", append_s = "512", turns_s = "20", no_cache_s = "1,10,20";
  po::options_description desc(
      "bench_session: a session's turns over a long context (prefill, live hits, cache restores) as JSON lines");
  desc.add_options()("help,h", "show this help and exit")(
      "context", po::value(&context_s)->default_value(context_s), "tokens of the first turn's prompt")(
      "append", po::value(&append_s)->default_value(append_s), "tokens each later turn adds")(
      "turns", po::value(&turns_s)->default_value(turns_s), "turns")(
      "preset", po::value(&preset)->default_value(preset), "model preset (random weights, written once to a temp dir)")(
      "model", po::value(&model_dir), "model directory (instead of --preset)")(
      "no-cache-turns", po::value(&no_cache_s)->default_value(no_cache_s),
      "turns also run without the cache, for comparison (comma-separated)");
  try {
    po::variables_map vm;
    po::store(po::parse_command_line(argc, argv, desc), vm);
    if (vm.count("help")) {
      std::cout << desc << "\n";
      return 0;
    }
    po::notify(vm);
    context = ParseIntFlag<int>("--context", context_s, 1, 1 << 24);
    append = ParseIntFlag<int>("--append", append_s, 1, 1 << 24);
    turns = ParseIntFlag<int>("--turns", turns_s, 1, 1 << 20);
    const std::vector<int> nc = ParseIntListFlag<int>("--no-cache-turns", no_cache_s, 1, 1 << 20);
    no_cache_turns = std::set<int>(nc.begin(), nc.end());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_session: %s (bench_session --help lists the options)\n", e.what());
    return 2;
  }
  if (model_dir.empty()) {
    ModelConfig c;
    PresetConfig(preset, &c);
    model_dir = (std::filesystem::temp_directory_path() / ("cedar-bench-" + preset)).string();
    if (!std::filesystem::exists(model_dir + "/model.safetensors")) WriteRandomModel(c, 1, model_dir);
  }
  std::shared_ptr<const Model> m(Model::Load(model_dir));
  const ModelConfig& c = m->config();
  const ModelInfo info = ComputeInfo(c);
  std::printf("%s\n", nlohmann::json{{"bench", "session_setup"}, {"model", model_dir}, {"context", context}, {"append", append},
                                     {"turns", turns}, {"ced_cache_bytes_per_token", info.cached_bytes_per_token},
                                     {"decoder_only_cache_bytes_per_token", info.decoder_only_bytes_per_token},
                                     {"ced_boundary_window_bytes", info.boundary_window_bytes}}
                          .dump()
                          .c_str());
  std::mt19937_64 rng(7);
  std::vector<int32_t> ctx = Random(context, rng);
  session::ManagerOptions opt;
  opt.cache_ram_bytes = 4ull << 30;
  auto sm = session::SessionManager::Start(m, opt);
  const std::string sid = sm->CreateSession("bench", {}, 0);
  auto turn = [&](const std::vector<int32_t>& prompt) {
    session::TurnRequest rq;
    rq.session_id = sid;
    rq.prompt = prompt;
    rq.max_tokens = 1;
    rq.decoder = session::DecoderPolicy::kAuto;
    return sm->Submit(std::move(rq)).get();
  };
  // Turn 0 builds the context in both designs (not a measured turn).
  session::TurnResult r0 = turn(ctx);
  SequenceState dec_only(c);
  PrefillOptions full;
  full.mode = PrefillMode::kFull;
  full.chunk_size = 2048;
  Prefill(*m, dec_only, ctx, full);
  ctx.push_back(r0.output.at(0));
  for (int k = 1; k <= turns; ++k) {
    std::vector<int32_t> tool = Random(append, rng);
    const size_t old = ctx.size();
    ctx.insert(ctx.end(), tool.begin(), tool.end());
    session::TurnResult r = turn(ctx);
    // Decoder-only with an exact prefix cache: the new tokens through all L layers.
    auto t0 = std::chrono::steady_clock::now();
    std::span<const int32_t> fresh(ctx.data() + dec_only.pos, ctx.size() - size_t(dec_only.pos));
    PrefillResult d = Prefill(*m, dec_only, fresh, full);
    const double dec_ms = Since(t0);
    nlohmann::json j = {{"bench", "session_turn"}, {"turn", k}, {"context_tokens", ctx.size()}, {"new_tokens", ctx.size() - old},
                        {"cedar_ttft_ms", r.accounting.ttft_ms}, {"cedar_prefill_units", r.accounting.prefill_units},
                        {"cedar_cached_tokens", r.accounting.cached_tokens()},
                        {"decoder_only_cached_ttft_ms", dec_ms}, {"decoder_only_cached_units", d.stats.layer_token_units},
                        {"ratio_ttft_cedar_vs_decoder_only_cached", r.accounting.ttft_ms / dec_ms},
                        {"no_cache_units", int64_t(ctx.size()) * c.n_layers}};
    if (no_cache_turns.count(k)) {
      SequenceState scratch(c);
      auto t1 = std::chrono::steady_clock::now();
      Prefill(*m, scratch, ctx, full);
      const double nc_ms = Since(t1);
      j["no_cache_ttft_ms"] = nc_ms;
      j["speedup_cedar_vs_no_cache"] = nc_ms / r.accounting.ttft_ms;
    }
    std::printf("%s\n", j.dump().c_str());
    std::fflush(stdout);
    ctx.push_back(r.output.at(0));
    // Keep the baseline's context identical (it consumed the tool result; add Cedar's token).
    Prefill(*m, dec_only, std::span<const int32_t>(&ctx.back(), 1), full);
  }
  return 0;
}
