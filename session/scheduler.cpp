// The engine thread's step (issue 14): which turns run, in what order, and how much of each.
//
// serial: every queued turn is admitted at once and prefilled whole (chunks of 2048, back to
//   back), then one batched decode step runs for every decoding turn: one long prompt stops
//   every other session's tokens for the length of its prefill (the loop before issue 14,
//   kept for comparison: --scheduler serial).
// mixed: each step runs the decode row of every decoding turn, then prefill chunks of the
//   admitted turns until the step's budget (--step-tokens rows, and --step-ms of predicted time
//   when set: step_cost.h) is spent, shared among them by
//   --prefill-order (chunk_plan.h: fcfs by default, or round-robin among equal priorities); a
//   step always runs at least one chunk, so a prompt always advances. Decoding
//   sessions therefore emit a token every step, and a step's length is bounded by the budget.
//
// Exactness: a turn's result never depends on the other turns of a step. Its prompt is cut
// into chunks of --max-prefill-chunk from where its state starts, whatever the load (the
// budget only decides how many chunks run in a step). With --batch-prefill off, each chunk runs
// alone through the engine (PrefillEncode), then its decoder phase (PrefillFinish): the same
// products, rows and order as when the turn is alone. With --batch-prefill on (the default,
// batch_prefill.cpp) a step's chunks of different turns run as one engine pass
// (engine/batch_prefill.h: attention per turn), as do the decoder phases of the turns whose
// prompt ends in the step, and the step's decode rows ride in the first pass through the encoder
// layers. Rows of different turns still do not share a product (engine/row_groups.h): above 16
// rows the products run on the prefill GEMM (one FMA chain per output), at 16 or fewer on the
// few-row kernels (MatVec's lane-16 order), so a chunk's rows would change bits if another
// turn's rows took its product over 16; each multi-row chunk gets products of its own and the
// decode rows share them in groups of at most 16, where every row is summed alone. With
// kernels::RowInvariantMatmul() on (every product in the lane-16 order) all rows share one
// product. Tests: tests/scheduler_batch_session_test.cpp, tests/scheduler_session_test.cpp.
// Without riding, decode rows run in groups of at most 16 (tests/scheduler_engine_test.cpp), as
// a separate pass after the prefill; the serial scheduler passes all of them to one DecodeBatch,
// which groups them by 16 the same way.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>
#include <optional>
#include <vector>

#include "engine/row_plan.h"
#include "kernels/ops.h"
#include "session/manager_impl.h"

namespace cedar::session {

namespace {

double Ms(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// Priority first (lower first, as vLLM), then arrival.
bool Before(const ActiveTurn& a, const ActiveTurn& b) {
  return a.request.priority != b.request.priority ? a.request.priority < b.request.priority : a.seq < b.seq;
}

// Decode rows per product: MatmulFewRows' range (kernels/cpu_internal.h kFewRowsMax), where a
// row's result does not depend on the batch.
constexpr size_t kDecodeGroup = 16;

}  // namespace

const char* SchedulerName(SchedulerKind k) { return k == SchedulerKind::kSerial ? "serial" : "mixed"; }

bool ParseScheduler(const std::string& s, SchedulerKind* out) {
  for (SchedulerKind k : {SchedulerKind::kSerial, SchedulerKind::kMixed})
    if (s == SchedulerName(k)) {
      *out = k;
      return true;
    }
  return false;
}

void SessionManager::Impl::Step() {
  CancelRequested();
  if (opt.scheduler.kind == SchedulerKind::kSerial)
    StepSerial();
  else
    StepMixed();
}

void SessionManager::Impl::CancelRequested() {
  for (ActiveTurn& t : waiting)
    if (!t.done && t.CancelRequested()) Cancel(t);
  for (ActiveTurn& t : active) {
    if (t.done || !t.CancelRequested()) continue;
    spdlog::debug("turn {}: the client is gone, cancelled", t.seq);
    if (t.phase == ActiveTurn::Phase::kDecoding)
      Finish(t, "cancelled");
    else
      Cancel(t);
  }
}

// A turn cancelled before its prefill finished: its state (if any) is mid-prefill, with decoder
// windows behind its encoder, so nothing of it goes into the cache; it is simply dropped.
void SessionManager::Impl::Cancel(ActiveTurn& t) {
  if (t.done) return;
  if (t.phase == ActiveTurn::Phase::kDecoding) return Finish(t, "cancelled");
  t.done = true;
  t.result.finish_reason = "cancelled";
  t.state.reset();
  metrics.turns++;
  metrics.turns_cancelled++;
  {
    std::lock_guard<std::mutex> lk(mu);
    if (t.phase == ActiveTurn::Phase::kQueued) queued--;
    if (!t.request.session_id.empty()) busy.erase(Key(t.request.owner, t.request.session_id));
  }
  t.result.accounting.total_ms = Ms(t.submitted, std::chrono::steady_clock::now());
  PublishStats();
  t.promise.set_value(std::move(t.result));
}

bool SessionManager::Impl::Admit(bool all) {
  waiting.sort(Before);  // stable: arrival order among equal priorities
  const SchedulerOptions& so = opt.scheduler;
  while (!waiting.empty()) {
    ActiveTurn& t = waiting.front();
    if (t.done) {
      waiting.pop_front();
      continue;
    }
    if (!all) {
      int prefilling = 0;
      bool in_flight = false;
      uint64_t bytes = 0;
      for (const ActiveTurn& a : active) {
        if (a.done) continue;
        in_flight = true;
        prefilling += a.phase == ActiveTurn::Phase::kPrefilling;
        if (a.state) bytes += a.state->Bytes();
        // A prefilling turn will hold its whole prompt: project the rows it has still to run.
        if (a.phase == ActiveTurn::Phase::kPrefilling)
          bytes += uint64_t(std::max(state_bytes_per_token, 1.0) * double(int64_t(a.request.prompt.size()) - a.encode_next));
      }
      if (prefilling >= so.max_prefilling_turns) return false;
      // Session memory: idle sessions make room first; the turn waits (it is not dropped)
      // while the turns in flight fill the budget. With nothing in flight it always starts.
      if (in_flight) {
        EnforceSessionBudget();
        if (bytes >= SessionRamBudget()) {
          if (!t.waited_for_memory) {
            t.waited_for_memory = true;
            metrics.memory_waits++;
            spdlog::debug("turn {} waits for session memory: {} bytes in flight, budget {}", t.seq, bytes, SessionRamBudget());
          }
          return false;
        }
      }
    }
    active.splice(active.end(), waiting, waiting.begin());
    ActiveTurn& a = active.back();
    {
      std::lock_guard<std::mutex> lk(mu);
      queued--;
    }
    const double wait = Ms(a.submitted, std::chrono::steady_clock::now());
    a.result.accounting.queue_ms = wait;
    a.result.accounting.admission = metrics.turns_admitted;
    metrics.turns_admitted++;
    metrics.queue_wait_ms_total += wait;
    metrics.queue_wait_ms_max = std::max(metrics.queue_wait_ms_max, wait);
    a.phase = ActiveTurn::Phase::kPrefilling;
    spdlog::debug("turn {} admitted (priority {}) after {:.1f} ms in the queue", a.seq, a.request.priority, wait);
    if (all) {
      StartTurn(a);
    } else if (BeginTurn(a) && a.encode_next >= int64_t(a.request.prompt.size())) {
      try {
        EndPrefill(a, std::nullopt);  // an exact repeat: nothing to encode
      } catch (const std::exception& e) {
        Fail(a, ErrorKind::kInternal, e.what());
      }
    }
  }
  return true;
}

void SessionManager::Impl::StepSerial() {
  Admit(true);
  StepAll();
}

void SessionManager::Impl::StepMixed() {
  const auto step_start = std::chrono::steady_clock::now();
  Admit(false);
  const SchedulerOptions& so = opt.scheduler;
  // The decode rows: every decoding turn samples its next token; those that go on decode.
  std::vector<ActiveTurn*> going;
  for (ActiveTurn& t : active)
    if (!t.done && t.phase == ActiveTurn::Phase::kDecoding && Sample(t)) going.push_back(&t);
  // Prefill chunks in priority order until the budget is spent (at least one chunk per step).
  std::vector<ActiveTurn*> pre;
  for (ActiveTurn& t : active)
    if (!t.done && t.phase == ActiveTurn::Phase::kPrefilling) pre.push_back(&t);
  std::stable_sort(pre.begin(), pre.end(), [](const ActiveTurn* a, const ActiveTurn* b) { return Before(*a, *b); });
  metrics.prefilling_turns_max = std::max(metrics.prefilling_turns_max, int64_t(pre.size()));
  // --step-ms: what is left of it after the decode rows' predicted time (step_cost.h).
  const double budget_ms = so.step_ms > 0 ? so.step_ms - step_cost.DecodeMs(int64_t(going.size()))
                                          : std::numeric_limits<double>::infinity();
  const std::vector<TurnChunks> plan = PlanStep(pre, int64_t(so.step_tokens) - int64_t(going.size()), budget_ms);
  if (!plan.empty()) prefill_steps++;
  int64_t rows = 0;
  for (const TurnChunks& p : plan)
    for (int64_t len : p.lens) rows += len;
  const int64_t rode = metrics.decode_rows_in_prefill;
  const bool batched = so.batch_prefill && backend->SupportsBatchedPrefill();
  // A speculating turn prefills on its own (below): its chunks capture its drafter's rows.
  std::vector<TurnChunks> together, solo;
  for (const TurnChunks& p : plan) (batched && !p.t->speculating ? together : solo).push_back(p);
  if (!together.empty()) PrefillBatched(together, &going);  // observes its own parts' cost
  for (const TurnChunks& p : solo) PrefillAlone(p);
  const int64_t decode_rows = metrics.decode_rows_in_prefill - rode + int64_t(going.size());
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t g = 0; g < going.size(); g += kDecodeGroup)
    DecodeRows(std::vector<ActiveTurn*>(going.begin() + g, going.begin() + std::min(going.size(), g + kDecodeGroup)));
  step_cost.ObserveDecode(int64_t(going.size()), Ms(t0, std::chrono::steady_clock::now()));
  if (spdlog::should_log(spdlog::level::debug)) {  // what the step held and what it took
    std::string items;
    for (const TurnChunks& p : plan) {
      fmt::format_to(std::back_inserter(items), " turn {}:", p.t->seq);
      for (int64_t len : p.lens) fmt::format_to(std::back_inserter(items), " {}", len);
      if (p.finish_layers > 0)
        fmt::format_to(std::back_inserter(items), " +{} decoder layers ({} rows){}", p.finish_layers, p.finish_rows, p.finish ? ", end" : "");
      else if (p.finish)
        fmt::format_to(std::back_inserter(items), " +decoder phase ({} rows)", p.finish_rows);
      items += ';';
    }
    spdlog::debug("step: {} decode rows ({} riding), {} prompt rows:{} {:.1f} ms", decode_rows,
                  decode_rows - int64_t(going.size()), rows, items, Ms(step_start, std::chrono::steady_clock::now()));
  }
  if (rows > 0 || decode_rows > 0) {
    metrics.steps++;
    metrics.step_prefill_rows += rows;
    metrics.step_decode_rows += decode_rows;
    metrics.step_decode_rows_max = std::max(metrics.step_decode_rows_max, decode_rows);
  }
}

std::vector<SessionManager::Impl::TurnChunks> SessionManager::Impl::PlanStep(const std::vector<ActiveTurn*>& pre,
                                                                             int64_t budget, double budget_ms) const {
  const ModelConfig& c = model->config();
  std::vector<ChunkDemand> demands;
  const int E = c.n_encoder_layers;
  // A phase row in chunk rows (step_cost.h): the turn's own rate once a part of its phase ran;
  // before that the recent phases' rate, but at least kFirstPartRowCost, because those were
  // mostly short prompts' and a long prompt's phase row costs more (its first part may then run
  // short, never long; the bits do not depend on the parts).
  constexpr double kFirstPartRowCost = 2.0;
  std::vector<std::vector<int64_t>> units_of(pre.size());  // per turn: its phase's rows by layer left
  for (size_t i = 0; i < pre.size(); ++i) {
    const ActiveTurn* t = pre[i];
    const int64_t N = int64_t(t->request.prompt.size());
    // The decoder phase's rows through each decoder layer it has left, in encoder rows (E layers
    // each): what it costs next to a chunk. An estimate for planning only (H_E's first held row
    // taken as 0).
    const std::vector<int64_t> a = DecoderPhaseStarts(c, t->mode, N, t->state->decoder_pos(), 0);
    const bool in_parts = opt.scheduler.decoder_phase_in_parts && backend->SupportsFinishLayers() && !t->speculating;
    const double ratio = t->finish_ms_per_row > 0 ? step_cost.FinishRowCost(t->finish_ms_per_row)
                         : in_parts             ? std::max(kFirstPartRowCost, step_cost.FinishRowCost())
                                                : step_cost.FinishRowCost();
    const double phase_ms_per_row = t->finish_ms_per_row > 0 ? t->finish_ms_per_row : step_cost.FinishMsPerRow();
    int64_t units = 0;
    std::vector<int64_t> layer_rows;
    for (int l = E + t->finish_layers_done; l < c.n_layers; ++l) {
      units += N - a[size_t(l)];
      units_of[i].push_back(N - a[size_t(l)]);
      if (in_parts) layer_rows.push_back(std::max<int64_t>(1, std::llround(double(N - a[size_t(l)]) / double(E) * ratio)));
    }
    const int64_t finish_rows = (units + E - 1) / std::max(1, E);
    int64_t budget_rows = std::max<int64_t>(1, std::llround(double(finish_rows) * ratio));
    if (in_parts) {
      budget_rows = 0;
      for (int64_t r : layer_rows) budget_rows += r;
    }
    demands.push_back({t->encode_next, N, t->request.priority, budget_rows, step_cost.ChunkMsPerRow(),
                       double(finish_rows) * phase_ms_per_row, std::move(layer_rows)});
  }
  const std::vector<StepShare> shares =
      PlanChunks(demands, budget, opt.scheduler.max_prefill_chunk, opt.scheduler.prefill_order, budget_ms, prefill_steps);
  std::vector<TurnChunks> plan;
  for (size_t i = 0; i < pre.size(); ++i) {
    const StepShare& s = shares[i];
    if (s.chunks.empty() && !s.finish && s.finish_layers == 0) continue;
    // ObserveFinish's rows: the encoder rows of the layers planned (all of them when whole).
    int64_t units = 0;
    const size_t layers = s.finish_layers > 0 ? size_t(s.finish_layers) : s.finish ? units_of[i].size() : 0;
    for (size_t k = 0; k < layers; ++k) units += units_of[i][k];
    plan.push_back({pre[i], s.chunks, s.finish, s.finish_layers, (units + E - 1) / std::max(1, E)});
  }
  return plan;
}

void SessionManager::Impl::PrefillAlone(const TurnChunks& p) {
  ActiveTurn& t = *p.t;
  if (t.done) return;
  const std::vector<int32_t>& prompt = t.request.prompt;
  TurnAccounting& a = t.result.accounting;
  try {
    const auto t0 = std::chrono::steady_clock::now();
    int64_t rows = 0;
    for (int64_t len : p.lens) {
      const std::span<const int32_t> chunk(prompt.data() + t.encode_next, size_t(len));
      // Speculation runs on the CPU backend only (CheckSpeculation): its host state.
      SequenceState* host = t.speculating ? backend->MutableHostState(*t.state) : nullptr;
      const StepStats s = host ? cedar::PrefillEncode(*model, *host, chunk, &t.spec_capture) : backend->PrefillEncode(*t.state, chunk);
      a.prefill_units += s.layer_token_units;
      a.layer_token_units += s.layer_token_units;
      t.encode_next += len;
      rows += len;
    }
    const auto t1 = std::chrono::steady_clock::now();
    step_cost.ObserveChunks(rows, Ms(t0, t1));
    step_cost.ObservePureChunks(rows, Ms(t0, t1));  // the decode rows run apart here
    if (p.finish_layers > 0) {  // part of the decoder phase (the same bits as whole)
      Sequence* seq = t.state.get();
      std::vector<std::optional<PrefillResult>> r = backend->PrefillFinishLayers({&seq, 1}, {&t.mode, 1}, {&p.finish_layers, 1});
      const double ms = Ms(t1, std::chrono::steady_clock::now());
      step_cost.ObserveFinish(p.finish_rows, ms);
      if (p.finish_rows > 0) t.finish_ms_per_row = ms / double(p.finish_rows);
      t.finish_layers_done += p.finish_layers;
      if (r[0].has_value() != p.finish) throw std::logic_error("the decoder phase did not end where it was planned to");
      if (r[0])
        EndPrefill(t, std::move(*r[0]));
      else
        metrics.decoder_phase_pauses++;
    } else if (p.finish) {
      SequenceState* host = t.speculating ? backend->MutableHostState(*t.state) : nullptr;
      PrefillResult r = host ? cedar::PrefillFinish(*model, *host, t.mode, &t.spec_capture) : backend->PrefillFinish(*t.state, t.mode);
      step_cost.ObserveFinish(p.finish_rows, Ms(t1, std::chrono::steady_clock::now()));
      EndPrefill(t, std::move(r));
    }
  } catch (const std::exception& e) {
    Fail(t, ErrorKind::kInternal, e.what());
  }
}

// One batched decode of `going` (each turn's last sampled token).
void SessionManager::Impl::DecodeRows(const std::vector<ActiveTurn*>& all) {
  // A speculating turn (--spec-tokens) runs its own verify pass, alone (session/speculation.cpp).
  std::vector<ActiveTurn*> going;
  for (ActiveTurn* t : all) t->speculating ? SpeculateRow(*t) : going.push_back(t);
  if (going.empty()) return;
  std::vector<Sequence*> states;
  std::vector<int32_t> tokens;
  for (ActiveTurn* t : going) {
    states.push_back(t->state.get());
    tokens.push_back(t->result.output.back());
  }
  try {
    std::vector<StepStats> stats;
    auto logits = backend->DecodeBatch(states, tokens, &stats);
    for (size_t i = 0; i < going.size(); ++i) {
      going[i]->logits = std::move(logits[i]);
      going[i]->result.accounting.layer_token_units += stats[i].layer_token_units;
    }
    metrics.decode_batches++;
    metrics.decode_batch_rows += int64_t(going.size());
  } catch (const std::exception& e) {
    for (ActiveTurn* t : going) Fail(*t, ErrorKind::kInternal, e.what());
  }
}

}  // namespace cedar::session
