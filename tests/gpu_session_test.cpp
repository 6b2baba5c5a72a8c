// The session layer on the CUDA backend (label gpu; exits 77 without a device): the same turns
// through a SessionManager on the CPU backend and one on the CUDA backend with F32 device
// weights give the same prompt logits (F32 tolerance, as tests/gpu_model_test.cpp) and the same
// greedy tokens, and take the same path (live hit, snapshot restore, staircase restore, what
// the cache held). The CPU path itself is checked against computing from scratch by
// tests/session_test.cpp; this test carries that to the device through the Backend seam.
#include <doctest/doctest.h>

#include "session/session_manager.h"
#include "tests/test_models.h"

using namespace cedar;
using namespace cedar::session;
using cedar::test::RandomTokens;
using cedar::test::RelError;

namespace {

constexpr double kF32Tol = 2e-5;  // tests/gpu_model_test.cpp's kF32Tol

std::shared_ptr<const Model> Tiny() { return cedar::test::SharedPresetModel("tiny"); }

std::unique_ptr<SessionManager> Start(const std::string& device) {
  ManagerOptions o;
  o.backend.device = device;
  o.backend.f32_weights = true;  // parity: the CPU engine is F32
  return SessionManager::Start(Tiny(), o);
}

TurnResult Turn(SessionManager& sm, const std::string& sid, const std::vector<int32_t>& prompt, int max_tokens,
                RestorePolicy restore = RestorePolicy::kStaircase) {
  TurnRequest rq;
  rq.session_id = sid;
  rq.prompt = prompt;
  rq.max_tokens = max_tokens;
  rq.decoder = DecoderPolicy::kExact;
  rq.restore = restore;
  rq.return_prompt_logits = true;
  return sm.Submit(std::move(rq)).get();
}

// The CUDA turn equals the CPU turn: logits, tokens and the path through the cache.
void ExpectSameTurn(const TurnResult& cpu, const TurnResult& gpu) {
  REQUIRE(cpu.error == "");
  REQUIRE(gpu.error == "");
  const double err = RelError(gpu.prompt_logits, cpu.prompt_logits);
  INFO("prompt logits relative error " << err);
  CHECK(err <= kF32Tol);
  CHECK(gpu.output == cpu.output);
  const TurnAccounting &a = cpu.accounting, &b = gpu.accounting;
  CHECK(b.matched_live == a.matched_live);
  CHECK(b.matched_ram == a.matched_ram);
  CHECK(b.snapshot_hit == a.snapshot_hit);
  CHECK(b.exact_restore_rows == a.exact_restore_rows);
  CHECK(b.encoder_replay_rows == a.encoder_replay_rows);
  CHECK(b.tokens_encoded == a.tokens_encoded);
  CHECK(b.layer_token_units == a.layer_token_units);
}

std::vector<int32_t> Concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

}  // namespace

TEST_CASE("cuda F32 sessions: live turns, a snapshot restore and a staircase restore equal the CPU backend's") {
  auto cpu = Start("cpu");
  auto gpu = Start("cuda");
  CHECK(cpu->device() == "cpu");
  CHECK(gpu->device() == "cuda");
  const ModelConfig& c = Tiny()->config();
  auto both = [&](const std::string& sid, const std::vector<int32_t>& prompt, int max_tokens) {
    TurnResult a = Turn(*cpu, sid, prompt, max_tokens), b = Turn(*gpu, sid, prompt, max_tokens);
    ExpectSameTurn(a, b);
    return a;
  };
  const std::string sid = "s";
  REQUIRE(cpu->CreateSession(sid, {}, 0) == sid);
  REQUIRE(gpu->CreateSession(sid, {}, 0) == sid);

  // Turns 1-3 of one session: fresh, then twice from the live device state (a tool result
  // shorter than W, then one longer: the decoder runs exactly from the live windows, then the
  // staircase of the new rows).
  std::vector<int32_t> ctx = RandomTokens(37, c.vocab_size, 1);
  TurnResult r = both(sid, ctx, 4);
  for (int n : {5, 13}) {
    CAPTURE(n);
    ctx = Concat(Concat(ctx, r.output), RandomTokens(n, c.vocab_size, uint64_t(100 + n)));
    r = both(sid, ctx, 4);
    CHECK(r.accounting.matched_live > 0);
  }

  // Another session continues that conversation: its prefix comes from the cache with the
  // snapshot the last turn's end stored (uploaded to the device, layer E's window rebuilt).
  ctx = Concat(Concat(ctx, r.output), RandomTokens(6, c.vocab_size, 7));
  r = both("", ctx, 3);
  CHECK(r.accounting.snapshot_hit);
  CHECK(r.accounting.matched_ram >= 64);

  // The staircase: cache 130 tokens (snapshots at 128 and at the end), then ask for the first
  // 96 and 30 new ones: the match ends at 96 with no snapshot there, so the encoder windows are
  // rebuilt from the pools by ExactEncoderRestore, whose floor (96 - R) is past the start, so
  // rows with truncated windows are dropped on the device too.
  const std::vector<int32_t> base = RandomTokens(130, c.vocab_size, 31);
  both("", base, 1);
  const std::vector<int32_t> q = Concat(std::vector<int32_t>(base.begin(), base.begin() + 96), RandomTokens(30, c.vocab_size, 32));
  r = both("", q, 3);
  CHECK(r.accounting.matched_ram == 96);
  CHECK(!r.accounting.snapshot_hit);
  const int64_t rows = ExactRestoreRows(c, 96, c.StaircaseLength() + c.window - 1, 16);
  CHECK(rows < 96);
  CHECK(r.accounting.exact_restore_rows == rows);
  CHECK(gpu->Metrics().exact_restores == 1);

  // The restored turn was exact, so it was cached again (126 + 2 tokens: pages up to 128): a
  // follow-up hits past 96 on both (after a replay it would stop at 96).
  r = both("", Concat(q, RandomTokens(20, c.vocab_size, 33)), 2);
  CHECK(r.accounting.matched_ram >= 96 + 16);
}
