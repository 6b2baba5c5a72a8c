// Issue 14's second benchmark (not a test; prints JSON lines): the shared Claude Code traces
// replayed with their sub-agents concurrent, against
//   mixed          SessionManager, the mixed step loop with its defaults (chunked prefill inside
//                  decode steps, --batch-prefill on: decode rows riding in the prefill pass)
//   mixed-unbatched  mixed with --batch-prefill off (each chunk, then the decode rows, apart)
//   serial         SessionManager, one turn's whole prefill at a time (the old loop)
//   decoder-only   the same engine run as a decoder-only model with an exact prefix cache: one
//                  live SequenceState per conversation, new tokens through all L layers
//                  (PrefillMode::kFull, as bench_session), scheduled like `serial` (a whole
//                  prefill, then one batched decode step of every decoding turn)
//   mixed-rowinv   mixed with kernels::SetRowInvariantMatmul(true) (bit-exact rows)
//   mixed-batched  mixed-rowinv with --batch-prefill: a step's prefill chunks of different turns,
//                  and their decoder phases, in one engine pass (engine/batch_prefill.h), their
//                  rows sharing products
//
// Workload: each trace file is a conversation (claude-code format, profile/trace.h); each nested
// sub-agent is its own conversation, starting at its recorded time, concurrent with its parent.
// A conversation's turns go in order: turn k is sent at max(its arrival * --time-scale, turn k-1
// done). Its prompt is the previous turn's prompt + that turn's output + new tokens up to the
// trace's `in` (times --token-scale), with token ids drawn from a generator seeded by the
// conversation: so every turn extends the last (the session's live state / the decoder-only
// state is an exact prefix). Output: the trace's `out` times --token-scale, in [1, --max-output].
// A conversation stops at the turn that would pass the model's max_seq_len. Sub-agents share no
// tokens with their parent here (the ids are per conversation).
//
// Per configuration: TTFT (submit -> first token, queueing included) p50/p99/max, and throughput
// over the wall time (first send -> last answer): generated tokens/s, prompt tokens/s (whole
// prompts, cached prefix included) and new prompt tokens/s (past the previous turn's context);
// ratios vs serial of the same run.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <future>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/bench_flags.h"
#include "bench/bench_stats.h"
#include "bench/scheduler_flags.h"
#include "engine/engine.h"
#include "engine/init.h"
#include "engine/sampling.h"
#include "kernels/hw_probe.h"
#include "kernels/ops.h"
#include "profile/trace.h"
#include "session/session_manager.h"

using namespace cedar;
using cedar::bench::Clock;
using cedar::bench::Ms;
using cedar::bench::Pct;

namespace {

struct Args {
  std::string preset = "tiny", model_dir, traces = "../shared/traces/claude-code";
  std::string configs = "mixed,serial,decoder-only,mixed-rowinv,mixed-batched";
  int first = 1;               // first trace file replayed (1-based, in sorted path order)
  int limit = 10;              // trace files (conversations with their sub-agents) replayed
  double horizon = 400;        // recorded seconds: later turns are not replayed (the traces have
                               // idle gaps of hours; this keeps the replay dense)
  int max_turns = 12;          // turns per conversation at most
  double time_scale = 0.01;    // arrival at recorded t * time_scale seconds
  double token_scale = 0.02;   // prompt and output lengths times this
  int max_output = 32;         // output tokens per turn at most
  double max_seconds = 120;    // per configuration: no turn is sent after this (turns in flight finish)
  cedar::bench::SchedulerFlags sched;  // --step-tokens, --max-prefill-chunk, --prefill-order
};

// One turn of a conversation as replayed: when, how long the prompt, how many tokens out.
struct Turn {
  double t = 0;        // scaled arrival, s from the start of the replay
  int64_t in = 0;      // scaled prompt length
  int out = 1;         // scaled output length
};
struct Conversation {
  std::string id;
  std::vector<Turn> turns;
};

std::vector<Conversation> BuildWorkload(const Args& a, int64_t max_seq_len) {
  profile::LoadOptions lo;
  lo.format = profile::TraceFormat::kClaudeCode;
  profile::Trace tr = profile::LoadTraces({a.traces}, lo);
  std::map<std::string, Conversation> by_id;
  std::vector<std::string> order;
  for (const auto& r : tr.requests) {  // arrival order
    // r.conversation is the file's 1-based index in load order.
    if (int(r.conversation) < a.first || int(r.conversation) >= a.first + a.limit || r.recorded_t > a.horizon) continue;
    auto [it, fresh] = by_id.try_emplace(r.session);
    if (fresh) { it->second.id = r.session; order.push_back(r.session); }
    Conversation& c = it->second;
    if (int(c.turns.size()) >= a.max_turns) continue;
    Turn t;
    t.t = r.recorded_t * a.time_scale;
    t.in = std::max<int64_t>(1, int64_t(double(r.input_tokens) * a.token_scale));
    t.out = int(std::clamp<int64_t>(int64_t(double(r.output_tokens) * a.token_scale), 1, a.max_output));
    c.turns.push_back(t);
  }
  // Each turn extends the previous one (prompt + output + new); cut a conversation where that
  // would pass max_seq_len.
  std::vector<Conversation> out;
  for (const auto& id : order) {
    Conversation c = by_id[id];
    int64_t ctx = 0;
    size_t keep = 0;
    for (; keep < c.turns.size(); ++keep) {
      const int64_t in = std::max(c.turns[keep].in, ctx + 1);
      if (in + c.turns[keep].out > max_seq_len) break;
      c.turns[keep].in = in;
      ctx = in + c.turns[keep].out;
    }
    c.turns.resize(keep);
    if (!c.turns.empty()) out.push_back(std::move(c));
  }
  return out;
}

// What one turn measured.
struct Outcome {
  double ttft_ms = -1;
  int64_t prompt = 0, fresh = 0, generated = 0;
  bool ok = false;
  bool first = false;  // the conversation's first turn (its whole prompt is new)
};

// A turn handed to a server: returns the output tokens and fills ttft.
using SubmitFn = std::function<std::vector<int32_t>(size_t conv, std::vector<int32_t> prompt, int max_tokens, Outcome* o)>;

// Runs every conversation on its own thread against `submit`; returns the outcomes and the wall time.
std::vector<Outcome> Replay(const std::vector<Conversation>& w, const Args& a, int vocab, const SubmitFn& submit,
                            double* wall_s) {
  std::mutex mu;
  std::vector<Outcome> all;
  const auto t0 = Clock::now();
  std::atomic<int64_t> last_done_us{0};
  std::vector<std::thread> th;
  for (size_t ci = 0; ci < w.size(); ++ci) {
    th.emplace_back([&, ci] {
      const Conversation& c = w[ci];
      std::mt19937_64 rng(0x5eed0000 + ci);
      std::vector<int32_t> ctx;
      for (const Turn& t : c.turns) {
        std::this_thread::sleep_until(t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(t.t)));
        if (std::chrono::duration<double>(Clock::now() - t0).count() > a.max_seconds) break;
        Outcome o;
        o.first = ctx.empty();
        o.fresh = t.in - int64_t(ctx.size());
        while (int64_t(ctx.size()) < t.in) ctx.push_back(int32_t(rng() % uint64_t(vocab)));
        o.prompt = int64_t(ctx.size());
        const std::vector<int32_t> out = submit(ci, ctx, t.out, &o);
        o.generated = int64_t(out.size());
        ctx.insert(ctx.end(), out.begin(), out.end());
        const int64_t us = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - t0).count();
        int64_t prev = last_done_us.load();
        while (us > prev && !last_done_us.compare_exchange_weak(prev, us)) {}
        std::lock_guard<std::mutex> lk(mu);
        all.push_back(o);
        if (!o.ok) break;
      }
    });
  }
  for (auto& t : th) t.join();
  *wall_s = double(last_done_us.load()) / 1e6;
  return all;
}

// The decoder-only baseline's engine thread: FIFO; a whole prefill (all L layers, from the
// conversation's live state), then one DecodeBatch step over every decoding turn.
class DecoderOnlyServer {
 public:
  DecoderOnlyServer(std::shared_ptr<const Model> m, size_t conversations) : m_(std::move(m)) {
    for (size_t i = 0; i < conversations; ++i) states_.emplace_back(std::make_unique<SequenceState>(m_->config()));
    thread_ = std::thread([this] { Loop(); });
  }
  ~DecoderOnlyServer() {
    { std::lock_guard<std::mutex> lk(mu_); stop_ = true; }
    cv_.notify_all();
    thread_.join();
  }
  std::vector<int32_t> Submit(size_t conv, std::vector<int32_t> prompt, int max_tokens, Outcome* o) {
    auto job = std::make_shared<Job>();
    job->conv = conv;
    job->prompt = std::move(prompt);
    job->max_tokens = max_tokens;
    job->submit = Clock::now();
    auto fut = job->done.get_future();
    { std::lock_guard<std::mutex> lk(mu_); queue_.push_back(job); }
    cv_.notify_all();
    fut.get();
    o->ttft_ms = job->ttft_ms;
    o->ok = true;
    return job->output;
  }

 private:
  struct Job {
    size_t conv = 0;
    std::vector<int32_t> prompt, output;
    int max_tokens = 1;
    Clock::time_point submit;
    double ttft_ms = 0;
    std::promise<void> done;
  };
  void Loop() {
    std::vector<std::shared_ptr<Job>> decoding;
    for (;;) {
      std::shared_ptr<Job> next;
      {
        std::unique_lock<std::mutex> lk(mu_);
        cv_.wait(lk, [&] { return stop_ || !queue_.empty() || !decoding.empty(); });
        if (stop_) return;
        if (!queue_.empty()) { next = queue_.front(); queue_.pop_front(); }
      }
      if (next) {
        SequenceState& st = *states_[next->conv];
        PrefillOptions full;
        full.mode = PrefillMode::kFull;
        full.chunk_size = 2048;
        // The live state holds the previous prompt + output but the last output token (never fed).
        std::span<const int32_t> fresh(next->prompt.data() + st.pos, next->prompt.size() - size_t(st.pos));
        const PrefillResult r = Prefill(*m_, st, fresh, full);
        next->output.push_back(Argmax(r.logits));
        next->ttft_ms = Ms(next->submit, Clock::now());
        if (int(next->output.size()) >= next->max_tokens) next->done.set_value();
        else decoding.push_back(next);
      }
      if (decoding.empty()) continue;
      std::vector<SequenceState*> sts;
      std::vector<int32_t> toks;
      for (auto& j : decoding) { sts.push_back(states_[j->conv].get()); toks.push_back(j->output.back()); }
      const auto logits = DecodeBatch(*m_, sts, toks);
      std::vector<std::shared_ptr<Job>> still;
      for (size_t i = 0; i < decoding.size(); ++i) {
        decoding[i]->output.push_back(Argmax(logits[i]));
        if (int(decoding[i]->output.size()) >= decoding[i]->max_tokens) decoding[i]->done.set_value();
        else still.push_back(decoding[i]);
      }
      decoding.swap(still);
    }
  }
  std::shared_ptr<const Model> m_;
  std::vector<std::unique_ptr<SequenceState>> states_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> queue_;
  bool stop_ = false;
  std::thread thread_;
};

nlohmann::json Summarize(const std::string& name, const std::vector<Outcome>& v, double wall_s) {
  std::vector<double> ttft, first, later;
  int64_t prompt = 0, fresh = 0, gen = 0, failed = 0;
  for (const auto& o : v) {
    if (!o.ok) { ++failed; continue; }
    ttft.push_back(o.ttft_ms);
    (o.first ? first : later).push_back(o.ttft_ms);
    prompt += o.prompt; fresh += o.fresh; gen += o.generated;
  }
  const double w = std::max(wall_s, 1e-9);
  return {{"bench", "trace_replay"}, {"config", name}, {"turns", ttft.size()}, {"failed", failed}, {"wall_s", wall_s},
          {"ttft_p50_ms", Pct(ttft, 50)}, {"ttft_p99_ms", Pct(ttft, 99)}, {"ttft_max_ms", Pct(ttft, 100)},
          // First turns (whole prompt new, mostly the opening burst) apart from the later,
          // incremental turns (the session's live state covers all but the new tokens).
          {"ttft_first_turns_p50_ms", Pct(first, 50)}, {"ttft_first_turns_p99_ms", Pct(first, 99)},
          {"ttft_later_turns_p50_ms", Pct(later, 50)}, {"ttft_later_turns_p99_ms", Pct(later, 99)},
          {"prompt_tokens", prompt}, {"new_prompt_tokens", fresh}, {"generated_tokens", gen},
          {"generated_tok_s", double(gen) / w}, {"prompt_tok_s", double(prompt) / w}, {"new_prompt_tok_s", double(fresh) / w}};
}

}  // namespace

int main(int argc, char** argv) {
  kernels::KeepLargeAllocations();
  Args a;
  // Flags as every bench's (bench/bench_flags.h): --help prints them and exits, a bad value is
  // one line naming the flag.
  namespace po = boost::program_options;
  auto desc = cedar::bench::Options(
      "bench_trace_replay: the shared Claude Code traces replayed with their sub-agents concurrent, per scheduler "
      "configuration: TTFT p50/p99 and throughput (JSON lines)");
  desc.add_options()(
      "preset", po::value(&a.preset)->default_value(a.preset), "model preset (random weights, written once to a temp dir)")(
      "model", po::value(&a.model_dir), "model directory (instead of --preset)")(
      "traces", po::value(&a.traces)->default_value(a.traces), "directory of claude-code trace files")(
      "configs", po::value(&a.configs)->default_value(a.configs),
      "configurations, comma-separated: serial | mixed | decoder-only | mixed-rowinv | mixed-batched")(
      "first", cedar::cli::IntOption("--first", &a.first, 1, 1 << 20), "first trace file replayed (1-based, sorted path order)")(
      "limit", cedar::cli::IntOption("--limit", &a.limit, 1, 1 << 20), "trace files replayed (conversations with their sub-agents)")(
      "horizon", cedar::cli::RealOption("--horizon", &a.horizon, 0.0, 1e9), "recorded seconds: later turns are not replayed")(
      "max-turns", cedar::cli::IntOption("--max-turns", &a.max_turns, 1, 1 << 20), "turns per conversation at most")(
      "time-scale", cedar::cli::RealOption("--time-scale", &a.time_scale, 0.0, 1e6), "arrival at recorded t times this (s)")(
      "token-scale", cedar::cli::RealOption("--token-scale", &a.token_scale, 0.0, 1e3, /*lo_open=*/true),
      "prompt and output lengths times this")(
      "max-output", cedar::cli::IntOption("--max-output", &a.max_output, 1, 1 << 20), "output tokens per turn at most")(
      "max-seconds", cedar::cli::RealOption("--max-seconds", &a.max_seconds, 0.0, 1e7, /*lo_open=*/true),
      "per configuration: no turn is sent after this (turns in flight finish)");
  a.sched.Add(desc);
  if (const int rc = cedar::bench::ParseFlags("bench_trace_replay", desc, argc, argv); rc >= 0) return rc;
  if (const int rc = a.sched.Check("bench_trace_replay"); rc >= 0) return rc;
  const std::set<std::string> known = {"serial", "mixed", "decoder-only", "mixed-unbatched", "mixed-rowinv", "mixed-batched"};
  for (size_t p = 0; p <= a.configs.size();) {
    const size_t q = std::min(a.configs.find(',', p), a.configs.size());
    const std::string item = a.configs.substr(p, q - p);
    if (!item.empty() && !known.count(item))
      return cedar::bench::FlagError("bench_trace_replay",
                                     "--configs: expected serial, mixed, decoder-only, mixed-unbatched, mixed-rowinv or mixed-batched, found '" + item + "'");
    p = q + 1;
  }
  if (a.model_dir.empty()) {
    ModelConfig c;
    PresetConfig(a.preset, &c);
    a.model_dir = (std::filesystem::temp_directory_path() / ("cedar-bench-" + a.preset)).string();
    if (!std::filesystem::exists(a.model_dir + "/model.safetensors")) WriteRandomModel(c, 1, a.model_dir);
  }
  std::shared_ptr<const Model> m(Model::Load(a.model_dir));
  const int vocab = m->config().vocab_size;
  std::vector<Conversation> w;
  try {
    w = BuildWorkload(a, m->config().max_seq_len);
  } catch (const std::exception& e) {  // a missing or unreadable trace path
    std::fprintf(stderr, "bench_trace_replay: cannot read the traces at %s: %s\n", a.traces.c_str(), e.what());
    return 1;
  }
  if (w.empty()) {
    std::fprintf(stderr, "bench_trace_replay: no turn to replay in %s (files %d..%d, horizon %g s): expected claude-code "
                 "traces there\n", a.traces.c_str(), a.first, a.first + a.limit - 1, a.horizon);
    return 1;
  }
  int64_t turns = 0, subagents = 0;
  for (const auto& c : w) { turns += int64_t(c.turns.size()); subagents += c.id.find('/') != std::string::npos; }
  std::printf("%s\n", nlohmann::json{{"bench", "trace_replay_setup"}, {"model", a.model_dir}, {"traces", a.traces},
                                     {"conversations", w.size()}, {"subagents", subagents}, {"turns", turns},
                                     {"first", a.first}, {"limit", a.limit}, {"horizon_s", a.horizon},
                                     {"max_turns", a.max_turns}, {"time_scale", a.time_scale}, {"token_scale", a.token_scale},
                                     {"max_output", a.max_output}, {"max_seconds", a.max_seconds},
                                     {"cpus", std::thread::hardware_concurrency()}}
                          .dump()
                          .c_str());
  std::fflush(stdout);
  std::vector<nlohmann::json> rows;
  for (const char* name : {"serial", "mixed", "decoder-only", "mixed-unbatched", "mixed-rowinv", "mixed-batched"}) {
    // "mixed" must not match inside "mixed-rowinv": compare comma-separated items.
    bool want = false;
    for (size_t p = 0; p <= a.configs.size();) {
      const size_t q = std::min(a.configs.find(',', p), a.configs.size());
      if (a.configs.substr(p, q - p) == name) want = true;
      p = q + 1;
    }
    if (!want) continue;
    const std::string n = name;
    double wall = 0;
    std::vector<Outcome> out;
    nlohmann::json sched;  // the session manager's scheduler counters (SessionManager configs)
    kernels::SetRowInvariantMatmul(n == "mixed-rowinv" || n == "mixed-batched");
    if (n == "decoder-only") {
      DecoderOnlyServer srv(m, w.size());
      out = Replay(w, a, vocab, [&](size_t c, std::vector<int32_t> p, int mt, Outcome* o) { return srv.Submit(c, std::move(p), mt, o); },
                   &wall);
    } else {
      session::ManagerOptions o;
      o.cache_ram_bytes = 4ull << 30;
      o.scheduler.kind = n == "serial" ? session::SchedulerKind::kSerial : session::SchedulerKind::kMixed;
      o.scheduler.batch_prefill = n == "mixed" || n == "mixed-batched";  // mixed-rowinv, mixed-unbatched: off
      a.sched.Apply(&o.scheduler);
      auto sm = session::SessionManager::Start(m, o);
      std::vector<std::string> sids;
      for (size_t c = 0; c < w.size(); ++c) sids.push_back(sm->CreateSession("conv" + std::to_string(c), {}, 0));
      out = Replay(w, a, vocab,
                   [&](size_t c, std::vector<int32_t> p, int mt, Outcome* oc) {
                     session::TurnRequest rq;
                     rq.session_id = sids[c];
                     rq.prompt = std::move(p);
                     rq.max_tokens = mt;
                     const session::TurnResult r = sm->Submit(std::move(rq)).get();
                     oc->ok = r.error_kind == session::ErrorKind::kNone;
                     if (!oc->ok) std::fprintf(stderr, "%s: conversation %zu: %s\n", name, c, r.error.c_str());
                     oc->ttft_ms = r.accounting.ttft_ms;
                     return r.output;
                   },
                   &wall);
      const session::EngineMetrics em = sm->Metrics();
      sched = {{"steps", em.steps}, {"prefill_batches", em.prefill_batches},
               {"prefill_batch_turns_max", em.prefill_batch_turns_max}, {"decode_rows_in_prefill", em.decode_rows_in_prefill}};
    }
    kernels::SetRowInvariantMatmul(false);
    nlohmann::json j = Summarize(n, out, wall);
    if (!sched.is_null()) j["scheduler"] = sched;
    if (!rows.empty() && rows.front()["config"] == "serial" && n != "serial") {
      const auto& s = rows.front();
      auto ratio = [](double x, double y) { return cedar::bench::Ratio(x, y); };
      j["vs_serial"] = {{"ttft_p50", ratio(j["ttft_p50_ms"], s["ttft_p50_ms"])},
                        {"ttft_p99", ratio(j["ttft_p99_ms"], s["ttft_p99_ms"])},
                        {"generated_tok_s", ratio(j["generated_tok_s"], s["generated_tok_s"])},
                        {"prompt_tok_s", ratio(j["prompt_tok_s"], s["prompt_tok_s"])}};
    }
    std::printf("%s\n", j.dump().c_str());
    std::fflush(stdout);
    rows.push_back(j);
  }
  return 0;
}
