// Session memory stays inside its budgets: live states and pins under --session-ram (the least
// recently used sessions are demoted into the cache and their next turn is still exact), pins
// that cannot starve the cache's inserts, partial inserts that are counted, max_sessions over
// every session, paged listing, and an exact repeat of a cached prompt that computes nothing.
// Every turn is compared with computing it from scratch; the cache is checked after each step.
#include <doctest/doctest.h>

#include "session/session_manager.h"
#include "tests/test_models.h"

using namespace cedar;
using namespace cedar::session;
using cedar::test::RandomTokens;
using cedar::test::RelError;

namespace {

std::shared_ptr<const Model> Tiny() { return cedar::test::SharedPresetModel("tiny"); }

struct Reference {
  std::vector<float> logits;
  std::vector<int32_t> output;
};

// Logits after the prompt and the greedy continuation, from scratch, in `mode`.
Reference FromScratch(const Model& m, const std::vector<int32_t>& prompt, int max_tokens,
                      PrefillMode mode = PrefillMode::kExact) {
  SequenceState st(m.config());
  PrefillOptions o;
  o.mode = mode;
  Reference r;
  r.logits = Prefill(m, st, prompt, o).logits;
  std::vector<float> lg = r.logits;
  for (int i = 0; i < max_tokens; ++i) {
    const int32_t t = Argmax(lg);
    r.output.push_back(t);
    if (i + 1 < max_tokens) lg = DecodeStep(m, st, t);
  }
  return r;
}

TurnResult Turn(SessionManager& sm, const std::string& sid, const std::vector<int32_t>& prompt, int max_tokens,
                DecoderPolicy pol = DecoderPolicy::kExact) {
  TurnRequest rq;
  rq.session_id = sid;
  rq.prompt = prompt;
  rq.max_tokens = max_tokens;
  rq.decoder = pol;
  rq.restore = RestorePolicy::kStaircase;
  rq.return_prompt_logits = true;
  return sm.Submit(std::move(rq)).get();
}

void ExpectMatchesScratch(const Model& m, const std::vector<int32_t>& prompt, const TurnResult& r, int max_tokens,
                          PrefillMode mode = PrefillMode::kExact) {
  REQUIRE(r.error == "");
  const Reference ref = FromScratch(m, prompt, max_tokens, mode);
  CHECK(RelError(r.prompt_logits, ref.logits) <= 2e-5);
  CHECK(r.output == ref.output);
}

void ExpectIntact(SessionManager& sm) {
  const std::string bad = sm.CheckCacheIntegrity();
  CHECK_MESSAGE(bad.empty(), bad);
}

std::vector<int32_t> Extend(std::vector<int32_t> ctx, const std::vector<int32_t>& out, int n, uint64_t seed) {
  ctx.insert(ctx.end(), out.begin(), out.end());
  auto more = RandomTokens(n, 256, seed);
  ctx.insert(ctx.end(), more.begin(), more.end());
  return ctx;
}

}  // namespace

TEST_CASE("many long sessions under a small session budget stay within it, and every next turn is exact") {
  auto m = Tiny();
  ManagerOptions opt;
  opt.cache_ram_bytes = 8 << 20;
  opt.session_ram_bytes = 600 << 10;  // room for about two of these sessions (live state + pin)
  auto sm = SessionManager::Start(m, opt);
  constexpr int kSessions = 6;
  std::vector<std::string> ids;
  std::vector<std::vector<int32_t>> ctx;
  for (int i = 0; i < kSessions; ++i) {
    ids.push_back(sm->CreateSession("s" + std::to_string(i), {}, 0));
    ctx.push_back(RandomTokens(250 + 20 * i, 256, 500 + i));
  }
  int restored_from_cache = 0;
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < kSessions; ++i) {
      CAPTURE(round);
      CAPTURE(i);
      TurnResult r = Turn(*sm, ids[size_t(i)], ctx[size_t(i)], 4);
      ExpectMatchesScratch(*m, ctx[size_t(i)], r, 4);
      if (round > 0 && r.accounting.matched_live == 0) {
        // Demoted since its last turn: the cache served the old context instead.
        CHECK(r.accounting.matched_ram >= int64_t(ctx[size_t(i)].size()) - 40);
        ++restored_from_cache;
      }
      const EngineMetrics e = sm->Metrics();
      CHECK(e.live_state_bytes + e.session_pinned_bytes <= e.session_ram_budget);
      CHECK(e.session_ram_budget == opt.session_ram_bytes);
      CHECK(e.ram_bytes <= e.ram_budget);
      ExpectIntact(*sm);
      ctx[size_t(i)] = Extend(ctx[size_t(i)], r.output, 9 + round, 900 + 10 * round + i);
    }
  }
  const EngineMetrics e = sm->Metrics();
  MESSAGE("demoted " << e.sessions_demoted << ", restored from the cache " << restored_from_cache << ", live "
                     << e.live_sessions << ", live bytes " << e.live_state_bytes << " + pinned " << e.session_pinned_bytes
                     << " of " << e.session_ram_budget);
  CHECK(e.sessions_demoted >= kSessions);      // the budget was binding
  CHECK(restored_from_cache >= kSessions);     // and demoted sessions came back through the cache
  CHECK(e.live_sessions < kSessions);
  CHECK(e.sessions == kSessions);              // demoted sessions still exist
  for (const std::string& id : ids) CHECK(sm->GetSession(id).has_value());
}

TEST_CASE("pins cannot starve the cache: inserts still land, and a partial insert is counted") {
  auto m = Tiny();
  ManagerOptions opt;
  opt.cache_ram_bytes = 400 << 10;
  opt.session_ram_bytes = 4 << 20;  // a generous session budget: the pin cap (half the cache) binds
  auto sm = SessionManager::Start(m, opt);
  // Sessions whose pinned prefixes alone would fill the cache RAM several times.
  for (int i = 0; i < 6; ++i) {
    const std::string sid = sm->CreateSession("p" + std::to_string(i), {}, 0);
    std::vector<int32_t> prompt = RandomTokens(300, 256, 700 + i);
    TurnResult r = Turn(*sm, sid, prompt, 2);
    ExpectMatchesScratch(*m, prompt, r, 2);
    const EngineMetrics e = sm->Metrics();
    CHECK(e.session_pinned_bytes <= opt.cache_ram_bytes / 2);
    CHECK(e.ram_bytes <= e.ram_budget);
    ExpectIntact(*sm);
  }
  // A new conversation is still cached whole: its next turn hits every full page of it.
  std::vector<int32_t> prompt = RandomTokens(200, 256, 800);
  TurnResult first = Turn(*sm, "", prompt, 3);
  ExpectMatchesScratch(*m, prompt, first, 3);
  std::vector<int32_t> next = Extend(prompt, first.output, 12, 801);
  TurnResult second = Turn(*sm, "", next, 3);
  ExpectMatchesScratch(*m, next, second, 3);
  CHECK(second.accounting.cached_tokens() >= 192);
  ExpectIntact(*sm);
  CHECK(sm->Metrics().cache_inserts_partial == 0);
  // A context larger than the whole RAM tier cannot be stored whole: the insert is partial,
  // counted, and the turn is still exact.
  std::vector<int32_t> huge = RandomTokens(1500, 256, 802);
  TurnResult big = Turn(*sm, "", huge, 2);
  ExpectMatchesScratch(*m, huge, big, 2);
  const EngineMetrics e = sm->Metrics();
  CHECK(e.cache_inserts_partial >= 1);
  CHECK(e.cache_insert_refused_tokens > 0);
  CHECK(e.ram_bytes <= e.ram_budget);
  ExpectIntact(*sm);
}

TEST_CASE("an exact repeat of a cached prompt restores from its end snapshot and computes nothing") {
  auto m = Tiny();
  auto sm = SessionManager::Start(m, {});
  // 96 tokens: a whole number of pages, so the snapshot sits at the prompt's very end.
  const std::vector<int32_t> prompt = RandomTokens(96, 256, 41);
  TurnResult first = Turn(*sm, "", prompt, 5);
  ExpectMatchesScratch(*m, prompt, first, 5);
  CHECK_FALSE(first.accounting.tail_hit);
  TurnResult again = Turn(*sm, "", prompt, 5);
  ExpectMatchesScratch(*m, prompt, again, 5);
  CHECK(again.accounting.tail_hit);
  CHECK(again.accounting.matched_ram == 96);  // the whole prompt
  CHECK(again.accounting.tokens_encoded == 0);
  CHECK(again.accounting.exact_restore_rows == 0);  // no staircase
  CHECK(again.accounting.encoder_replay_rows == 0);
  CHECK(again.accounting.prefill_units == 0);
  // The same under the bounded decoder: its tail is the bounded replay's, equal to a fresh
  // bounded computation; an exact request does not take it (it would differ) and stays exact.
  const std::vector<int32_t> p2 = RandomTokens(64, 256, 42);
  TurnResult b1 = Turn(*sm, "", p2, 4, DecoderPolicy::kBounded);
  ExpectMatchesScratch(*m, p2, b1, 4, PrefillMode::kBounded);
  TurnResult b2 = Turn(*sm, "", p2, 4, DecoderPolicy::kBounded);
  ExpectMatchesScratch(*m, p2, b2, 4, PrefillMode::kBounded);
  CHECK(b2.accounting.tail_hit);
  CHECK(b2.accounting.tokens_encoded == 0);
  TurnResult e2 = Turn(*sm, "", p2, 4, DecoderPolicy::kExact);
  ExpectMatchesScratch(*m, p2, e2, 4);
  CHECK_FALSE(e2.accounting.tail_hit);
  // In a session too, after its live state diverged (a retried request).
  const std::string sid = sm->CreateSession("retry", {}, 0);
  TurnResult s1 = Turn(*sm, sid, prompt, 3);
  ExpectMatchesScratch(*m, prompt, s1, 3);
  CHECK(s1.accounting.tail_hit);
  TurnResult s2 = Turn(*sm, sid, prompt, 3);
  ExpectMatchesScratch(*m, prompt, s2, 3);
  CHECK(s2.accounting.tail_hit);
  ExpectIntact(*sm);
}

TEST_CASE("max_sessions counts every session, and the session list pages in id order") {
  auto m = Tiny();
  ManagerOptions opt;
  opt.max_sessions = 5;
  opt.session_ram_bytes = 1;  // every session is demoted after each turn: still counted
  auto sm = SessionManager::Start(m, opt);
  for (int i = 0; i < 5; ++i) {
    const std::string sid = sm->CreateSession("id" + std::to_string(i), {}, 0);
    TurnResult r = Turn(*sm, sid, RandomTokens(40, 256, 60 + i), 2);
    REQUIRE(r.error == "");
  }
  const EngineMetrics e = sm->Metrics();
  CHECK(e.live_sessions == 0);
  CHECK(e.live_state_bytes == 0);
  CHECK(e.sessions == 5);
  CHECK_THROWS_AS(sm->CreateSession("id5", {}, 0), SessionLimitError);
  CHECK(sm->DeleteSession("id2") == session::SessionManager::DeleteOutcome::kDeleted);
  CHECK(sm->CreateSession("id5", {}, 0) == "id5");
  std::vector<std::string> seen;
  std::string after;
  std::vector<bool> more;
  for (;;) {
    SessionPage page = sm->ListSessions(2, after);
    for (const SessionInfo& s : page.data) seen.push_back(s.id);
    more.push_back(page.has_more);
    if (!page.has_more) break;
    REQUIRE(!page.data.empty());
    after = page.data.back().id;
  }
  CHECK(seen == std::vector<std::string>{"id0", "id1", "id3", "id4", "id5"});
  CHECK(more == std::vector<bool>{true, true, false});
  CHECK(sm->ListSessions(10, "id4").data.size() == 1);
  CHECK(sm->ListSessions().size() == 5);
  ExpectIntact(*sm);
}
