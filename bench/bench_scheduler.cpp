// Issue 14's benchmark (not a test; prints JSON lines): 8 sessions decoding while a 9th
// submits a long fresh prompt, for several scheduler configurations in the same run:
//   mixed          the mixed step loop (each turn's prefill chunks run alone)
//   mixed-rowinv   mixed with kernels::SetRowInvariantMatmul(true) (bit-exact rows, slower products)
//   mixed-batched  mixed-rowinv with --batch-prefill: one step's chunks of different turns in one
//                  pass, the decode rows riding in it through the encoder layers
//   mixed-batched-sep  the same with the decode rows in a pass of their own (decode_in_prefill_pass off)
//   mixed-riding   the defaults: batched prefill, decode rows riding, each turn in products of its own
//   mixed-riding-parts  the same with decoder phases in parts (decoder_phase_in_parts on)
//   serial         one turn's whole prefill at a time (the loop before issue 14)
//
// Per scheduler: (1) the long prompt's TTFT alone (a fresh manager, nothing else running);
// (2) the mixed load: `--sessions` agents each run turns back to back, an agent's next turn
// appending its output and a 32-token tool result (so its prefill is the new rows only), each
// turn decoding a seeded length in [decode/2, 3·decode/2] (agents drift out of step, as real
// ones are). The agents' first turns all start together (a burst of first prompts, not the
// steady state), so the undisturbed window starts once every agent has finished its first
// turn; the long prompt (fresh tokens: no cache hit) is submitted once every agent has finished
// `--warmup-turns` turns. Inter-token gaps (within a turn, on the engine thread's clock at
// on_token) are split by when they end: undisturbed (before the long submit), during its
// prefill (submit -> its first token), after. The agents' own turns' TTFT is split the same way
// by when they were submitted (what a sub-agent's tool result waits while the long prompt
// prefills). The agents stop once the long turn is done and each has finished one more turn.
// Targets (issue 14): ITL p99 during <= 2x the undisturbed p99, and the long TTFT under load
// <= 1.25x alone.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "bench/bench_flags.h"
#include "bench/bench_stats.h"
#include "bench/scheduler_flags.h"
#include "engine/init.h"
#include "kernels/hw_probe.h"
#include "kernels/ops.h"
#include "session/session_manager.h"

using namespace cedar;
using cedar::bench::Clock;
using cedar::bench::Ms;
using cedar::bench::Pct;

namespace {

std::vector<int32_t> Random(int n, std::mt19937_64& rng, int vocab) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (auto& x : v) x = int32_t(rng() % uint64_t(vocab));
  return v;
}

struct Args {
  std::string preset = "small", model_dir, schedulers = "mixed,serial";
  int sessions = 8, decode = 128, prompt = 256, long_prompt = 16384, warmup_turns = 2;
  cedar::bench::SchedulerFlags sched;  // --step-tokens, --max-prefill-chunk, --prefill-order
  std::string gaps_file;           // "" = none; else the during-window gaps are appended there
};

// A configuration of the list above.
struct Config {
  const char* name;
  session::SchedulerKind kind;
  bool row_invariant;  // kernels::SetRowInvariantMatmul for the configuration's runs
  bool batch_prefill;  // SchedulerOptions::batch_prefill
  bool ride;           // SchedulerOptions::decode_in_prefill_pass
  bool phase_parts = false;  // SchedulerOptions::decoder_phase_in_parts
};
constexpr Config kConfigs[] = {{"mixed", session::SchedulerKind::kMixed, false, false, false},
                               {"mixed-rowinv", session::SchedulerKind::kMixed, true, false, false},
                               {"mixed-batched", session::SchedulerKind::kMixed, true, true, true},
                               {"mixed-batched-sep", session::SchedulerKind::kMixed, true, true, false},
                               {"mixed-riding", session::SchedulerKind::kMixed, false, true, true},
                               {"mixed-riding-parts", session::SchedulerKind::kMixed, false, true, true, true},
                               {"serial", session::SchedulerKind::kSerial, false, false, false}};

session::ManagerOptions Options(const Args& a, const Config& cf) {
  session::ManagerOptions o;
  o.cache_ram_bytes = 4ull << 30;
  o.scheduler.kind = cf.kind;
  o.scheduler.batch_prefill = cf.batch_prefill;
  o.scheduler.decode_in_prefill_pass = cf.ride;
  o.scheduler.decoder_phase_in_parts = cf.phase_parts;
  a.sched.Apply(&o.scheduler);
  return o;
}

// The long prompt alone: its TTFT on an idle manager.
double LongAlone(const std::shared_ptr<const Model>& m, const Args& a, const Config& cf, uint64_t seed) {
  auto sm = session::SessionManager::Start(m, Options(a, cf));
  std::mt19937_64 rng(seed);
  session::TurnRequest rq;
  rq.prompt = Random(a.long_prompt, rng, m->config().vocab_size);
  rq.max_tokens = 1;
  return sm->Submit(std::move(rq)).get().accounting.ttft_ms;
}

void MixedLoad(const std::shared_ptr<const Model>& m, const Args& a, const Config& cf, uint64_t seed,
               double alone_ttft) {
  auto sm = session::SessionManager::Start(m, Options(a, cf));
  const int vocab = m->config().vocab_size;
  std::mt19937_64 rng(seed);
  std::mutex mu;  // guards the fields below (on_token runs on the engine thread)
  std::vector<double> before, during, after;             // inter-token gaps
  std::vector<std::pair<Clock::time_point, double>> during_at;  // during's gaps with when they ended
  std::vector<double> ttft_before, ttft_during, ttft_after;  // the agents' turns (after their first)
  std::vector<int> turns_done(size_t(a.sessions), 0);
  Clock::time_point steady = Clock::time_point::max();  // every agent has finished its first turn
  Clock::time_point long_submit = Clock::time_point::max(), long_first = Clock::time_point::max();
  std::atomic<bool> long_done{false};
  std::vector<std::thread> agents;
  for (int s = 0; s < a.sessions; ++s) {
    std::vector<int32_t> ctx = Random(a.prompt, rng, vocab);
    agents.emplace_back([&, s, ctx]() mutable {
      const std::string sid = sm->CreateSession("agent" + std::to_string(s), {}, 0);
      std::mt19937_64 tool_rng(1000 + uint64_t(s));
      bool one_more = false;
      for (int turn = 0;; ++turn) {
        auto last = std::make_shared<Clock::time_point>();
        auto first = std::make_shared<bool>(true);
        session::TurnRequest rq;
        rq.session_id = sid;
        rq.prompt = ctx;
        rq.max_tokens = std::max(2, a.decode / 2 + int(tool_rng() % uint64_t(a.decode + 1)));
        const Clock::time_point submitted = Clock::now();
        rq.on_token = [&, last, first, turn, submitted](int32_t) {
          const auto now = Clock::now();
          std::lock_guard<std::mutex> lk(mu);
          if (*first) {
            if (turn > 0)
              (submitted < long_submit ? ttft_before : submitted <= long_first ? ttft_during : ttft_after)
                  .push_back(Ms(submitted, now));
          } else if (now > steady) {
            const double gap = Ms(*last, now);
            (now < long_submit ? before : now <= long_first ? during : after).push_back(gap);
            if (now >= long_submit && now <= long_first) during_at.emplace_back(now, gap);
          }
          *first = false;
          *last = now;
          return true;
        };
        const session::TurnResult r = sm->Submit(std::move(rq)).get();
        if (r.error_kind != session::ErrorKind::kNone) {
          std::fprintf(stderr, "agent %d: %s\n", s, r.error.c_str());
          return;
        }
        {
          std::lock_guard<std::mutex> lk(mu);
          turns_done[size_t(s)]++;
          if (steady == Clock::time_point::max() &&
              std::all_of(turns_done.begin(), turns_done.end(), [](int n) { return n >= 1; }))
            steady = Clock::now();
        }
        if (one_more) return;
        if (long_done.load()) one_more = true;
        ctx.insert(ctx.end(), r.output.begin(), r.output.end());
        const auto tool = Random(32, tool_rng, vocab);
        ctx.insert(ctx.end(), tool.begin(), tool.end());
      }
    });
  }
  // Wait until every agent has finished `warmup_turns` turns, then submit the long prompt.
  for (;;) {
    {
      std::lock_guard<std::mutex> lk(mu);
      if (std::all_of(turns_done.begin(), turns_done.end(), [&](int n) { return n >= a.warmup_turns; })) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  session::TurnRequest rq;
  rq.prompt = Random(a.long_prompt, rng, vocab);
  rq.max_tokens = 1;
  rq.on_token = [&](int32_t) {
    std::lock_guard<std::mutex> lk(mu);
    long_first = Clock::now();
    return true;
  };
  {
    std::lock_guard<std::mutex> lk(mu);
    long_submit = Clock::now();
  }
  const session::TurnResult lr = sm->Submit(std::move(rq)).get();
  long_done = true;
  for (auto& t : agents) t.join();
  const session::EngineMetrics em = sm->Metrics();
  std::lock_guard<std::mutex> lk(mu);
  auto phase = [&](const std::vector<double>& v) {
    return nlohmann::json{{"n", v.size()}, {"p50_ms", Pct(v, 50)}, {"p99_ms", Pct(v, 99)}, {"max_ms", Pct(v, 100)}};
  };
  const double p99_before = Pct(before, 99), p99_during = Pct(during, 99);
  if (!a.gaps_file.empty()) {  // where in the long prefill the gaps fall (offset since submit)
    if (FILE* f = std::fopen(a.gaps_file.c_str(), "a")) {
      for (const auto& [t, gap] : during_at) std::fprintf(f, "%s %.1f %.1f\n", cf.name, Ms(long_submit, t), gap);
      std::fclose(f);
    }
  }
  std::printf("%s\n", nlohmann::json{{"bench", "scheduler_mixed_load"},
                                     {"scheduler", session::SchedulerName(sm->scheduler())},
                                     {"config", cf.name},
                                     {"sessions", a.sessions},
                                     {"decode_tokens_per_turn", a.decode},
                                     {"long_prompt", a.long_prompt},
                                     {"step_tokens", Options(a, cf).scheduler.step_tokens},
                                     {"max_prefill_chunk", Options(a, cf).scheduler.max_prefill_chunk},
                                     {"step_ms", Options(a, cf).scheduler.step_ms},
                                     {"itl_before", phase(before)},
                                     {"itl_during", phase(during)},
                                     {"itl_after", phase(after)},
                                     {"agent_ttft_before", phase(ttft_before)},
                                     {"agent_ttft_during", phase(ttft_during)},
                                     {"agent_ttft_after", phase(ttft_after)},
                                     {"prefill_order", session::PrefillOrderName(Options(a, cf).scheduler.prefill_order)},
                                     {"long_ttft_ms", lr.accounting.ttft_ms},
                                     {"long_ttft_alone_ms", alone_ttft},
                                     {"ttft_ratio", alone_ttft > 0 ? lr.accounting.ttft_ms / alone_ttft : -1},
                                     {"p99_during_over_before", p99_before > 0 ? p99_during / p99_before : -1},
                                     {"steps", em.steps},
                                     {"decode_batches", em.decode_batches},
                                     {"prefill_batches", em.prefill_batches},
                                     {"prefill_batch_turns_max", em.prefill_batch_turns_max},
                                     {"decode_rows_in_prefill", em.decode_rows_in_prefill},
                                     {"decoder_phase_pauses", em.decoder_phase_pauses}}
                          .dump()
                          .c_str());
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  if (const char* lvl = std::getenv("CEDAR_LOG")) spdlog::set_level(spdlog::level::from_str(lvl));  // as `cedar`
  kernels::KeepLargeAllocations();
  Args a;
  // Flags as every bench's (bench/bench_flags.h): --help prints them and exits, a bad value is
  // one line naming the flag.
  namespace po = boost::program_options;
  auto desc = cedar::bench::Options(
      "bench_scheduler: sessions decoding while one more submits a long fresh prompt: inter-token latency before, "
      "during and after its prefill, and its TTFT, per scheduler configuration (JSON lines)");
  desc.add_options()(
      "preset", po::value(&a.preset)->default_value(a.preset), "model preset (random weights, written once to a temp dir)")(
      "model", po::value(&a.model_dir), "model directory (instead of --preset)")(
      "schedulers", po::value(&a.schedulers)->default_value(a.schedulers),
      "configurations, comma-separated: mixed | mixed-rowinv (row-invariant matmul) | mixed-batched (mixed-rowinv with "
      "--batch-prefill, decode rows riding in the prefill pass) | mixed-batched-sep (decode rows apart) | mixed-riding-parts "
      "(the defaults with decoder phases in parts) | serial")(
      "sessions", cedar::cli::IntOption("--sessions", &a.sessions, 1, 1024), "sessions decoding")(
      "decode", cedar::cli::IntOption("--decode", &a.decode, 2, 1 << 20),
      "tokens each agent's turn decodes on average (seeded, uniform in [decode/2, 3*decode/2])")(
      "prompt", cedar::cli::IntOption("--prompt", &a.prompt, 1, 1 << 24), "tokens of each session's first prompt")(
      "long", cedar::cli::IntOption("--long", &a.long_prompt, 1, 1 << 24), "tokens of the long fresh prompt")(
      "warmup-turns", cedar::cli::IntOption("--warmup-turns", &a.warmup_turns, 1, 1 << 20),
      "turns every agent finishes before the long prompt arrives (the undisturbed window starts after their first)")(
      "gaps-file", po::value(&a.gaps_file),
      "append each inter-token gap of the long prefill's window as 'config offset_ms gap_ms' (offset from its submit)");
  a.sched.Add(desc);
  if (const int rc = cedar::bench::ParseFlags("bench_scheduler", desc, argc, argv); rc >= 0) return rc;
  if (const int rc = a.sched.Check("bench_scheduler"); rc >= 0) return rc;
  for (size_t p = 0; p <= a.schedulers.size();) {
    const size_t q = std::min(a.schedulers.find(',', p), a.schedulers.size());
    const std::string item = a.schedulers.substr(p, q - p);
    if (!item.empty() && std::none_of(std::begin(kConfigs), std::end(kConfigs), [&](const Config& c) { return item == c.name; }))
      return cedar::bench::FlagError("bench_scheduler", "--schedulers: expected mixed, mixed-rowinv, mixed-batched, mixed-batched-sep, mixed-riding, mixed-riding-parts or serial, found '" +
                                                            item + "'");
    p = q + 1;
  }
  if (a.model_dir.empty()) {
    ModelConfig c;
    PresetConfig(a.preset, &c);
    a.model_dir = (std::filesystem::temp_directory_path() / ("cedar-bench-" + a.preset)).string();
    if (!std::filesystem::exists(a.model_dir + "/model.safetensors")) WriteRandomModel(c, 1, a.model_dir);
  }
  std::shared_ptr<const Model> m(Model::Load(a.model_dir));
  std::printf("%s\n", nlohmann::json{{"bench", "scheduler_setup"}, {"model", a.model_dir}, {"cpus", std::thread::hardware_concurrency()}}
                          .dump()
                          .c_str());
  const uint64_t seed = 1;  // the same prompts for every configuration (each runs on a fresh manager: no cache hit)
  for (const Config& cf : kConfigs) {
    bool want = false;  // comma-separated items ("mixed" must not match inside "mixed-rowinv")
    for (size_t p = 0; p <= a.schedulers.size();) {
      const size_t q = std::min(a.schedulers.find(',', p), a.schedulers.size());
      if (a.schedulers.substr(p, q - p) == cf.name) want = true;
      p = q + 1;
    }
    if (!want) continue;
    kernels::SetRowInvariantMatmul(cf.row_invariant);
    const double alone = LongAlone(m, a, cf, 100 + seed);
    std::printf("%s\n", nlohmann::json{{"bench", "scheduler_long_alone"}, {"scheduler", session::SchedulerName(cf.kind)},
                                       {"config", cf.name}, {"long_prompt", a.long_prompt}, {"ttft_ms", alone}}
                            .dump()
                            .c_str());
    std::fflush(stdout);
    MixedLoad(m, a, cf, 200 + seed, alone);
    kernels::SetRowInvariantMatmul(false);
  }
  return 0;
}
