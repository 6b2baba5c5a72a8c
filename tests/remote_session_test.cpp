// Two servers (two session managers, each with its own RAM cache) sharing one Redis through the
// remote tier (--cache-remote), on the tiny model: a conversation whose turns alternate between
// them hits the shared tier on every switch and answers exactly as one server does; Redis killed,
// restarted, flushed, full, paused and fed corrupt values changes no output (faults are misses,
// and the counters show them); tenants and models stay apart in one Redis.
#include <doctest/doctest.h>

#include <fmt/format.h>

#include <functional>
#include <string>
#include <vector>

#include "session/session_manager.h"
#include "tests/redis_fixture.h"
#include "tests/test_models.h"

using namespace cedar;
using namespace cedar::session;
using cedar::test::RandomTokens;
using cedar::test::RedisServer;

namespace {

constexpr int kMaxTokens = 5;

ManagerOptions Options(const RedisServer* redis) {
  ManagerOptions o;
  o.cache_ram_bytes = 64ull << 20;
  if (redis) {
    o.cache_remote.url = redis->url();
    o.cache_remote.timeout = std::chrono::milliseconds(200);
    // Reconnect at every read: the tests restart Redis and must not wait out a backoff (0: no wait).
    o.cache_remote.backoff_min = o.cache_remote.backoff_max = std::chrono::milliseconds(0);
  }
  return o;
}

TurnResult Turn(SessionManager& sm, const std::string& session, const std::vector<int32_t>& prompt,
                cache::TenantSalt tenant = cache::kNoTenant) {
  TurnRequest rq;
  rq.session_id = session;
  rq.prompt = prompt;
  rq.max_tokens = kMaxTokens;
  rq.decoder = DecoderPolicy::kExact;
  rq.tenant = tenant;
  rq.return_prompt_logits = true;
  TurnResult r = sm.Submit(std::move(rq)).get();
  REQUIRE_MESSAGE(r.error.empty(), r.error);
  return r;
}

// A conversation: each turn's context is the last one's, its output and new user tokens.
struct Conversation {
  std::vector<int32_t> context;
  int turn = 0;
  std::vector<int32_t> Next(const TurnResult* last) {
    if (last) context.insert(context.end(), last->output.begin(), last->output.end());
    const auto user = RandomTokens(23 + 7 * turn, 256, 100 + uint64_t(turn));
    context.insert(context.end(), user.begin(), user.end());
    ++turn;
    return context;
  }
};

// One server without a shared tier: the answers every other arrangement must give.
struct Reference {
  std::unique_ptr<SessionManager> sm = SessionManager::Start(test::SharedPresetModel("tiny"), Options(nullptr));
  Reference() { sm->CreateSession("conv", {}, 0); }
  TurnResult Turn(const std::vector<int32_t>& prompt) { return ::Turn(*sm, "conv", prompt); }
};

}  // namespace

TEST_CASE("a conversation alternating between two servers hits the shared tier on every switch and equals one server") {
  RedisServer redis;
  auto model = test::SharedPresetModel("tiny");
  auto a = SessionManager::Start(model, Options(&redis));
  auto b = SessionManager::Start(model, Options(&redis));
  a->CreateSession("conv", {}, 0);
  b->CreateSession("conv", {}, 0);
  Reference ref;
  Conversation conv;
  const int64_t page = 16;
  const TurnResult* last = nullptr;
  TurnResult prev;
  int64_t prev_context = 0;
  for (int turn = 0; turn < 6; ++turn) {
    CAPTURE(turn);
    const std::vector<int32_t> prompt = conv.Next(last);
    SessionManager& here = turn % 2 == 0 ? *a : *b;
    SessionManager& there = turn % 2 == 0 ? *b : *a;
    there.DrainRemoteWrites();  // the last turn's entries are in Redis (they are written asynchronously)
    const TurnResult r = Turn(here, "conv", prompt);
    const TurnResult want = ref.Turn(prompt);
    CHECK(r.output == want.output);
    // Restored and live states run the same rows in different chunks: the session tests' bound.
    CHECK(test::RelError(r.prompt_logits, want.prompt_logits) <= 2e-5);
    const TurnAccounting& acc = r.accounting;
    if (turn == 0) {
      CHECK(acc.cached_tokens() == 0);
    } else {
      // The previous turn ran on the other server: its context (prompt and output, whole pages)
      // comes from the shared tier, restored exactly.
      CHECK(acc.matched_live == 0);
      CHECK(acc.matched_remote > 0);
      CHECK(acc.cached_tokens() >= prev_context / page * page);
      CHECK(acc.snapshot_hit);
    }
    prev = r;
    last = &prev;
    prev_context = int64_t(prompt.size()) + int64_t(r.output.size()) - 1;  // the last output token has not run
  }
  const EngineMetrics ma = a->Metrics(), mb = b->Metrics();
  CHECK(ma.remote_enabled);
  CHECK(ma.hit_tokens_remote > 0);
  CHECK(mb.hit_tokens_remote > 0);
  CHECK(ma.remote.page_hits > 0);
  CHECK(ma.remote.corrupt + ma.remote.timeouts + ma.remote.errors == 0);
  CHECK(a->CheckCacheIntegrity() == "");
  CHECK(b->CheckCacheIntegrity() == "");
}

TEST_CASE("Redis killed, restarted, flushed, paused, full and corrupt: the outputs do not change, the counters show the misses") {
  RedisServer redis;
  auto model = test::SharedPresetModel("tiny");
  auto a = SessionManager::Start(model, Options(&redis));
  auto b = SessionManager::Start(model, Options(&redis));
  a->CreateSession("conv", {}, 0);
  b->CreateSession("conv", {}, 0);
  Reference ref;
  Conversation conv;
  TurnResult prev;
  const TurnResult* last = nullptr;
  int turn = 0;
  // One turn on the server whose turn it is; the output must equal the reference's.
  auto step = [&](const char* what, const std::function<void()>& after_turn = {}) {
    CAPTURE(what);
    CAPTURE(turn);
    const std::vector<int32_t> prompt = conv.Next(last);
    SessionManager& here = turn % 2 == 0 ? *a : *b;
    const TurnResult r = Turn(here, "conv", prompt);
    const TurnResult want = ref.Turn(prompt);
    CHECK(r.output == want.output);
    // Restored and live states run the same rows in different chunks: the session tests' bound.
    CHECK(test::RelError(r.prompt_logits, want.prompt_logits) <= 2e-5);
    if (after_turn) after_turn();
    here.DrainRemoteWrites();
    prev = r;
    last = &prev;
    ++turn;
    return r.accounting;
  };
  step("a: first turn");
  CHECK(step("b: shared tier up").matched_remote > 0);

  redis.Kill();
  const TurnAccounting down = step("a: Redis down");
  CHECK(down.matched_remote == 0);
  step("b: Redis down");
  CHECK(a->Metrics().remote.outages == 1);
  CHECK(a->Metrics().remote.errors + a->Metrics().remote.skipped >= 1);

  redis.Start();  // empty: what was there is lost, as after a flush
  const TurnAccounting back = step("a: Redis back, empty");
  CHECK(back.matched_remote == 0);
  CHECK(a->Metrics().remote.reconnects == 1);
  CHECK(step("b: the tier is refilled").matched_remote > 0);

  redis.Command({"FLUSHALL"});
  CHECK(step("a: flushed").matched_remote == 0);
  CHECK(step("b: refilled after the flush").matched_remote > 0);

  // Every entry overwritten with garbage: the next switch finds only bad values.
  for (const std::string& key : redis.Keys("cedar:*")) redis.Command({"SET", key, "not an entry"});
  const uint64_t corrupt_before = a->Metrics().remote.corrupt;
  CHECK(step("a: corrupt values").matched_remote == 0);
  CHECK(a->Metrics().remote.corrupt > corrupt_before);
  step("b: after the corruption");

  redis.Pause();  // slow: never answers within the deadline
  const uint64_t timeouts_before = a->Metrics().remote.timeouts;
  CHECK(step("a: Redis paused", [&] { redis.Resume(); }).matched_remote == 0);
  CHECK(a->Metrics().remote.timeouts > timeouts_before);
  step("b: Redis resumed");

  // Full: writes refused (maxmemory with noeviction) are counted; the turns still answer.
  redis.Command({"FLUSHALL"});
  redis.Command({"CONFIG", "SET", "maxmemory-policy", "noeviction"});
  redis.Command({"CONFIG", "SET", "maxmemory", "1"});
  step("a: Redis full");
  CHECK(a->Metrics().remote.write_failures > 0);
  CHECK(step("b: nothing was stored").matched_remote == 0);
  CHECK(a->CheckCacheIntegrity() == "");
  CHECK(b->CheckCacheIntegrity() == "");
}

TEST_CASE("tenant salts and model fingerprints keep tenants and models apart in one Redis") {
  RedisServer redis;
  auto tiny = test::SharedPresetModel("tiny");
  auto other = test::SharedPresetModel("tiny-hc");
  REQUIRE(tiny->fingerprint() != other->fingerprint());
  const std::vector<int32_t> prompt = RandomTokens(90, 256, 5);
  {
    auto writer = SessionManager::Start(tiny, Options(&redis));
    Turn(*writer, "", prompt, /*tenant=*/1);
    writer->DrainRemoteWrites();
  }
  auto reader = SessionManager::Start(tiny, Options(&redis));
  auto reference = SessionManager::Start(tiny, Options(nullptr));
  // Another tenant of the same model: nothing to find, and the same answer as a cold server.
  const TurnResult t2 = Turn(*reader, "", prompt, /*tenant=*/2);
  CHECK(t2.accounting.matched_remote == 0);
  CHECK(t2.accounting.cached_tokens() == 0);
  CHECK(t2.output == Turn(*reference, "", prompt, 2).output);
  // Another model under the same tenant: nothing to find either.
  auto other_reader = SessionManager::Start(other, Options(&redis));
  const TurnResult m2 = Turn(*other_reader, "", prompt, /*tenant=*/1);
  CHECK(m2.accounting.matched_remote == 0);
  CHECK(m2.accounting.cached_tokens() == 0);
  // The positive control: the writer's tenant and model hit.
  const TurnResult t1 = Turn(*reader, "", prompt, /*tenant=*/1);
  CHECK(t1.accounting.matched_remote > 0);
  CHECK(t1.output == Turn(*reference, "", prompt, 1).output);
  // The keys name their model: both fingerprints' entries are there, apart.
  other_reader->DrainRemoteWrites();
  reader->DrainRemoteWrites();
  CHECK(!redis.Keys(fmt::format("cedar:{:016x}:*", tiny->fingerprint())).empty());
  CHECK(!redis.Keys(fmt::format("cedar:{:016x}:*", other->fingerprint())).empty());
}
