// The mixed scheduler with --batch-prefill (issue 14, session/batch_prefill.cpp): the prefill
// chunks of different turns in one engine pass leave every turn's output, prompt logits and
// logits hash bit for bit what the turn gets alone (chunked, unbatched), whether the turns are
// submitted one at a time, all at once, or in shuffled orders; with row-invariant matmul (rows
// of different turns share products) and without it (each turn's rows keep products of their
// own: engine/row_groups.h), chunks of 16 rows (the few-row kernels) and of 40 (the GEMM). No timing: the turns are
// submitted from a running turn's on_token callback (engine thread), so they arrive together.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <random>

#include "kernels/ops.h"
#include "session/session_manager.h"
#include "tests/test_models.h"

using namespace cedar;
using namespace cedar::session;
using cedar::test::RandomTokens;

namespace {

struct RowInvariant {
  explicit RowInvariant(bool on) { kernels::SetRowInvariantMatmul(on); }
  ~RowInvariant() { kernels::SetRowInvariantMatmul(false); }
};

ManagerOptions Mixed(bool batch, int step_tokens, int chunk, int prefilling = 20, bool ride = true) {
  ManagerOptions o;
  o.scheduler.decode_in_prefill_pass = ride;
  o.scheduler.kind = SchedulerKind::kMixed;
  o.scheduler.step_tokens = step_tokens;
  o.scheduler.max_prefill_chunk = chunk;
  o.scheduler.max_prefilling_turns = prefilling;
  o.scheduler.batch_prefill = batch;
  return o;
}

// Sessionless turns whose prompts share no page: no turn can hit another's cache entry.
std::vector<TurnRequest> Requests() {
  std::vector<TurnRequest> out;
  const int lens[] = {3, 17, 40, 95, 150, 260, 9, 33, 64, 21, 120, 75};
  for (int i = 0; i < 12; ++i) {
    TurnRequest rq;
    rq.prompt = RandomTokens(lens[i] + i, 512, 8100 + uint64_t(i));
    rq.prompt[0] = int32_t(i);
    rq.max_tokens = 12 + 3 * (i % 5);
    rq.decoder = i % 3 == 0 ? DecoderPolicy::kExact : i % 3 == 1 ? DecoderPolicy::kBounded : DecoderPolicy::kAuto;
    rq.sampling.temperature = i % 2 ? 0.8f : 0.0f;
    rq.sampling.seed = 31 + uint64_t(i);
    rq.return_prompt_logits = true;
    out.push_back(std::move(rq));
  }
  return out;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

void ExpectSame(const std::vector<TurnResult>& got, const std::vector<TurnResult>& want) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    CAPTURE(i);
    REQUIRE(got[i].error == "");
    CHECK(got[i].output == want[i].output);
    CHECK(SameBits(got[i].prompt_logits, want[i].prompt_logits));
    CHECK(got[i].logits_hash == want[i].logits_hash);
    CHECK(got[i].logits_hash != 0);
  }
}

}  // namespace

TEST_CASE("batched prefill: one at a time, all at once and shuffled give the bits of unbatched chunked prefill") {
  for (const bool rowinv : {true, false})
    for (const int chunk : {16, 40}) {
      CAPTURE(rowinv);
      CAPTURE(chunk);
      RowInvariant on(rowinv);
      auto model = cedar::test::SharedPresetModel("tiny");
      const auto reqs = Requests();
      // The reference: chunked prefill, unbatched, each turn alone.
      std::vector<TurnResult> alone;
      {
        auto sm = SessionManager::Start(model, Mixed(false, 96, chunk));
        for (const TurnRequest& rq : reqs) alone.push_back(sm->Submit(TurnRequest(rq)).get());
        CHECK(sm->Metrics().prefill_batches == 0);
      }
      // Batched, one at a time (a pass of one turn).
      {
        auto sm = SessionManager::Start(model, Mixed(true, 96, chunk));
        std::vector<TurnResult> got;
        for (const TurnRequest& rq : reqs) got.push_back(sm->Submit(TurnRequest(rq)).get());
        ExpectSame(got, alone);
      }
      std::vector<size_t> order(reqs.size());
      for (size_t i = 0; i < order.size(); ++i) order[i] = i;
      for (int run = 0; run < 4; ++run) {
        CAPTURE(run);
        if (run > 0) std::shuffle(order.begin(), order.end(), std::mt19937(uint32_t(run)));
        // Budgets that give several chunks per turn per step (run 0), one (run 2), a cap of 3 turns
        // (run 1); decode rows in a pass of their own (run 3).
        ManagerOptions mo = Mixed(true, run == 2 ? chunk + 8 : 200, chunk, run == 1 ? 3 : 20, run != 3);
        mo.scheduler.decoder_phase_in_parts = run == 2;  // decoder phases a few layers a step: must not matter
        auto sm = SessionManager::Start(model, mo);
        std::vector<std::future<TurnResult>> futs(reqs.size());
        TurnRequest driver;
        driver.prompt = RandomTokens(12, 512, 99);
        driver.prompt[0] = 500;
        driver.max_tokens = 2;
        auto first = std::make_shared<bool>(true);
        driver.on_token = [&, first](int32_t) {
          if (*first)
            for (size_t i : order) futs[i] = sm->Submit(TurnRequest(reqs[i]));
          *first = false;
          return true;
        };
        REQUIRE(sm->Submit(std::move(driver)).get().error == "");
        std::vector<TurnResult> got;
        for (auto& f : futs) got.push_back(f.get());
        ExpectSame(got, alone);
        const EngineMetrics mt = sm->Metrics();
        CHECK(mt.prefill_batches > 0);
        CHECK(mt.prefill_batch_turns_max >= 2);  // chunks of different turns did share a pass
        if (run == 1) CHECK(mt.prefill_batch_turns_max <= 3);
        if (run == 2) CHECK(mt.decoder_phase_pauses > 0);  // decoder phases ran over several steps
        if (run == 3) CHECK(mt.decode_rows_in_prefill == 0);
        else CHECK(mt.decode_rows_in_prefill > 0);  // decode rows did ride in prefill passes
      }
    }
}

