// Prefix cache behaviours in RAM: matching, sharing, pins, eviction order, collisions,
// soft pins, argument checks. Disk behaviours are in cache_disk_test.cpp.
#include <doctest/doctest.h>

#include <numeric>

#include "cache/prefix_cache.h"
#include "tests/cache_test_util.h"

namespace cedar::cache {
namespace {

using namespace testing;

std::vector<TokenId> Concat(std::vector<TokenId> a, const std::vector<TokenId>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

PrefixCacheConfig RamConfig(uint64_t ram_budget = 1 << 20) {
  PrefixCacheConfig c;
  c.page_tokens = kPage;
  c.ram_budget_bytes = ram_budget;
  return c;
}

void Insert(PrefixCache& cache, const std::vector<TokenId>& tokens, std::vector<SnapshotInput> snapshots = {},
            TenantSalt salt = kNoTenant) {
  auto r = cache.Insert(tokens, Provider(tokens), snapshots, salt);
  REQUIRE_MESSAGE(r.ok(), r.status().ToString());
}

}  // namespace

TEST_CASE("insert then match returns whole pages and their payloads") {
  auto cache = OpenOrFail(RamConfig());
  const auto prompt = Seq(100, 10);  // 2 full pages + 2 tokens
  auto r = cache->Insert(prompt, Provider(prompt));
  REQUIRE(r.ok());
  CHECK(r->stored_tokens == 8);  // the trailing partial page is not stored
  CHECK(r->added_tokens == 8);

  const MatchResult m = cache->Match(prompt);
  CHECK(m.matched_tokens == 8);
  CHECK(m.ram_tokens == 8);
  CHECK(m.snapshot_position == 0);
  CHECK(cache->Match(Seq(100, 7)).matched_tokens == 4);  // a query shorter than a page boundary
  CHECK(cache->Match(Seq(101, 10)).matched_tokens == 0);

  auto h = cache->Acquire(prompt);
  REQUIRE(h.ok());
  CHECK(h->tokens() == 8);
  CheckPayloads(*h, prompt);
  CHECK(cache->Counters().ram_hit_tokens == 8);
  CHECK(cache->Counters().miss_tokens == 2);
  CheckIntegrity(*cache);
}

TEST_CASE("shared prefixes share pages and their bytes are counted once") {
  auto cache = OpenOrFail(RamConfig());
  const auto a = Seq(0, 16);                          // 4 pages
  const auto b = Concat(Seq(0, 8), Seq(500, 8));      // shares 2 pages with a
  Insert(*cache, a);
  int calls = 0;
  auto r = cache->Insert(b, Provider(b, &calls));
  REQUIRE(r.ok());
  CHECK(calls == 2);
  CHECK(r->cached_tokens == 8);
  CHECK(cache->Sizes().ram.used_bytes() == 6 * kPageBytes);
  CHECK(cache->Sizes().nodes == 3);  // the shared head, a's tail, b's tail

  auto ha = cache->Acquire(a);
  auto hb = cache->Acquire(b);
  REQUIRE((ha.ok() && hb.ok()));
  CheckPayloads(*ha, a);
  CheckPayloads(*hb, b);
  CHECK(ha->pages()[0] == hb->pages()[0]);  // the very same buffer
  CheckIntegrity(*cache);
}

TEST_CASE("a failing page provider leaves the cache unchanged") {
  auto cache = OpenOrFail(RamConfig());
  const auto a = Seq(0, 8);
  Insert(*cache, a);
  const auto b = Concat(Seq(0, 8), Seq(50, 12));
  int calls = 0;
  auto failing = [&](size_t page_index, std::span<const TokenId>) -> Result<Payload> {
    if (++calls == 2) return Status::IOError("engine failed");
    return PagePayload(b, (page_index + 1) * kPage);
  };
  auto r = cache->Insert(b, failing);
  CHECK(r.status().code() == StatusCode::kIOError);
  CHECK(cache->Match(b).matched_tokens == 8);
  CHECK(cache->Sizes().nodes == 1);
  CHECK(cache->Sizes().ram.used_bytes() == 2 * kPageBytes);
  CheckIntegrity(*cache);
}

TEST_CASE("match reports the deepest snapshot at or before the match end") {
  auto cache = OpenOrFail(RamConfig());
  const auto a = Seq(0, 16);
  Insert(*cache, a, {{4, MakePayload({1})}, {12, MakePayload({3})}});
  CHECK(cache->Match(a).snapshot_position == 12);
  CHECK(cache->Match(Seq(0, 11)).snapshot_position == 4);  // matches 8 tokens
  REQUIRE(cache->AddSnapshot(a, 8, MakePayload({2})).ok());
  CHECK(cache->Match(Seq(0, 11)).snapshot_position == 8);
  auto h = cache->Acquire(Seq(0, 11));
  REQUIRE(h.ok());
  CHECK(h->snapshot_position() == 8);
  CHECK(*h->snapshot() == std::vector<uint8_t>{2});
  CHECK(cache->AddSnapshot(a, 6, MakePayload({9})).code() == StatusCode::kInvalidArgument);
  CHECK(cache->AddSnapshot(Seq(7, 8), 8, MakePayload({9})).code() == StatusCode::kNotFound);
  CHECK(cache->Insert(a, Provider(a), std::vector<SnapshotInput>{{20, MakePayload({1})}}).status().code() ==
        StatusCode::kInvalidArgument);
  CheckIntegrity(*cache);
}

TEST_CASE("a pinned prefix survives eviction and is released with its handle") {
  auto cache = OpenOrFail(RamConfig(10 * kPageBytes));  // RAM only: evicted pages are dropped
  const auto a = Seq(0, 16);
  Insert(*cache, a);
  {
    auto h = cache->Acquire(a);
    REQUIRE(h.ok());
    for (TokenId t = 1; t <= 5; ++t) Insert(*cache, Seq(1000 * t, 16));
    CHECK(cache->Match(a).ram_tokens == 16);
    CHECK(cache->Sizes().ram.protected_bytes == 4 * kPageBytes);
    CHECK(cache->Sizes().ram.used_bytes() <= 10 * kPageBytes);
    CheckPayloads(*h, a);
    CheckIntegrity(*cache);
  }
  CHECK(cache->Sizes().ram.protected_bytes == 0);
  Insert(*cache, Seq(9000, 24));
  Insert(*cache, Seq(9500, 24));
  CHECK(cache->Match(a).matched_tokens == 0);  // unpinned and least recently used: dropped
  CHECK(cache->Counters().pages_dropped > 0);
  CheckIntegrity(*cache);
}

TEST_CASE("a handle stays valid when its node is split by a later insert") {
  auto cache = OpenOrFail(RamConfig());
  const auto a = Seq(0, 16);
  Insert(*cache, a);
  auto h = cache->Acquire(a);
  REQUIRE(h.ok());
  Insert(*cache, Concat(Seq(0, 4), Seq(77, 8)));         // splits a's node after page 1
  REQUIRE(cache->AddSnapshot(a, 8, MakePayload({5})).ok());  // and after page 2
  CHECK(cache->Sizes().nodes == 4);
  CheckIntegrity(*cache);
  h->Release();
  CHECK(cache->Sizes().ram.protected_bytes == 0);
  CheckIntegrity(*cache);
}

TEST_CASE("snapshots are evicted before any page") {
  auto cache = OpenOrFail(RamConfig(10 * kPageBytes + 200));
  const auto a = Seq(0, 16);
  const auto b = Seq(100, 16);
  Insert(*cache, a, {{8, MakePayload(std::vector<uint8_t>(200))}});
  Insert(*cache, b, {{16, MakePayload(std::vector<uint8_t>(200))}});  // newer snapshot
  CHECK(cache->Sizes().ram.used_bytes() == 8 * kPageBytes + 400);
  Insert(*cache, Seq(200, 8));  // needs 200 bytes: one snapshot goes, the older one
  CHECK(cache->Counters().snapshots_dropped == 1);
  CHECK(cache->Counters().pages_dropped == 0);
  CHECK(cache->Match(a).snapshot_position == 0);
  CHECK(cache->Match(b).snapshot_position == 16);
  Insert(*cache, Seq(300, 8));  // the other snapshot goes before any page
  CHECK(cache->Counters().snapshots_dropped == 2);
  CHECK(cache->Counters().pages_dropped == 0);
  Insert(*cache, Seq(400, 8));  // only now pages: the least recently used leaf, a's tail
  CHECK(cache->Counters().pages_dropped == 2);
  CHECK(cache->Match(a).matched_tokens == 8);
  CHECK(cache->Match(b).matched_tokens == 16);
  CheckIntegrity(*cache);
}

TEST_CASE("a digest collision never returns another prompt's payload") {
  PrefixCacheConfig c = RamConfig();
  c.page_digest = [](uint64_t, std::span<const TokenId>, ModelFingerprint, TenantSalt) -> uint64_t { return 42; };
  auto cache = OpenOrFail(std::move(c));
  const auto a = Seq(0, 12);
  const auto b = Seq(50, 12);                       // same digests as a, other tokens
  const auto c2 = Concat(Seq(0, 4), Seq(60, 8));    // shares a's first page only
  Insert(*cache, a);
  CHECK(cache->Match(b).matched_tokens == 0);
  CHECK(cache->Match(c2).matched_tokens == 4);
  Insert(*cache, b);
  Insert(*cache, c2);
  for (const auto* p : {&a, &b, &c2}) {
    auto h = cache->Acquire(*p);
    REQUIRE(h.ok());
    CHECK(h->tokens() == 12);
    CheckPayloads(*h, *p);
  }
  CheckIntegrity(*cache);
}

TEST_CASE("tenants with different salts do not share prefixes") {
  auto cache = OpenOrFail(RamConfig());
  const auto a = Seq(0, 8);
  Insert(*cache, a, {}, /*salt=*/7);
  CHECK(cache->Match(a, 7).matched_tokens == 8);
  CHECK(cache->Match(a, 8).matched_tokens == 0);
  CHECK(cache->Match(a).matched_tokens == 0);
  CheckIntegrity(*cache);
}

TEST_CASE("a soft pin holds its prefix until its TTL passes") {
  auto now = std::make_shared<std::chrono::milliseconds>(0);
  PrefixCacheConfig c = RamConfig(10 * kPageBytes);
  c.clock = [now] { return *now; };
  c.soft_pin_max_share = 0.5;
  auto cache = OpenOrFail(std::move(c));
  const auto system_prompt = Seq(0, 16);
  Insert(*cache, system_prompt);
  auto pinned = cache->SoftPin(system_prompt, kNoTenant, std::chrono::milliseconds(1000));
  REQUIRE(pinned.ok());
  CHECK(*pinned == 16);
  CHECK(cache->Sizes().soft_pinned_ram_bytes == 4 * kPageBytes);
  for (TokenId t = 1; t <= 4; ++t) Insert(*cache, Seq(1000 * t, 16));
  CHECK(cache->Match(system_prompt).ram_tokens == 16);

  *now = std::chrono::milliseconds(999);
  Insert(*cache, Seq(9000, 16));
  CHECK(cache->Match(system_prompt).ram_tokens == 16);
  *now = std::chrono::milliseconds(1000);
  Insert(*cache, Seq(9100, 16));  // the pin expires first, then the prefix is the oldest
  CHECK(cache->Counters().soft_pins_expired == 1);
  CHECK(cache->Match(system_prompt).matched_tokens == 0);
  CheckIntegrity(*cache);
}

TEST_CASE("soft pins beyond their share of RAM make the oldest yield") {
  auto now = std::make_shared<std::chrono::milliseconds>(0);
  PrefixCacheConfig c = RamConfig(10 * kPageBytes);
  c.clock = [now] { return *now; };
  c.soft_pin_max_share = 0.5;  // 500 bytes
  auto cache = OpenOrFail(std::move(c));
  const auto tools = Seq(0, 12);     // 300 bytes
  const auto system = Seq(100, 12);  // 300 bytes
  const auto huge = Seq(200, 24);    // 600 bytes
  Insert(*cache, tools);
  Insert(*cache, system);
  REQUIRE(cache->SoftPin(tools).ok());
  REQUIRE(cache->SoftPin(system).ok());
  CHECK(cache->Counters().soft_pins_yielded == 1);
  CHECK(cache->Sizes().soft_pinned_ram_bytes == 3 * kPageBytes);
  CHECK(cache->SoftUnpin(tools).code() == StatusCode::kNotFound);  // it yielded
  Insert(*cache, huge);
  CHECK(cache->SoftPin(huge).status().code() == StatusCode::kResourceExhausted);
  CHECK(cache->Sizes().soft_pinned_ram_bytes == 3 * kPageBytes);  // system is still pinned
  CHECK(cache->SoftUnpin(system).ok());
  CHECK(cache->Sizes().soft_pinned_ram_bytes == 0);
  CheckIntegrity(*cache);
}

TEST_CASE("acquire never pins more than the RAM budget") {
  auto cache = OpenOrFail(RamConfig(6 * kPageBytes));
  const auto a = Seq(0, 16);
  const auto b = Seq(100, 16);
  Insert(*cache, a);
  auto ha = cache->Acquire(a);
  REQUIRE(ha.ok());
  // b does not fit next to the pinned a: its first two pages are admitted, the rest refused.
  auto r = cache->Insert(b, Provider(b), std::vector<SnapshotInput>{{16, MakePayload({1})}});
  REQUIRE(r.ok());
  CHECK(r->stored_tokens == 8);
  CHECK(r->refused_tokens == 8);
  CHECK(r->refused_snapshots == std::vector<size_t>{16});
  CHECK(cache->Match(b).matched_tokens == 8);
  CHECK(cache->Sizes().ram.protected_bytes == 4 * kPageBytes);
  CheckIntegrity(*cache);
}

TEST_CASE("inserts beside pinned state never take RAM over the budget, and what fits is admitted") {
  // 10 pages of budget; pins hold 4, then 8: inserts get what is left and are told what was
  // refused; RAM use never exceeds the budget, not even inside an Insert (every eviction
  // happens before the new pages arrive, so the peak is checked through the pages dropped).
  auto cache = OpenOrFail(RamConfig(10 * kPageBytes));
  const auto a = Seq(0, 16), b = Seq(100, 16), c = Seq(200, 40);
  Insert(*cache, a);
  Insert(*cache, b);
  auto ha = cache->Acquire(a);
  auto hb = cache->Acquire(b);
  REQUIRE((ha.ok() && hb.ok()));
  CHECK(cache->Sizes().ram.protected_bytes == 8 * kPageBytes);
  auto r = cache->Insert(c, Provider(c));
  REQUIRE(r.ok());
  CHECK(r->stored_tokens == 8);  // two pages fit beside the pinned eight
  CHECK(r->refused_tokens == 32);
  CHECK(cache->Sizes().ram.used_bytes() <= 10 * kPageBytes);
  CheckIntegrity(*cache);
  // A snapshot on a pinned prefix that does not fit is refused, and the old one stays.
  REQUIRE(cache->AddSnapshot(a, 8, MakePayload({7})).ok());
  CHECK(cache->AddSnapshot(a, 8, MakePayload(std::vector<uint8_t>(3 * kPageBytes))).code() ==
        StatusCode::kResourceExhausted);
  CHECK(*cache->Acquire(a)->snapshot() == std::vector<uint8_t>{7});
  CheckIntegrity(*cache);
  // Released pins make room again: the same insert now stores everything.
  ha->Release();
  hb->Release();
  r = cache->Insert(c, Provider(c));
  REQUIRE(r.ok());
  CHECK(r->stored_tokens == 40);
  CHECK(r->refused_tokens == 0);
  CHECK(cache->Sizes().ram.used_bytes() <= 10 * kPageBytes);
  CheckPayloads(*cache->Acquire(c), c);
  CheckIntegrity(*cache);
}

TEST_CASE("an insert makes room for its own snapshot from older state instead of dropping it") {
  // Older snapshots go before pages when the budget is enforced; the snapshot just cut at a
  // prompt's end is the one its next turn needs, so the insert evicts older pages for it first.
  auto cache = OpenOrFail(RamConfig(10 * kPageBytes));
  const auto a = Seq(0, 32), b = Seq(100, 8);
  Insert(*cache, a);
  Insert(*cache, b, {{8, MakePayload(std::vector<uint8_t>(150))}});
  CHECK(cache->Match(b).snapshot_position == 8);
  CHECK(cache->Counters().snapshots_dropped == 0);
  CHECK(cache->Sizes().ram.used_bytes() <= 10 * kPageBytes);
  CheckIntegrity(*cache);
}

TEST_CASE("open rejects a bad configuration") {
  PrefixCacheConfig c = RamConfig();
  c.page_tokens = 6;
  CHECK(PrefixCache::Open(1, c).status().code() == StatusCode::kInvalidArgument);
  c.page_tokens = 1;
  CHECK(PrefixCache::Open(1, c).status().code() == StatusCode::kInvalidArgument);
  c = RamConfig();
  c.soft_pin_max_share = 1.5;
  CHECK(PrefixCache::Open(1, c).status().code() == StatusCode::kInvalidArgument);
}

}  // namespace cedar::cache
