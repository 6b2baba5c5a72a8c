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
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "bench/bench_flags.h"
#include "engine/engine.h"
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
  namespace po = boost::program_options;
  auto desc = bench::Options(
      "bench_session: a session's turns over a long context (prefill, live hits, cache restores) as JSON lines");
  std::vector<int> nc(no_cache_turns.begin(), no_cache_turns.end());
  desc.add_options()("context", cli::IntOption("--context", &context, 1, 1 << 24), "tokens of the first turn's prompt")(
      "append", cli::IntOption("--append", &append, 1, 1 << 24), "tokens each later turn adds")(
      "turns", cli::IntOption("--turns", &turns, 1, 1 << 20), "turns")(
      "preset", po::value(&preset)->default_value(preset), "model preset (random weights, written once to a temp dir)")(
      "model", po::value(&model_dir), "model directory (instead of --preset)")(
      "no-cache-turns", bench::IntListOption("--no-cache-turns", &nc, 1, 1 << 20),
      "turns also run without the cache, for comparison (comma-separated)");
  if (const int rc = bench::ParseFlags("bench_session", desc, argc, argv); rc >= 0) return rc;
  no_cache_turns = std::set<int>(nc.begin(), nc.end());
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
