// The shared remote tier (cache/remote_store.h) under PrefixCache, against a private
// redis-server: two caches share pages and snapshots through it, every read is verified (tenant,
// model, chain, tokens, checksums), and every fault (down, slow, full, corrupt) is a miss.
#include <doctest/doctest.h>

#include <fmt/format.h>

#include <string>

#include "cache/remote_store.h"
#include "tests/cache_files_util.h"
#include "tests/cache_test_util.h"
#include "tests/redis_fixture.h"

using namespace cedar::cache;
using namespace cedar::cache::testing;
using cedar::test::RedisServer;

namespace {

PrefixCacheConfig RemoteConfig(const RedisServer& redis) {
  PrefixCacheConfig c;
  c.page_tokens = kPage;
  c.remote.url = redis.url();
  c.remote.timeout = std::chrono::milliseconds(200);
  // Reconnect at every read: the tests restart Redis and must not wait for a backoff (0: no wait).
  c.remote.backoff_min = c.remote.backoff_max = std::chrono::milliseconds(0);
  return c;
}

// Cache A stores `tokens` (all pages) with a snapshot at `snapshot_at` and sends it all.
std::unique_ptr<PrefixCache> Writer(const RedisServer& redis, const std::vector<TokenId>& tokens, size_t snapshot_at,
                                    ModelFingerprint fp = 1, TenantSalt salt = kNoTenant) {
  auto a = OpenOrFail(RemoteConfig(redis), fp);
  const SnapshotInput snap{snapshot_at, MakePayload(std::vector<uint8_t>(300, uint8_t(snapshot_at)))};
  auto r = a->Insert(tokens, Provider(tokens), {&snap, 1}, salt);
  REQUIRE(r.ok());
  a->DrainRemoteWrites();
  return a;
}

}  // namespace

TEST_CASE("two caches share pages and snapshots through the remote tier, verified and with a TTL") {
  RedisServer redis;
  const auto tokens = Seq(100, 5 * kPage + 2);  // 5 whole pages and a partial one
  auto a = Writer(redis, tokens, 3 * kPage);
  const RemoteStats ws = a->RemoteCounters();
  CHECK(ws.pages_written == 5);
  CHECK(ws.snapshots_written == 1);
  CHECK(redis.Keys("cedar:*").size() == 6);
  // Every entry carries the TTL (72 h by default), in milliseconds.
  for (const std::string& key : redis.Keys("cedar:*")) {
    const long long ttl = std::stoll(redis.Command({"PTTL", key}));
    CHECK(ttl > 0);
    CHECK(ttl <= 72LL * 3600 * 1000);
  }

  auto b = OpenOrFail(RemoteConfig(redis));
  CHECK(b->Match(tokens).matched_tokens == 0);
  const RemotePull pull = b->PullRemote(tokens);
  CHECK(pull.from_tokens == 0);
  CHECK(pull.pulled_tokens == 5 * kPage);
  CHECK(pull.snapshot_position == 3 * kPage);
  auto h = b->Acquire(tokens);
  REQUIRE(h.ok());
  CHECK(h->tokens() == 5 * kPage);
  CheckPayloads(*h, tokens);
  CHECK(h->snapshot_position() == 3 * kPage);
  CHECK(*h->snapshot() == std::vector<uint8_t>(300, uint8_t(3 * kPage)));
  h->Release();
  CHECK(b->Counters().remote_hit_tokens == 5 * kPage);
  CHECK(b->Counters().remote_snapshots_loaded == 1);
  CheckIntegrity(*b);
  // What came from the remote tier is not sent back, and a second pull asks for nothing new.
  b->DrainRemoteWrites();
  CHECK(b->RemoteCounters().pages_written == 0);
  CHECK(b->PullRemote(tokens).pulled_tokens == 0);

  // A local prefix is extended from the remote tier: B' holds 2 pages and pulls the other 3.
  auto c = OpenOrFail(RemoteConfig(redis));
  const std::vector<TokenId> head(tokens.begin(), tokens.begin() + 2 * kPage);
  REQUIRE(c->Insert(head, Provider(tokens)).ok());
  const RemotePull more = c->PullRemote(tokens);
  CHECK(more.from_tokens == 2 * kPage);
  CHECK(more.pulled_tokens == 3 * kPage);
  auto hc = c->Acquire(tokens);
  REQUIRE(hc.ok());
  CheckPayloads(*hc, tokens);
}

TEST_CASE("the remote tier keeps tenants and models apart") {
  RedisServer redis;
  const auto tokens = Seq(7, 4 * kPage);
  auto a = Writer(redis, tokens, 2 * kPage, /*fp=*/1, /*salt=*/11);
  auto other_model = OpenOrFail(RemoteConfig(redis), /*fp=*/2);
  CHECK(other_model->PullRemote(tokens, 11).pulled_tokens == 0);
  auto same_model = OpenOrFail(RemoteConfig(redis), /*fp=*/1);
  CHECK(same_model->PullRemote(tokens, /*salt=*/12).pulled_tokens == 0);
  CHECK(same_model->PullRemote(tokens, kNoTenant).pulled_tokens == 0);
  CHECK(same_model->RemoteCounters().page_misses == 2);
  // The positive control: the writer's own tenant and model find it all.
  CHECK(same_model->PullRemote(tokens, 11).pulled_tokens == 4 * kPage);
}

TEST_CASE("a corrupt or misplaced remote value is a miss, counted, never returned") {
  RedisServer redis;
  const auto tokens = Seq(300, 4 * kPage);
  auto a = Writer(redis, tokens, 4 * kPage);
  // The keys of pages 0..3 in chain order, from the writer's digests.
  std::vector<std::string> keys;
  uint64_t chain = 0;
  for (size_t i = 0; i < 4; ++i) {
    chain = Xxh3PageDigest(chain, std::span(tokens).subspan(i * kPage, kPage), 1, kNoTenant);
    keys.push_back(fmt::format("cedar:{:016x}:{:016x}:p", uint64_t{1}, chain));
    REQUIRE(redis.Command({"EXISTS", keys.back()}) == "1");
  }
  SUBCASE("garbage") { redis.Command({"SET", keys[2], "garbage, not an entry"}); }
  SUBCASE("one flipped payload byte") {
    std::string v = redis.Command({"GET", keys[2]});
    v[v.size() - 1] ^= 0x40;
    redis.Command({"SET", keys[2], v});
  }
  SUBCASE("another page's valid value") { redis.Command({"SET", keys[2], redis.Command({"GET", keys[3]})}); }
  auto b = OpenOrFail(RemoteConfig(redis));
  const RemotePull pull = b->PullRemote(tokens);
  CHECK(pull.pulled_tokens == 2 * kPage);  // the pages before the bad one
  CHECK(pull.snapshot_position == 0);       // the snapshot lies past the bad page: out of reach
  CHECK(b->RemoteCounters().corrupt == 1);
  auto h = b->Acquire(tokens);
  REQUIRE(h.ok());
  CheckPayloads(*h, tokens);
}

TEST_CASE("Redis down, slow or full: every read is a miss, an outage is logged once, and the tier comes back") {
  RedisServer redis;
  const auto tokens = Seq(40, 3 * kPage);
  auto a = Writer(redis, tokens, kPage);
  auto b = OpenOrFail(RemoteConfig(redis));
  {
    WarningCapture capture;
    redis.Kill();
    CHECK(b->PullRemote(tokens).pulled_tokens == 0);
    CHECK(b->PullRemote(tokens).pulled_tokens == 0);
    const RemoteStats s = b->RemoteCounters();
    CHECK(s.errors + s.skipped >= 2);
    CHECK(s.outages == 1);
    CHECK_MESSAGE(capture.warnings().size() == 1, capture.joined());
    // Writes during the outage are dropped, not queued forever (and A logs its own outage once).
    REQUIRE(a->Insert(Seq(900, 2 * kPage), Provider(Seq(900, 2 * kPage))).ok());
    a->DrainRemoteWrites();
    REQUIRE(a->Insert(Seq(800, 2 * kPage), Provider(Seq(800, 2 * kPage))).ok());
    a->DrainRemoteWrites();
    CHECK(a->RemoteCounters().writes_dropped > 0);
    CHECK(a->RemoteCounters().outages == 1);
    CHECK_MESSAGE(capture.warnings().size() == 2, capture.joined());
  }
  // Back, empty (no persistence, as after a flush): a miss, then the next write heals it.
  redis.Start();
  CHECK(b->PullRemote(tokens).pulled_tokens == 0);
  CHECK(b->RemoteCounters().reconnects == 1);
  CHECK(b->RemoteCounters().connected);
  REQUIRE(a->Insert(tokens, Provider(tokens)).ok());  // all cached in A: refreshed, and resent since Redis lost them
  a->DrainRemoteWrites();
  CHECK(b->PullRemote(tokens).pulled_tokens == 3 * kPage);

  SUBCASE("slow: a read past the deadline is a miss") {
    auto c = OpenOrFail(RemoteConfig(redis));
    redis.Pause();
    CHECK(c->PullRemote(tokens).pulled_tokens == 0);
    redis.Resume();
    CHECK(c->RemoteCounters().timeouts == 1);
    CHECK(c->PullRemote(tokens).pulled_tokens == 3 * kPage);
  }
  SUBCASE("full: maxmemory with noeviction refuses writes, counted; nothing half-written is read") {
    redis.Command({"FLUSHALL"});
    redis.Command({"CONFIG", "SET", "maxmemory-policy", "noeviction"});
    redis.Command({"CONFIG", "SET", "maxmemory", "1"});
    const auto fresh = Seq(5000, 3 * kPage);
    auto w = OpenOrFail(RemoteConfig(redis));
    REQUIRE(w->Insert(fresh, Provider(fresh)).ok());
    w->DrainRemoteWrites();
    CHECK(w->RemoteCounters().write_failures == 3);
    CHECK(w->RemoteCounters().pages_written == 0);
    auto c = OpenOrFail(RemoteConfig(redis));
    CHECK(c->PullRemote(fresh).pulled_tokens == 0);
  }
  SUBCASE("full: maxmemory with LRU eviction loses entries; what is read is still exact") {
    redis.Command({"FLUSHALL"});
    redis.Command({"CONFIG", "SET", "maxmemory-policy", "allkeys-lru"});
    redis.Command({"CONFIG", "SET", "maxmemory", "2mb"});
    const auto many = Seq(7000, 200 * kPage);
    auto w = OpenOrFail(RemoteConfig(redis));
    REQUIRE(w->Insert(many, Provider(many, nullptr, 20000)).ok());  // 4 MB of pages into 2 MB
    w->DrainRemoteWrites();
    CHECK(w->RemoteCounters().pages_written == 200);
    CHECK(redis.Keys("cedar:*").size() < 200);
    auto c = OpenOrFail(RemoteConfig(redis));
    const RemotePull pull = c->PullRemote(many);
    CHECK(pull.pulled_tokens < 200 * kPage);
    auto h = c->Acquire(many);
    REQUIRE(h.ok());
    for (size_t i = 0; i < h->pages().size(); ++i) CHECK(*h->pages()[i] == *PagePayload(many, (i + 1) * kPage, 20000));
  }
}
