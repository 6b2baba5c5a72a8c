// Speculative decoding in the session manager (--spec-tokens): greedy turns produce exactly the
// tokens, finish reasons, usage and final logits of plain decoding over several turns of a
// session, and what they leave behind (the live state, the prefix cache) is exactly plain
// decoding's: the next turn's prompt logits (live hit) and a sessionless turn's (prefix-cache
// hit) are compared bit for bit. Sampled turns follow `cedar generate --spec-tokens`'s rule.
#include <doctest/doctest.h>

#include <algorithm>
#include <future>
#include <random>

#include "engine/dspark.h"
#include "engine/speculative.h"
#include "session/session_manager.h"
#include "tests/spec_serve_fixture.h"
#include "tests/test_models.h"

using namespace cedar;
using namespace cedar::session;
using namespace spec_serve_test;

namespace {

std::vector<int32_t> Random(int n, uint64_t seed) {
  std::mt19937_64 g(seed);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = int32_t(g() % 1000);  // below the noise token
  return t;
}

std::vector<int32_t> Cat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

struct Plan {
  int spec = 0;                 // --spec-tokens
  bool oracle = false;          // OracleDrafter instead of the model's DSpark drafter
  SchedulerKind scheduler = SchedulerKind::kMixed;
  int32_t stop_token = -1;      // turn 2's stop token
  int cancel_at = 6;            // turn 3's on_token refuses its cancel_at-th token (a stop string's way)
};

ManagerOptions Options(const Plan& p) {
  ManagerOptions o;
  o.page_tokens = 8;
  o.scheduler.kind = p.scheduler;
  o.spec_tokens = p.spec;
  if (p.oracle) o.make_drafter = [](const Model& m) { return std::make_unique<OracleDrafter>(m); };
  return o;
}

// Four turns of a session (live hits), with a stop token, a refused token, max_tokens and both
// decoder policies, then a sessionless turn that restores from the prefix cache.
std::vector<TurnResult> Conversation(const Plan& p, EngineMetrics* metrics = nullptr) {
  auto sm = SessionManager::Start(V41Tiny(), Options(p));
  const std::string sid = sm->CreateSession("s", {}, 0);
  std::vector<TurnResult> out;
  std::vector<int32_t> ctx = Random(21, 1);
  auto turn = [&](const std::vector<int32_t>& prompt, int max_tokens, std::string session, std::function<void(TurnRequest&)> f) {
    TurnRequest rq;
    rq.session_id = session;
    rq.prompt = prompt;
    rq.max_tokens = max_tokens;
    rq.return_prompt_logits = true;
    if (f) f(rq);
    out.push_back(sm->Submit(std::move(rq)).get());
    REQUIRE(out.back().error.empty());
    return out.back();
  };
  TurnResult r = turn(ctx, 11, sid, nullptr);
  ctx = Cat(Cat(ctx, r.output), Random(5, 2));
  r = turn(ctx, 19, sid, [&](TurnRequest& rq) {
    if (p.stop_token >= 0) rq.stop_tokens = {p.stop_token};
  });
  ctx = Cat(Cat(ctx, r.output), Random(4, 3));
  r = turn(ctx, 20, sid, [&](TurnRequest& rq) {
    rq.decoder = DecoderPolicy::kExact;
    auto n = std::make_shared<int>(0);
    rq.on_token = [n, at = p.cancel_at](int32_t) { return ++*n < at; };
  });
  ctx = Cat(Cat(ctx, r.output), Random(9, 4));
  r = turn(ctx, 13, sid, nullptr);
  // Sessionless, past the session's context: the prefix cache serves what the turns inserted.
  turn(Cat(Cat(ctx, r.output), Random(3, 5)), 7, "", nullptr);
  CHECK(sm->CheckCacheIntegrity() == "");
  if (metrics) *metrics = sm->Metrics();
  sm->Shutdown(false);
  return out;
}

void CheckSame(const std::vector<TurnResult>& plain, const std::vector<TurnResult>& spec) {
  REQUIRE(plain.size() == spec.size());
  for (size_t i = 0; i < plain.size(); ++i) {
    CAPTURE(i);
    const TurnResult &a = plain[i], &b = spec[i];
    CHECK(a.output == b.output);
    CHECK(a.finish_reason == b.finish_reason);
    CHECK(a.accounting.prompt_tokens == b.accounting.prompt_tokens);
    CHECK(a.accounting.cached_tokens() == b.accounting.cached_tokens());
    CHECK(a.accounting.matched_live == b.accounting.matched_live);
    CHECK(a.accounting.matched_ram == b.accounting.matched_ram);
    CHECK(a.accounting.snapshot_hit == b.accounting.snapshot_hit);
    CHECK(a.accounting.tokens_encoded == b.accounting.tokens_encoded);
    CHECK(SameBits(a.prompt_logits, b.prompt_logits));  // the state the turn started from
    CHECK(a.logits_hash == b.logits_hash);              // the last logits: the state it ended in
  }
}

}  // namespace

TEST_CASE("--spec-tokens: greedy session turns equal plain decoding (tokens, finish, usage, cache hits, state)") {
  // The plain run, once without a stop token to pick one that turn 2 produces mid-output.
  const std::vector<TurnResult> probe = Conversation({});
  REQUIRE(probe[1].output.size() >= 8);
  Plan plain;
  plain.stop_token = probe[1].output[6];
  const std::vector<TurnResult> base = Conversation(plain);
  CHECK(base[1].finish_reason == "stop");
  CHECK(base[2].finish_reason == "cancelled");
  CHECK(base[2].output.size() == size_t(plain.cancel_at));
  CHECK(base[0].finish_reason == "length");
  CHECK(base[1].accounting.matched_live > 0);  // the session's live state served turn 2
  CHECK(base[4].accounting.matched_ram > 0);   // the cache served the sessionless turn
  for (bool oracle : {false, true}) {
    for (int k : {1, 3, 5}) {
      CAPTURE(oracle);
      CAPTURE(k);
      Plan p = plain;
      p.spec = k;
      p.oracle = oracle;
      EngineMetrics em;
      CheckSame(base, Conversation(p, &em));
      CHECK(em.spec_passes > 0);
      CHECK(em.spec_drafted > 0);
      CHECK(em.spec_accepted <= em.spec_drafted);
      // The oracle's drafts are mostly the model's own tokens: kept ones and rejected ones.
      if (oracle && k > 1) CHECK(em.spec_accepted > 0);
      if (oracle && k > 1) CHECK(em.spec_accepted < em.spec_drafted);
      MESSAGE("drafter " << (oracle ? "oracle" : "dspark") << " k " << k << ": " << em.spec_passes << " passes, "
                         << em.spec_drafted << " drafted, " << em.spec_accepted << " accepted");
    }
  }
  Plan serial = plain;
  serial.spec = 3;
  serial.oracle = true;
  serial.scheduler = SchedulerKind::kSerial;
  CheckSame(base, Conversation(serial));
}

TEST_CASE("--spec-tokens: speculating turns beside plain ones in the same steps (batched rows) stay exact") {
  // Turn A speculates; B asks for logprobs and C has a logit_bias: they decode plainly, in the
  // batched rows of the same steps. Each equals its result alone without speculation.
  auto requests = [] {
    std::vector<TurnRequest> v(3);
    for (int i = 0; i < 3; ++i) {
      v[size_t(i)].prompt = Random(13 + 7 * i, 40 + uint64_t(i));
      v[size_t(i)].max_tokens = 15 + i;
    }
    v[1].top_logprobs = 2;
    v[2].adjust.bias.push_back({7, 3.0f});
    return v;
  };
  std::vector<TurnResult> alone;
  {
    auto sm = SessionManager::Start(V41Tiny(), Options({}));
    for (TurnRequest& rq : requests()) alone.push_back(sm->Submit(std::move(rq)).get());
    sm->Shutdown(false);
  }
  Plan p;
  p.spec = 3;
  p.oracle = true;
  auto sm = SessionManager::Start(V41Tiny(), Options(p));
  std::vector<std::future<TurnResult>> futs;
  for (TurnRequest& rq : requests()) futs.push_back(sm->Submit(std::move(rq)));
  for (size_t i = 0; i < futs.size(); ++i) {
    CAPTURE(i);
    const TurnResult r = futs[i].get();
    CHECK(r.output == alone[i].output);
    CHECK(r.finish_reason == alone[i].finish_reason);
    CHECK(r.logits_hash == alone[i].logits_hash);
    if (i == 1) CHECK(r.logprobs.size() == r.output.size());
    // Only A speculated.
    CHECK((r.accounting.spec_passes > 0) == (i == 0));
  }
  sm->Shutdown(false);
}

TEST_CASE("--spec-tokens: a sampled turn follows cedar generate --spec-tokens (same seed, same tokens) and respects max_tokens and stop") {
  const std::shared_ptr<const Model> m = V41Tiny();
  SamplingParams sp;
  sp.temperature = 0.9f;
  sp.top_p = 0.95f;
  sp.seed = 1234;
  const std::vector<int32_t> prompt = Random(20, 9);
  // Generate() on the engine, from the same (bounded) prefill the session runs for this prompt,
  // with the drafter seeing the prompt's rows as `cedar generate --spec-tokens` does: the turn's
  // drafts (q) and so its sampled tokens follow only if the session hands its drafter the same
  // prompt rows (a drafter without them drafts other tokens: dspark_golden_test).
  SequenceState st(m->config());
  DSparkDrafter drafter(*m);
  HiddenCapture cap = PrefillCaptureFor(*m, drafter);
  PrefillOptions po;
  po.mode = PrefillMode::kBounded;
  po.hidden = &cap;
  std::vector<float> logits = Prefill(*m, st, prompt, po).logits;
  ObservePrefill(drafter, cap);
  GenerateOptions go;
  go.max_tokens = 24;
  go.sampling = sp;
  go.spec_tokens = 3;
  const GenerateResult g = Generate(*m, st, logits, go, &drafter);
  REQUIRE(g.tokens.size() == 24);

  Plan p;
  p.spec = 3;
  auto sm = SessionManager::Start(m, Options(p));
  TurnRequest rq;
  rq.prompt = prompt;
  rq.max_tokens = 24;
  rq.sampling = sp;
  TurnResult r = sm->Submit(rq).get();
  CHECK(r.output == g.tokens);
  CHECK(r.finish_reason == "length");
  CHECK(r.accounting.spec_drafted == g.drafted);
  CHECK(r.accounting.spec_accepted == g.accepted);
  // max_tokens: every cut point, never past it.
  for (int max : {1, 2, 3, 5, 7}) {
    rq.max_tokens = max;
    rq.prompt = Random(20, 100 + uint64_t(max));
    r = sm->Submit(rq).get();
    CHECK(r.output.size() == size_t(max));
    CHECK(r.finish_reason == "length");
  }
  // A stop token: the output ends at its first occurrence. A fresh manager: with this prompt in
  // the prefix cache the prefill would run fewer rows, the drafter would see fewer prompt rows,
  // and the sampled drafts (so the tokens, not their distribution) would differ from g's.
  sm->Shutdown(false);
  sm = SessionManager::Start(m, Options(p));
  rq.prompt = prompt;
  rq.max_tokens = 24;
  rq.stop_tokens = {g.tokens[9]};
  r = sm->Submit(rq).get();
  const auto first = std::find(g.tokens.begin(), g.tokens.end(), g.tokens[9]);
  CHECK(r.output == std::vector<int32_t>(g.tokens.begin(), first + 1));
  CHECK(r.finish_reason == "stop");
  sm->Shutdown(false);
}

TEST_CASE("--spec-tokens is refused for a model without DSpark layers, and out of range") {
  ManagerOptions o;
  o.spec_tokens = 3;
  CHECK_THROWS_WITH_AS(SessionManager::Start(cedar::test::SharedPresetModel("tiny"), o),
                       doctest::Contains("has no DSpark draft layers"), std::invalid_argument);
  auto sm = SessionManager::Start(V41Tiny(), o);  // v41-tiny has them
  sm->Shutdown(false);
  o.spec_tokens = 16;
  CHECK_THROWS_WITH_AS(SessionManager::Start(V41Tiny(), o), doctest::Contains("expected 0..15"), std::invalid_argument);
}
