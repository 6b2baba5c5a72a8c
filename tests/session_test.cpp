// The session manager through the prefix cache must agree with computing every turn from
// scratch: the live path, a restart (disk tier), two sessions sharing a pinned prompt; and the
// approximate path (Encoder SWA Bounded Replay) must stay close.
#include <doctest/doctest.h>

#include <filesystem>

#include "session/session_manager.h"
#include "tests/test_models.h"

using namespace cedar;
using namespace cedar::session;
using cedar::test::KlDivergence;
using cedar::test::RandomTokens;
using cedar::test::RelError;

namespace {

std::shared_ptr<const Model> Tiny() { return cedar::test::SharedPresetModel("tiny"); }

// Logits after the prompt and the greedy continuation, computed from scratch in exact mode.
struct Reference {
  std::vector<float> logits;
  std::vector<int32_t> output;
};
Reference FromScratch(const Model& m, const std::vector<int32_t>& prompt, int max_tokens) {
  SequenceState st(m.config());
  PrefillOptions o;
  o.mode = PrefillMode::kExact;
  Reference r;
  r.logits = Prefill(m, st, prompt, o).logits;
  std::vector<float> lg = r.logits;
  for (int i = 0; i < max_tokens; ++i) {
    int32_t t = Argmax(lg);
    r.output.push_back(t);
    if (i + 1 < max_tokens) lg = DecodeStep(m, st, t);
  }
  return r;
}

TurnResult Turn(SessionManager& sm, const std::string& sid, const std::vector<int32_t>& prompt, int max_tokens,
                DecoderPolicy pol = DecoderPolicy::kExact, RestorePolicy restore = RestorePolicy::kReplay) {
  TurnRequest rq;
  rq.session_id = sid;
  rq.prompt = prompt;
  rq.max_tokens = max_tokens;
  rq.decoder = pol;
  rq.restore = restore;
  rq.return_prompt_logits = true;
  return sm.Submit(std::move(rq)).get();
}

void ExpectMatchesScratch(const Model& m, const std::vector<int32_t>& prompt, const TurnResult& r, int max_tokens) {
  REQUIRE(r.error == "");
  Reference ref = FromScratch(m, prompt, max_tokens);
  CHECK(RelError(r.prompt_logits, ref.logits) <= 2e-5);
  CHECK(r.output == ref.output);
}

// Appends a previous output and a "tool result" to a context.
std::vector<int32_t> Extend(std::vector<int32_t> ctx, const std::vector<int32_t>& out, int n, uint64_t seed) {
  ctx.insert(ctx.end(), out.begin(), out.end());
  auto tool = RandomTokens(n, 256, seed);
  ctx.insert(ctx.end(), tool.begin(), tool.end());
  return ctx;
}

}  // namespace

TEST_CASE_TEMPLATE("a multi-turn session through the cache equals computing every turn from scratch (exact policies)", V, CEDAR_MODEL_VARIANTS) {
  auto m = cedar::test::SharedPresetModel(V::kName);
  auto sm = SessionManager::Start(m, {});
  const std::string sid = sm->CreateSession("", {}, 0);
  std::vector<int32_t> ctx = RandomTokens(37, 256, 1);
  for (int turn = 0; turn < 6; ++turn) {
    CAPTURE(turn);
    TurnResult r = Turn(*sm, sid, ctx, 5);
    ExpectMatchesScratch(*m, ctx, r, 5);
    if (turn > 0) CHECK(r.accounting.matched_live > 0);  // the live state served the old context
    CHECK(r.accounting.tokens_encoded == int64_t(ctx.size()) - r.accounting.cached_tokens());
    // Tool results shorter and longer than W (8): both must stay exact.
    ctx = Extend(ctx, r.output, turn % 2 ? 5 : 23, 100 + turn);
  }
  auto info = sm->GetSession(sid);
  REQUIRE(info);
  CHECK(info->turns == 6);
  CHECK(info->live);
}

TEST_CASE_TEMPLATE("a restarted manager restores a session's prefix from the disk tier exactly", V, CEDAR_MODEL_VARIANTS) {
  auto m = cedar::test::SharedPresetModel(V::kName);
  const std::string dir = cedar::test::TempDir("cache");
  ManagerOptions opt;
  opt.cache_dir = dir;
  std::vector<int32_t> ctx = RandomTokens(70, 256, 2);
  std::vector<int32_t> out;
  {
    auto sm = SessionManager::Start(m, opt);
    TurnResult r = Turn(*sm, "", ctx, 6);
    out = r.output;
  }  // shutdown flushes the disk tier
  auto sm = SessionManager::Start(m, opt);
  std::vector<int32_t> next = Extend(ctx, out, 11, 7);
  TurnResult r = Turn(*sm, "", next, 4);
  ExpectMatchesScratch(*m, next, r, 4);
  CHECK(r.accounting.matched_disk >= 64);
  CHECK(r.accounting.snapshot_hit);
  CHECK(sm->Metrics().hit_tokens_disk >= 64);
}

TEST_CASE_TEMPLATE("two sessions sharing a pinned system prompt both restore it exactly", V, CEDAR_MODEL_VARIANTS) {
  auto m = cedar::test::SharedPresetModel(V::kName);
  auto sm = SessionManager::Start(m, {});
  std::vector<int32_t> system = RandomTokens(50, 256, 3);
  const std::string a = sm->CreateSession("a", system, 60), b = sm->CreateSession("b", system, 60);
  for (const std::string& sid : {a, b}) {
    std::vector<int32_t> prompt = system;
    auto user = RandomTokens(9, 256, sid == "a" ? 4 : 5);
    prompt.insert(prompt.end(), user.begin(), user.end());
    TurnResult r = Turn(*sm, sid, prompt, 3);
    ExpectMatchesScratch(*m, prompt, r, 3);
    CHECK(r.accounting.matched_ram == 48);  // the pinned prompt's whole pages
    CHECK(r.accounting.snapshot_hit);
  }
}

TEST_CASE_TEMPLATE("without a snapshot the restore uses Encoder SWA Bounded Replay: close, and closer than a truncated prompt", V, CEDAR_MODEL_VARIANTS) {
  auto m = cedar::test::SharedPresetModel(V::kName);
  auto sm = SessionManager::Start(m, {});
  const ModelConfig& c = m->config();
  int replays = 0;
  double kl_sum = 0, kl_trunc_sum = 0;
  for (int k = 0; k < 6; ++k) {
    // Cache a long prompt (snapshots at its end only), then ask with a prompt that shares its
    // first 64 tokens: the match ends at 64 with no snapshot there.
    std::vector<int32_t> base = RandomTokens(100, 256, 10 + k);
    Turn(*sm, "", base, 1, DecoderPolicy::kBounded);
    std::vector<int32_t> q(base.begin(), base.begin() + 64);
    auto tail = RandomTokens(3, 256, 20 + k);
    q.insert(q.end(), tail.begin(), tail.end());
    TurnResult r = Turn(*sm, "", q, 1, DecoderPolicy::kBounded, RestorePolicy::kReplay);
    REQUIRE(r.error == "");
    CHECK(r.accounting.encoder_replay_rows == c.window);
    CHECK(r.accounting.matched_ram == 64);
    replays += r.accounting.encoder_replay_rows > 0;
    // Exact reference: the same request from scratch, bounded decoder like the turn.
    SequenceState st(c), trunc(c);
    PrefillOptions o;
    o.mode = PrefillMode::kBounded;
    auto ref = Prefill(*m, st, q, o).logits;
    std::vector<int32_t> last(q.end() - c.window, q.end());
    auto tr = Prefill(*m, trunc, last, o).logits;
    const double kl = KlDivergence(ref, r.prompt_logits), kt = KlDivergence(ref, tr);
    MESSAGE("replayed restore KL " << kl << " vs last-W-only prompt KL " << kt);
    CHECK(kl < kt);
    kl_sum += kl;
    kl_trunc_sum += kt;
  }
  CHECK(replays == 6);
  CHECK(sm->Metrics().encoder_replays == 6);
  CHECK(kl_sum / 6 < 1e-2);
  // The same request with RestorePolicy::kRecompute is exact.
  std::vector<int32_t> base = RandomTokens(100, 256, 10);
  std::vector<int32_t> q(base.begin(), base.begin() + 64);
  auto tail = RandomTokens(3, 256, 20);
  q.insert(q.end(), tail.begin(), tail.end());
  TurnResult r = Turn(*sm, "", q, 2, DecoderPolicy::kExact, RestorePolicy::kRecompute);
  ExpectMatchesScratch(*m, q, r, 2);
  CHECK(r.accounting.encoder_replay_rows == 0);
}

TEST_CASE_TEMPLATE("without a snapshot the staircase restore is exact, costs ExactRestoreRows, and the turn is cached again", V, CEDAR_MODEL_VARIANTS) {
  auto m = cedar::test::SharedPresetModel(V::kName);
  auto sm = SessionManager::Start(m, {});
  const ModelConfig& c = m->config();
  // Cache 300 tokens (snapshots at 288 and after the output), then ask for its first 256 plus
  // 30 new ones: the match ends at 256, where no snapshot was stored.
  std::vector<int32_t> base = RandomTokens(300, 256, 31);
  Turn(*sm, "", base, 1, DecoderPolicy::kExact, RestorePolicy::kStaircase);
  std::vector<int32_t> q(base.begin(), base.begin() + 256);
  auto tail = RandomTokens(30, 256, 32);
  q.insert(q.end(), tail.begin(), tail.end());
  TurnResult r = Turn(*sm, "", q, 2, DecoderPolicy::kExact, RestorePolicy::kStaircase);
  REQUIRE(r.error == "");
  CHECK(r.accounting.matched_ram == 256);
  CHECK(r.accounting.encoder_replay_rows == 0);
  const int64_t rows = ExactRestoreRows(c, 256, c.StaircaseLength() + c.window - 1, 16);
  CHECK(rows < 256);
  CHECK(r.accounting.exact_restore_rows == rows);
  ExpectMatchesScratch(*m, q, r, 2);  // exact, unlike a replay
  CHECK(sm->Metrics().exact_restores == 1);
  CHECK(sm->Metrics().encoder_replays == 0);
  // Its state being exact, the turn cached its 286 + 2 tokens: a longer follow-up hits past 256
  // (a replayed turn caches nothing past its replay point).
  std::vector<int32_t> q2 = q;
  auto more = RandomTokens(40, 256, 33);
  q2.insert(q2.end(), more.begin(), more.end());
  TurnResult r2 = Turn(*sm, "", q2, 1, DecoderPolicy::kExact, RestorePolicy::kStaircase);
  CHECK(r2.accounting.matched_ram >= 256 + 16);
  ExpectMatchesScratch(*m, q2, r2, 1);
}

TEST_CASE("bad requests get clear errors and lose nothing") {
  auto m = Tiny();
  auto sm = SessionManager::Start(m, {});
  CHECK(Turn(*sm, "nope", {1, 2, 3}, 2).error_kind == ErrorKind::kSessionNotFound);
  CHECK(Turn(*sm, "", {}, 2).error_kind == ErrorKind::kInvalidRequest);
  CHECK(Turn(*sm, "", {1, 9999}, 2).error_kind == ErrorKind::kInvalidRequest);
  std::vector<int32_t> huge(size_t(m->config().max_seq_len), 1);
  CHECK(Turn(*sm, "", huge, 2).error_kind == ErrorKind::kPromptTooLong);
  // A second turn on a busy session is refused at once (409 in the server).
  const std::string sid = sm->CreateSession("busy", {}, 0);
  std::promise<void> release;
  std::shared_future<void> gate = release.get_future().share();
  TurnRequest slow;
  slow.session_id = sid;
  slow.prompt = RandomTokens(20, 256, 9);
  slow.max_tokens = 50;
  slow.on_token = [gate](int32_t) {
    gate.wait();
    return true;
  };
  auto first = sm->Submit(std::move(slow));
  TurnResult second = Turn(*sm, sid, {1, 2, 3}, 1);
  CHECK(second.error_kind == ErrorKind::kSessionBusy);
  release.set_value();
  CHECK(first.get().error == "");
  // Cancellation through the callback.
  TurnRequest cancel;
  cancel.prompt = RandomTokens(10, 256, 11);
  cancel.max_tokens = 20;
  int seen = 0;
  cancel.on_token = [&seen](int32_t) { return ++seen < 3; };
  TurnResult c = sm->Submit(std::move(cancel)).get();
  CHECK(c.finish_reason == "cancelled");
  CHECK(c.output.size() == 3);
  CHECK(sm->Metrics().turns_cancelled == 1);
}

TEST_CASE_TEMPLATE("concurrent turns decode together in one batch and each equals its own computation", V, CEDAR_MODEL_VARIANTS) {
  auto m = cedar::test::SharedPresetModel(V::kName);
  auto sm = SessionManager::Start(m, {});
  // Hold the engine thread inside the first turn's callback while three more turns queue up.
  std::promise<void> release;
  std::shared_future<void> gate = release.get_future().share();
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 4; ++i) prompts.push_back(RandomTokens(20 + 13 * i, 256, 40 + i));
  std::vector<std::future<TurnResult>> futs;
  for (int i = 0; i < 4; ++i) {
    TurnRequest rq;
    rq.prompt = prompts[size_t(i)];
    rq.max_tokens = 6;
    rq.decoder = DecoderPolicy::kExact;
    rq.return_prompt_logits = true;
    if (i == 0) rq.on_token = [gate](int32_t) {
      gate.wait();
      return true;
    };
    futs.push_back(sm->Submit(std::move(rq)));
  }
  release.set_value();
  for (int i = 0; i < 4; ++i) {
    TurnResult r = futs[size_t(i)].get();
    CAPTURE(i);
    ExpectMatchesScratch(*m, prompts[size_t(i)], r, 6);
  }
  EngineMetrics em = sm->Metrics();
  CHECK(em.decode_batch_rows > em.decode_batches);  // some steps decoded several turns at once
}
