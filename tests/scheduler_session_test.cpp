// The session manager's scheduler (issue 14): exactness under mixing, priority and FCFS, the
// cap on prefilling turns, waiting for memory, cancellation within one step, the queue limit.
// No timing: every ordering is made deterministic by submitting from inside a running turn's
// on_token callback (it runs on the engine thread, so nothing is admitted while it runs).
#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <random>

#include "session/session_manager.h"
#include "tests/test_models.h"

using namespace cedar;
using namespace cedar::session;
using cedar::test::RandomTokens;

namespace {

std::shared_ptr<const Model> Tiny() { return cedar::test::SharedPresetModel("tiny"); }

ManagerOptions Mixed(int step_tokens = 48, int chunk = 16) {
  ManagerOptions o;
  o.scheduler.kind = SchedulerKind::kMixed;
  o.scheduler.step_tokens = step_tokens;
  o.scheduler.max_prefill_chunk = chunk;
  return o;
}

// Sessionless turns with prompts that share no page, so no turn can hit another's cache entry.
struct Job {
  std::vector<int32_t> prompt;
  int max_tokens;
  DecoderPolicy decoder;
  SamplingParams sampling;
};
std::vector<Job> Jobs() {
  std::vector<Job> jobs;
  // 20 turns: more than one group of 16 decode rows in a step.
  const int lens[] = {3, 17, 40, 95, 150, 260, 9, 33, 64, 21};
  for (int i = 0; i < 20; ++i) {
    Job j;
    j.prompt = RandomTokens(lens[i % 10] + i, 512, 7000 + uint64_t(i));
    j.prompt[0] = int32_t(i);  // distinct first tokens: no shared prefix at all
    j.max_tokens = 40 + 3 * (i % 8);
    j.decoder = i % 3 == 0 ? DecoderPolicy::kExact : i % 3 == 1 ? DecoderPolicy::kBounded : DecoderPolicy::kAuto;
    j.sampling.temperature = i % 2 ? 0.8f : 0.0f;
    j.sampling.seed = 11 + uint64_t(i);
    jobs.push_back(j);
  }
  return jobs;
}
TurnRequest RequestOf(const Job& j) {
  TurnRequest rq;
  rq.prompt = j.prompt;
  rq.max_tokens = j.max_tokens;
  rq.decoder = j.decoder;
  rq.sampling = j.sampling;
  rq.return_prompt_logits = true;
  return rq;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// A turn whose callback runs `hook(k)` on its k-th token (engine thread), to act between steps.
std::future<TurnResult> Driver(SessionManager& sm, int tokens, std::function<void(int)> hook) {
  TurnRequest rq;
  rq.prompt = RandomTokens(12, 512, 99);
  rq.prompt[0] = 500;
  rq.max_tokens = tokens;
  auto k = std::make_shared<int>(0);
  rq.on_token = [hook, k](int32_t) {
    hook((*k)++);
    return true;
  };
  return sm.Submit(std::move(rq));
}

}  // namespace

TEST_CASE("mixed scheduler: turns one at a time, all at once and shuffled give the same bits") {
  const auto jobs = Jobs();
  // One at a time: each turn alone in the engine.
  std::vector<TurnResult> alone;
  {
    auto sm = SessionManager::Start(Tiny(), Mixed());
    for (const Job& j : jobs) alone.push_back(sm->Submit(RequestOf(j)).get());
  }
  for (const TurnResult& r : alone) REQUIRE(r.error == "");
  std::vector<size_t> order(jobs.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  int64_t steps_rows_only = 0;  // run 0's steps (run 3 is the same but for --step-ms)
  for (int run = 0; run < 4; ++run) {
    CAPTURE(run);
    if (run > 0) std::shuffle(order.begin(), order.end(), std::mt19937(uint32_t(run)));
    // A small budget and chunks so prefills span steps and interleave with decoding turns.
    ManagerOptions o = Mixed(run == 2 ? 20 : 96, run == 2 ? 8 : 16);
    o.scheduler.max_prefilling_turns = run == 1 ? 2 : 20;
    o.scheduler.prefill_order = run == 1 ? PrefillOrder::kFcfs : PrefillOrder::kRoundRobin;
    // Run 3 plans by time as well (--step-ms): a budget smaller than most items, so how many
    // chunks a step holds follows the measured rates (the machine's load), and must not matter.
    if (run == 3) o.scheduler.step_ms = 0.5;
    // Runs 2 and 3 run decoder phases in parts, a few layers a step (must not matter either).
    o.scheduler.decoder_phase_in_parts = run >= 2;
    auto sm = SessionManager::Start(Tiny(), o);
    std::vector<std::future<TurnResult>> futs(jobs.size());
    // Submitted from one callback: all arrive in the same step.
    auto driver = Driver(*sm, 2, [&](int k) {
      if (k == 0)
        for (size_t i : order) futs[i] = sm->Submit(RequestOf(jobs[i]));
    });
    REQUIRE(driver.get().error == "");
    (void)run;
    for (size_t i = 0; i < jobs.size(); ++i) {
      CAPTURE(i);
      const TurnResult r = futs[i].get();
      REQUIRE(r.error == "");
      CHECK(r.output == alone[i].output);
      CHECK(SameBits(r.prompt_logits, alone[i].prompt_logits));
      CHECK(r.logits_hash == alone[i].logits_hash);
      CHECK(r.logits_hash != 0);
    }
    if (run == 0) steps_rows_only = sm->Metrics().steps;
    if (run == 3) CHECK(sm->Metrics().steps > steps_rows_only);  // the ms budget cut steps short
    CHECK(sm->Metrics().prefilling_turns_max >= 2);                 // prefills overlapped
    if (run < 2) CHECK(sm->Metrics().step_decode_rows_max > 16);  // steps decoded two groups of rows
    if (run == 2) CHECK(sm->Metrics().decoder_phase_pauses > 0);  // decoder phases ran over several steps
  }
}

TEST_CASE("mixed and serial schedulers agree on greedy outputs (float tolerance between their chunkings)") {
  const auto jobs = Jobs();
  ManagerOptions serial;
  serial.scheduler.kind = SchedulerKind::kSerial;
  auto a = SessionManager::Start(Tiny(), serial);
  auto b = SessionManager::Start(Tiny(), Mixed());
  CHECK(a->scheduler() == SchedulerKind::kSerial);
  CHECK(b->scheduler() == SchedulerKind::kMixed);
  for (const Job& j : jobs) {
    TurnRequest rq = RequestOf(j);
    rq.sampling.temperature = 0;
    const TurnResult x = a->Submit(rq).get(), y = b->Submit(rq).get();
    CHECK(x.output == y.output);
    CHECK(cedar::test::RelError(x.prompt_logits, y.prompt_logits) <= 2e-5);
  }
}

TEST_CASE("admission: lower priority values first, first come first served among equals") {
  ManagerOptions o = Mixed();
  o.scheduler.max_prefilling_turns = 1;
  auto sm = SessionManager::Start(Tiny(), o);
  const int prios[] = {5, 0, -1, 0, 5, -1};
  std::vector<std::future<TurnResult>> futs;
  auto driver = Driver(*sm, 2, [&](int k) {
    if (k != 0) return;
    for (int i = 0; i < 6; ++i) {
      TurnRequest rq;
      rq.prompt = RandomTokens(30, 512, 300 + uint64_t(i));
      rq.max_tokens = 2;
      rq.priority = prios[i];
      futs.push_back(sm->Submit(std::move(rq)));
    }
  });
  driver.get();
  std::vector<int64_t> adm;
  for (auto& f : futs) {
    const TurnResult r = f.get();
    REQUIRE(r.error == "");
    adm.push_back(r.accounting.admission);
  }
  // Expected order: -1 (#2), -1 (#5), 0 (#1), 0 (#3), 5 (#0), 5 (#4).
  CHECK(adm[2] < adm[5]);
  CHECK(adm[5] < adm[1]);
  CHECK(adm[1] < adm[3]);
  CHECK(adm[3] < adm[0]);
  CHECK(adm[0] < adm[4]);
  const EngineMetrics m = sm->Metrics();
  CHECK(m.turns_admitted == 7);
  CHECK(m.queued_turns == 0);
  CHECK(m.prefilling_turns_max == 1);  // the cap held
  CHECK(m.queue_wait_ms_max >= 0);
}

TEST_CASE("admission: the cap on prefilling turns is reached and never passed") {
  ManagerOptions o = Mixed(64, 16);
  o.scheduler.max_prefilling_turns = 2;
  auto sm = SessionManager::Start(Tiny(), o);
  std::vector<std::future<TurnResult>> futs;
  auto driver = Driver(*sm, 2, [&](int k) {
    if (k != 0) return;
    for (int i = 0; i < 5; ++i) {
      TurnRequest rq;
      rq.prompt = RandomTokens(200, 512, 400 + uint64_t(i));
      rq.max_tokens = 1;
      futs.push_back(sm->Submit(std::move(rq)));
    }
  });
  driver.get();
  for (auto& f : futs) CHECK(f.get().error == "");
  CHECK(sm->Metrics().prefilling_turns_max == 2);
}

TEST_CASE("a turn waiting for session memory waits and then runs, exactly") {
  const auto jobs = Jobs();
  std::vector<TurnResult> alone;
  {
    auto sm = SessionManager::Start(Tiny(), Mixed());
    for (size_t i = 0; i < 4; ++i) alone.push_back(sm->Submit(RequestOf(jobs[i])).get());
  }
  ManagerOptions o = Mixed();
  o.session_ram_bytes = 1;  // any turn in flight fills it: the others wait their turn
  auto sm = SessionManager::Start(Tiny(), o);
  std::vector<std::future<TurnResult>> futs;
  auto driver = Driver(*sm, 2, [&](int k) {
    if (k == 0)
      for (size_t i = 0; i < 4; ++i) futs.push_back(sm->Submit(RequestOf(jobs[i])));
  });
  driver.get();
  for (size_t i = 0; i < 4; ++i) {
    const TurnResult r = futs[i].get();
    REQUIRE(r.error == "");
    CHECK(r.output == alone[i].output);
    CHECK(r.logits_hash == alone[i].logits_hash);
  }
  CHECK(sm->Metrics().memory_waits >= 1);
  CHECK(sm->Metrics().prefilling_turns_max == 1);
}

TEST_CASE("a cancelled turn ends within one step, in the queue or mid-prefill, and frees its slot") {
  ManagerOptions o = Mixed(16, 8);
  o.scheduler.max_prefilling_turns = 1;
  auto sm = SessionManager::Start(Tiny(), o);
  const std::string sid = sm->CreateSession("s", {}, 0);
  auto flag_long = std::make_shared<std::atomic<bool>>(false);
  auto flag_queued = std::make_shared<std::atomic<bool>>(false);
  std::future<TurnResult> long_turn, queued_turn;
  bool ended_within_one_step = false, queued_ended = false;
  auto driver = Driver(*sm, 8, [&](int k) {
    if (k == 0) {
      TurnRequest rq;  // 400 rows in chunks of 8: dozens of steps
      rq.session_id = sid;
      rq.prompt = RandomTokens(400, 512, 5);
      rq.max_tokens = 4;
      rq.cancelled = flag_long;
      long_turn = sm->Submit(std::move(rq));
      TurnRequest q;  // waits behind it (one prefilling turn at most)
      q.prompt = RandomTokens(50, 512, 6);
      q.max_tokens = 4;
      q.cancelled = flag_queued;
      queued_turn = sm->Submit(std::move(q));
    } else if (k == 2) {
      flag_long->store(true);  // the client is gone mid-prefill
      flag_queued->store(true);
    } else if (k == 3) {
      // One step later both have ended.
      ended_within_one_step = long_turn.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
      queued_ended = queued_turn.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
    }
  });
  REQUIRE(driver.get().error == "");
  CHECK(ended_within_one_step);
  CHECK(queued_ended);
  const TurnResult a = long_turn.get(), b = queued_turn.get();
  CHECK(a.finish_reason == "cancelled");
  CHECK(a.output.empty());
  CHECK(b.finish_reason == "cancelled");
  // The slot and the session are free again: the next turn on the session runs.
  TurnRequest next;
  next.session_id = sid;
  next.prompt = RandomTokens(20, 512, 8);
  next.max_tokens = 2;
  CHECK(sm->Submit(std::move(next)).get().error == "");
  const EngineMetrics m = sm->Metrics();
  CHECK(m.turns_cancelled == 2);
  CHECK(m.queued_turns == 0);
  CHECK(sm->CheckCacheIntegrity() == "");
}

TEST_CASE("past --max-queued-turns a turn is refused at once with kQueueFull") {
  ManagerOptions o = Mixed();
  o.scheduler.max_queued_turns = 2;
  auto sm = SessionManager::Start(Tiny(), o);
  std::vector<std::future<TurnResult>> futs;
  int64_t queued_seen = -1;
  auto driver = Driver(*sm, 2, [&](int k) {
    if (k != 0) return;
    for (int i = 0; i < 3; ++i) {
      TurnRequest rq;
      rq.prompt = RandomTokens(10, 512, 600 + uint64_t(i));
      rq.max_tokens = 1;
      futs.push_back(sm->Submit(std::move(rq)));
    }
    queued_seen = sm->Metrics().queued_turns;
  });
  driver.get();
  CHECK(queued_seen == 2);
  const TurnResult third = futs[2].get();
  CHECK(third.error_kind == ErrorKind::kQueueFull);
  CHECK(third.error.find("--max-queued-turns 2") != std::string::npos);
  CHECK(futs[0].get().error == "");
  CHECK(futs[1].get().error == "");
  CHECK(sm->Metrics().turns_queue_full == 1);
}

TEST_CASE("scheduler names parse and print") {
  SchedulerKind k;
  CHECK(ParseScheduler("serial", &k));
  CHECK(k == SchedulerKind::kSerial);
  CHECK(ParseScheduler("mixed", &k));
  CHECK(k == SchedulerKind::kMixed);
  CHECK_FALSE(ParseScheduler("fifo", &k));
  CHECK(std::string(SchedulerName(SchedulerKind::kMixed)) == "mixed");
}

TEST_CASE("round-robin prefill: a short prompt shares the steps of a long one; fcfs makes it wait") {
  // A long prompt (596 rows: 38 chunks of 16, at most 3 a step, so at least 13 steps) and a
  // short one (9 rows) arrive in the same step, the long one first; steps of 48 rows.
  // Round-robin opens every other step with the short prompt (the rotation, chunk_plan.h), so
  // its chunk and its decoder phase (one item by default; 4 layers if run in parts) have run by
  // the 10th step whatever the measured step costs price them at (the default --step-ms is on),
  // and its first token comes
  // long before the long prompt's; fcfs gives the long prompt every chunk that fits until it is
  // done, so its first token comes first.
  for (PrefillOrder order : {PrefillOrder::kRoundRobin, PrefillOrder::kFcfs}) {
    CAPTURE(PrefillOrderName(order));
    ManagerOptions o = Mixed(48, 16);
    o.scheduler.prefill_order = order;
    auto sm = SessionManager::Start(Tiny(), o);
    std::mutex mu;
    std::vector<int> first_tokens;  // which turn (0 long, 1 short) showed its first token, in order
    std::vector<std::future<TurnResult>> futs;
    auto driver = Driver(*sm, 2, [&](int k) {
      if (k != 0) return;
      for (int i = 0; i < 2; ++i) {
        TurnRequest rq;
        rq.prompt = RandomTokens(i == 0 ? 596 : 9, 512, 900 + uint64_t(i));
        rq.prompt[0] = int32_t(10 + i);
        rq.max_tokens = 2;
        auto seen = std::make_shared<bool>(false);
        rq.on_token = [&, i, seen](int32_t) {
          if (!*seen) {
            std::lock_guard<std::mutex> lk(mu);
            first_tokens.push_back(i);
          }
          *seen = true;
          return true;
        };
        futs.push_back(sm->Submit(std::move(rq)));
      }
    });
    REQUIRE(driver.get().error == "");
    std::vector<TurnResult> res;
    for (auto& f : futs) res.push_back(f.get());
    for (const TurnResult& r : res) REQUIRE(r.error == "");
    REQUIRE(first_tokens.size() == 2);
    CHECK(first_tokens[0] == (order == PrefillOrder::kRoundRobin ? 1 : 0));
    // The order changes when the tokens come, never what they are.
    auto alone = SessionManager::Start(Tiny(), Mixed(48, 16));
    for (int i = 0; i < 2; ++i) {
      TurnRequest rq;
      rq.prompt = RandomTokens(i == 0 ? 596 : 9, 512, 900 + uint64_t(i));
      rq.prompt[0] = int32_t(10 + i);
      rq.max_tokens = 2;
      const TurnResult r = alone->Submit(std::move(rq)).get();
      CHECK(r.output == res[size_t(i)].output);
      CHECK(r.logits_hash == res[size_t(i)].logits_hash);
    }
  }
}

TEST_CASE("prefill orders parse and print") {
  PrefillOrder o = PrefillOrder::kFcfs;
  CHECK(ParsePrefillOrder("round-robin", &o));
  CHECK(o == PrefillOrder::kRoundRobin);
  CHECK(ParsePrefillOrder("fcfs", &o));
  CHECK(o == PrefillOrder::kFcfs);
  CHECK_FALSE(ParsePrefillOrder("lifo", &o));
  CHECK(std::string(PrefillOrderName(PrefillOrder::kRoundRobin)) == "round-robin");
}
