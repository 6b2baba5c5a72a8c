// Prefix cache behaviours of the disk tier (LMDB in a temporary directory): spill and load,
// restart, fingerprints, corruption, budgets, collisions; snapshots on disk.
#include <doctest/doctest.h>
#include <lmdb.h>
#include <stdlib.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <numeric>

#include "cache/prefix_cache.h"
#include "tests/cache_test_util.h"

namespace cedar::cache {
namespace {

using namespace testing;

constexpr size_t kEntryBytes = 80 + kPage * sizeof(TokenId) + kPageBytes;  // header + tokens + payload
constexpr size_t kSnapshotHeader = 80;  // a snapshot entry is this header + its payload

struct TempDir {
  std::string path;
  TempDir() {
    char name[] = "/tmp/cedar_cache_test_XXXXXX";
    REQUIRE(mkdtemp(name) != nullptr);
    path = name;
  }
  ~TempDir() { std::filesystem::remove_all(path); }
};

PrefixCacheConfig DiskConfig(const std::string& dir, uint64_t ram_budget = 1 << 20, uint64_t disk_budget = 1 << 20) {
  PrefixCacheConfig c;
  c.page_tokens = kPage;
  c.ram_budget_bytes = ram_budget;
  c.disk_dir = dir;
  c.disk_budget_bytes = disk_budget;
  c.sync_disk_writes = false;
  return c;
}

void Insert(PrefixCache& cache, const std::vector<TokenId>& tokens, std::vector<SnapshotInput> snapshots = {},
            size_t bytes = kPageBytes) {
  auto r = cache.Insert(tokens, Provider(tokens, nullptr, bytes), snapshots);
  REQUIRE_MESSAGE(r.ok(), r.status().ToString());
}

// Deterministic pseudo-random bytes: a snapshot payload that no other test value equals.
Payload Blob(size_t bytes, uint32_t seed) {
  std::vector<uint8_t> b(bytes);
  uint32_t x = seed * 2654435761u + 1;
  for (auto& v : b) {
    x ^= x << 13, x ^= x >> 17, x ^= x << 5;
    v = static_cast<uint8_t>(x);
  }
  return MakePayload(std::move(b));
}

using Bytes = std::vector<uint8_t>;

// Opens the cache directory with raw LMDB (the cache must be closed) and lets `edit` change
// values in place, given their keys; returns how many it changed. Page keys are 16 bytes
// (fingerprint, digest), snapshot keys 17 (then 'S').
int RewriteKeyedEntries(const std::string& dir, const std::function<bool(const Bytes& key, Bytes& value)>& edit) {
  MDB_env* env = nullptr;
  REQUIRE(mdb_env_create(&env) == 0);
  REQUIRE(mdb_env_open(env, dir.c_str(), 0, 0644) == 0);
  MDB_txn* txn = nullptr;
  REQUIRE(mdb_txn_begin(env, nullptr, 0, &txn) == 0);
  MDB_dbi dbi;
  REQUIRE(mdb_dbi_open(txn, nullptr, 0, &dbi) == 0);
  MDB_cursor* cursor = nullptr;
  REQUIRE(mdb_cursor_open(txn, dbi, &cursor) == 0);
  std::vector<std::pair<std::vector<uint8_t>, std::vector<uint8_t>>> changed;
  MDB_val k, v;
  for (int rc = mdb_cursor_get(cursor, &k, &v, MDB_FIRST); rc == 0; rc = mdb_cursor_get(cursor, &k, &v, MDB_NEXT)) {
    const auto* kb = static_cast<const uint8_t*>(k.mv_data);
    const auto* vb = static_cast<const uint8_t*>(v.mv_data);
    std::vector<uint8_t> key(kb, kb + k.mv_size);
    std::vector<uint8_t> value(vb, vb + v.mv_size);
    if (edit(key, value)) changed.emplace_back(std::move(key), std::move(value));
  }
  mdb_cursor_close(cursor);
  for (auto& [key, value] : changed) {
    MDB_val kk{key.size(), key.data()};
    MDB_val vv{value.size(), value.data()};
    REQUIRE(mdb_put(txn, dbi, &kk, &vv, 0) == 0);
  }
  REQUIRE(mdb_txn_commit(txn) == 0);
  mdb_env_close(env);
  return static_cast<int>(changed.size());
}

// The same for page entries only. Header layout: page_index at byte 8, tokens from byte 80.
int RewriteEntries(const std::string& dir, const std::function<bool(Bytes&)>& edit) {
  return RewriteKeyedEntries(dir, [&](const Bytes& key, Bytes& value) { return key.size() == 16 && edit(value); });
}

// The same for snapshot entries only. Header layout: position (uint64) at byte 32.
int RewriteSnapshots(const std::string& dir, const std::function<bool(Bytes& value)>& edit) {
  return RewriteKeyedEntries(dir, [&](const Bytes& key, Bytes& value) { return key.size() == 17 && edit(value); });
}

uint64_t PositionOf(const Bytes& snapshot_value) {
  uint64_t p;
  std::memcpy(&p, snapshot_value.data() + 32, sizeof(p));
  return p;
}

uint32_t PageIndexOf(const std::vector<uint8_t>& value) {
  uint32_t i;
  std::memcpy(&i, value.data() + 8, sizeof(i));
  return i;
}

TokenId FirstTokenOf(const std::vector<uint8_t>& value) {
  TokenId t;
  std::memcpy(&t, value.data() + 80, sizeof(t));
  return t;
}

}  // namespace

TEST_CASE("pages spill to disk and a match loads them back as a disk hit") {
  TempDir dir;
  auto cache = OpenOrFail(DiskConfig(dir.path, 10 * kPageBytes));
  const auto a = Seq(0, 16);
  Insert(*cache, a);
  Insert(*cache, Seq(100, 16));
  Insert(*cache, Seq(200, 16));  // a, the least recently used, spills
  CHECK(cache->Counters().pages_spilled == 4);
  CHECK(cache->Counters().pages_dropped == 0);
  const MatchResult m = cache->Match(a);
  CHECK(m.matched_tokens == 16);
  CHECK(m.disk_tokens == 16);
  CHECK(cache->Sizes().disk.used_bytes() == 4 * kEntryBytes);
  {
    auto h = cache->Acquire(a);
    REQUIRE(h.ok());
    CHECK(h->tokens() == 16);
    CheckPayloads(*h, a);
    CHECK(cache->Counters().disk_hit_tokens == 16);
    CHECK(cache->Counters().ram_hit_tokens == 0);
    CHECK(cache->Match(a).ram_tokens == 16);
    CheckIntegrity(*cache);
  }
  CHECK(cache->Sizes().disk.used_bytes() == 8 * kEntryBytes);  // a kept its entries; the next LRU spilled
  CheckIntegrity(*cache);
}

TEST_CASE("flush writes RAM pages to disk without changing RAM") {
  TempDir dir;
  auto cache = OpenOrFail(DiskConfig(dir.path));
  Insert(*cache, Seq(0, 16));
  const uint64_t ram = cache->Sizes().ram.used_bytes();
  REQUIRE(cache->Flush().ok());
  CHECK(cache->Sizes().ram.used_bytes() == ram);
  CHECK(cache->Sizes().disk_pages == 4);
  CheckIntegrity(*cache);
}

TEST_CASE("a restarted cache finds the previous prefixes on disk") {
  TempDir dir;
  const auto a = Seq(0, 16);
  const auto b = Seq(100, 10);
  {
    auto cache = OpenOrFail(DiskConfig(dir.path));
    Insert(*cache, a, {{8, MakePayload({1, 2, 3})}});
    Insert(*cache, b);
  }  // closing flushes the RAM pages
  auto cache = OpenOrFail(DiskConfig(dir.path));
  CheckIntegrity(*cache);
  const MatchResult m = cache->Match(a);
  CHECK(m.matched_tokens == 16);
  CHECK(m.disk_tokens == 16);
  CHECK(m.snapshot_position == 8);  // flushed at close with the pages
  CHECK(m.snapshot_on_disk);
  CHECK(cache->Match(b).matched_tokens == 8);
  auto h = cache->Acquire(a);
  REQUIRE(h.ok());
  CheckPayloads(*h, a);
  CHECK(h->snapshot_position() == 8);
  CHECK(*h->snapshot() == std::vector<uint8_t>{1, 2, 3});
  CHECK(cache->Counters().disk_hit_tokens == 16);
  h->Release();
  const auto longer = [&] { auto v = a; v.insert(v.end(), {7, 7, 7, 7}); return v; }();
  auto r = cache->Insert(longer, Provider(longer));
  REQUIRE(r.ok());
  CHECK(r->cached_tokens == 16);
  CheckIntegrity(*cache);
}

TEST_CASE("a different fingerprint does not read another model's entries") {
  TempDir dir;
  const auto a = Seq(0, 16);
  {
    auto cache = OpenOrFail(DiskConfig(dir.path), /*fp=*/1);
    Insert(*cache, a);
  }
  {
    auto other = OpenOrFail(DiskConfig(dir.path), /*fp=*/2);
    CHECK(other->Match(a).matched_tokens == 0);
    CHECK(other->Sizes().disk.used_bytes() == 0);
    CheckIntegrity(*other);
  }
  auto cache = OpenOrFail(DiskConfig(dir.path), /*fp=*/1);
  CHECK(cache->Match(a).matched_tokens == 16);
}

TEST_CASE("a corrupt payload on disk is detected, counted and never returned") {
  TempDir dir;
  const auto a = Seq(0, 16);
  {
    auto cache = OpenOrFail(DiskConfig(dir.path));
    Insert(*cache, a);
  }
  const int corrupted = RewriteEntries(dir.path, [](std::vector<uint8_t>& v) {
    if (PageIndexOf(v) != 2) return false;
    v.back() ^= 0x5a;  // last payload byte
    return true;
  });
  REQUIRE(corrupted == 1);
  auto cache = OpenOrFail(DiskConfig(dir.path));
  CHECK(cache->Match(a).matched_tokens == 16);  // metadata is intact; the payload is read lazily
  auto h = cache->Acquire(a);
  REQUIRE(h.ok());
  CHECK(h->tokens() == 8);  // the verified pages before the bad one are kept
  CheckPayloads(*h, a);
  CHECK(cache->Counters().corrupt_entries_dropped == 1);
  CHECK(cache->Match(a).matched_tokens == h->tokens());
  h->Release();
  CheckIntegrity(*cache);  // the dropped entries are gone from LMDB too
}

TEST_CASE("a corrupt or truncated entry header is dropped at open") {
  TempDir dir;
  const auto a = Seq(0, 16);
  const auto b = Seq(100, 16);
  {
    auto cache = OpenOrFail(DiskConfig(dir.path));
    Insert(*cache, a);
    Insert(*cache, b);
  }
  const int edited = RewriteEntries(dir.path, [](std::vector<uint8_t>& v) {
    if (PageIndexOf(v) == 2 && FirstTokenOf(v) == 8) {  // a's third page: flip a token byte
      v[81] ^= 1;
      return true;
    }
    if (PageIndexOf(v) == 1 && FirstTokenOf(v) == 104) {  // b's second page: truncate
      v.resize(v.size() / 2);
      return true;
    }
    return false;
  });
  REQUIRE(edited == 2);
  auto cache = OpenOrFail(DiskConfig(dir.path));
  CHECK(cache->Counters().corrupt_entries_dropped == 2);
  CHECK(cache->Counters().orphan_entries_dropped == 3);  // the pages after them
  CHECK(cache->Match(a).matched_tokens == 8);
  CHECK(cache->Match(b).matched_tokens == 4);
  auto h = cache->Acquire(a);
  REQUIRE(h.ok());
  CheckPayloads(*h, a);
  h->Release();
  CheckIntegrity(*cache);
}

TEST_CASE("a missing cache directory is an error at open") {
  auto missing = PrefixCache::Open(1, DiskConfig("/nonexistent/cedar-cache"));
  CHECK(missing.status().code() == StatusCode::kIOError);
  CHECK(missing.status().message().find("/nonexistent/cedar-cache") != std::string::npos);

  TempDir dir;
  const std::string file = dir.path + "/not-a-dir";
  std::ofstream(file) << "x";
  CHECK(PrefixCache::Open(1, DiskConfig(file)).status().code() == StatusCode::kIOError);

  auto ram_only = PrefixCache::Open(1, DiskConfig(""));  // an empty directory asks for RAM only
  REQUIRE(ram_only.ok());
  CHECK(!(*ram_only)->has_disk_tier());
}

TEST_CASE("a full disk budget deletes the oldest entries") {
  TempDir dir;
  auto cache = OpenOrFail(DiskConfig(dir.path, 4 * kPageBytes, 10 * kEntryBytes));
  std::vector<std::vector<TokenId>> prompts;
  for (TokenId p = 0; p < 6; ++p) {
    prompts.push_back(Seq(100 * p, 16));
    Insert(*cache, prompts.back());
    CheckIntegrity(*cache);
  }
  CHECK(cache->Sizes().disk.used_bytes() <= 10 * kEntryBytes);
  CHECK(cache->Counters().disk_entries_deleted >= 8);
  CHECK(cache->Match(prompts[0]).matched_tokens == 0);
  CHECK(cache->Match(prompts[4]).disk_tokens == 16);
  CHECK(cache->Match(prompts[5]).ram_tokens == 16);
}

TEST_CASE("a write larger than the disk budget is refused cleanly") {
  TempDir dir;
  auto cache = OpenOrFail(DiskConfig(dir.path, 1500, 500));
  const auto a = Seq(0, 4);
  Insert(*cache, a, {}, /*bytes=*/1000);
  Insert(*cache, Seq(10, 4), {}, /*bytes=*/1000);  // a must leave RAM, and cannot go to disk
  CHECK(cache->Counters().disk_write_failures == 1);
  CHECK(cache->Counters().pages_dropped == 1);
  CHECK(cache->Match(a).matched_tokens == 0);
  CHECK(cache->Sizes().disk.used_bytes() == 0);
  CheckIntegrity(*cache);
}

TEST_CASE("colliding digests never return a wrong payload, before or after a restart") {
  TempDir dir;
  auto collide = [](uint64_t, std::span<const TokenId>, ModelFingerprint, TenantSalt) -> uint64_t { return 42; };
  PrefixCacheConfig c = DiskConfig(dir.path, kPageBytes + 50);  // one page of RAM
  c.page_digest = collide;
  const auto a = Seq(0, 4);
  const auto b = Seq(50, 4);
  const auto a2 = [&] { auto v = a; v.insert(v.end(), {9, 9, 9, 9}); return v; }();
  {
    auto cache = OpenOrFail(c);
    for (const auto* p : {&a, &b, &a2, &b}) {
      Insert(*cache, *p);
      CheckIntegrity(*cache);
    }
    CHECK(cache->Counters().disk_write_failures >= 1);  // one key for every page
  }
  auto cache = OpenOrFail(c);
  CheckIntegrity(*cache);
  for (const auto* p : {&a, &b, &a2}) {
    auto h = cache->Acquire(*p);
    REQUIRE(h.ok());
    CheckPayloads(*h, *p);
  }
  cache.reset();
  c.page_digest = nullptr;  // the default digest does not verify those entries: dropped at open
  cache = OpenOrFail(c);
  CHECK(cache->Counters().corrupt_entries_dropped == 1);
  CHECK(cache->Match(a).matched_tokens == 0);
  CheckIntegrity(*cache);
}

}  // namespace cedar::cache

// ---- Snapshots on disk ----

namespace cedar::cache {

TEST_CASE("a flushed snapshot survives a restart and comes back byte-identical through Acquire") {
  TempDir dir;
  const auto a = Seq(0, 16);
  const Payload s8 = Blob(300, 1);
  const Payload s16 = Blob(1000, 2);
  {
    auto cache = OpenOrFail(DiskConfig(dir.path));
    Insert(*cache, a, {{8, s8}, {16, s16}});
    REQUIRE(cache->Flush().ok());
    CHECK(cache->Sizes().disk_snapshots == 2);
    CHECK(cache->Sizes().disk.used_bytes() == 4 * kEntryBytes + 2 * kSnapshotHeader + 300 + 1000);
    CheckIntegrity(*cache);
  }
  auto cache = OpenOrFail(DiskConfig(dir.path));
  CheckIntegrity(*cache);
  CHECK(cache->Sizes().snapshots == 2);
  CHECK(cache->Sizes().disk_snapshots == 2);
  CHECK(cache->Sizes().ram.used_bytes() == 0);  // payloads are read lazily
  CHECK(cache->Sizes().disk.used_bytes() == 4 * kEntryBytes + 2 * kSnapshotHeader + 300 + 1000);
  MatchResult m = cache->Match(a);
  CHECK(m.snapshot_position == 16);
  CHECK(m.snapshot_on_disk);
  CHECK(cache->Match(Seq(0, 15)).snapshot_position == 8);
  {
    auto h = cache->Acquire(a);
    REQUIRE(h.ok());
    CheckPayloads(*h, a);
    REQUIRE(h->snapshot_position() == 16);
    CHECK(*h->snapshot() == *s16);
    CHECK(cache->Counters().snapshots_loaded == 1);  // only the deepest snapshot is read
    CHECK(cache->Sizes().ram.protected_bytes == 4 * kPageBytes + 1000);
    CHECK(!cache->Match(a).snapshot_on_disk);
    auto shorter = cache->Acquire(Seq(0, 15));
    REQUIRE(shorter.ok());
    REQUIRE(shorter->snapshot_position() == 8);
    CHECK(*shorter->snapshot() == *s8);
    CHECK(cache->Counters().snapshots_loaded == 2);
    CheckIntegrity(*cache);
  }
  CHECK(cache->Counters().corrupt_entries_dropped == 0);
  CheckIntegrity(*cache);
}

TEST_CASE("RAM pressure spills a snapshot to disk instead of dropping it, and Acquire loads it back") {
  TempDir dir;
  const auto a = Seq(0, 16);
  const Payload snap = Blob(200, 3);
  auto cache = OpenOrFail(DiskConfig(dir.path, 10 * kPageBytes + 200));
  Insert(*cache, a, {{16, snap}});
  Insert(*cache, Seq(100, 16));
  Insert(*cache, Seq(200, 12));  // 200 bytes over: the snapshot leaves RAM, before any page
  CHECK(cache->Counters().snapshots_spilled == 1);
  CHECK(cache->Counters().snapshots_dropped == 0);
  CHECK(cache->Counters().pages_spilled == 0);
  CHECK(cache->Sizes().disk_pages == 4);  // a snapshot lands on disk with its pages
  CHECK(cache->Sizes().disk_snapshots == 1);
  MatchResult m = cache->Match(a);
  CHECK(m.ram_tokens == 16);
  CHECK(m.snapshot_position == 16);
  CHECK(m.snapshot_on_disk);
  CheckIntegrity(*cache);
  {
    auto h = cache->Acquire(a);
    REQUIRE(h.ok());
    REQUIRE(h->snapshot_position() == 16);
    CHECK(*h->snapshot() == *snap);
    CHECK(cache->Counters().snapshots_loaded == 1);
    CheckIntegrity(*cache);
  }
  // Under pressure again, it leaves RAM first: its disk entry is still valid, nothing is written.
  const uint64_t pages_written = cache->Sizes().disk_pages;
  cache->EvictRamTo(cache->Sizes().ram.used_bytes() - 1);
  CHECK(cache->Counters().snapshots_spilled == 2);
  CHECK(cache->Sizes().disk_pages == pages_written);
  CHECK(cache->Counters().disk_write_failures == 0);
  CHECK(cache->Match(a).snapshot_on_disk);
  CheckIntegrity(*cache);

  // The same pressure on a RAM-only cache loses the snapshot.
  auto ram_only = OpenOrFail(DiskConfig("", 10 * kPageBytes + 200));
  Insert(*ram_only, a, {{16, snap}});
  Insert(*ram_only, Seq(100, 16));
  Insert(*ram_only, Seq(200, 12));
  CHECK(ram_only->Counters().snapshots_dropped == 1);
  CHECK(ram_only->Counters().snapshots_spilled == 0);
  CHECK(ram_only->Match(a).snapshot_position == 0);
}

TEST_CASE("a corrupt snapshot entry is dropped and counted, and Acquire returns the shallower snapshot") {
  TempDir dir;
  const auto a = Seq(0, 16);
  const Payload s8 = Blob(50, 4);
  {
    auto cache = OpenOrFail(DiskConfig(dir.path));
    Insert(*cache, a, {{8, s8}, {16, Blob(60, 5)}});
  }
  REQUIRE(RewriteSnapshots(dir.path, [](Bytes& v) {
            if (PositionOf(v) != 16) return false;
            v.back() ^= 0x5a;  // last payload byte: only the payload checksum can tell
            return true;
          }) == 1);
  auto cache = OpenOrFail(DiskConfig(dir.path));
  CHECK(cache->Match(a).snapshot_position == 16);  // the header is intact; the payload is read lazily
  {
    auto h = cache->Acquire(a);
    REQUIRE(h.ok());
    CHECK(h->tokens() == 16);  // the pages are fine
    CheckPayloads(*h, a);
    REQUIRE(h->snapshot_position() == 8);
    CHECK(*h->snapshot() == *s8);
    CHECK(cache->Counters().corrupt_entries_dropped == 1);
    CHECK(cache->Match(a).snapshot_position == 8);
    CHECK(cache->Sizes().disk_snapshots == 1);
  }
  CheckIntegrity(*cache);  // the bad entry is gone from LMDB too
  cache.reset();
  cache = OpenOrFail(DiskConfig(dir.path));
  CHECK(cache->Counters().corrupt_entries_dropped + cache->Counters().orphan_entries_dropped == 0);
  CHECK(cache->Match(a).snapshot_position == 8);
}

TEST_CASE("a snapshot entry with a bad header or under another prefix's key is dropped at open") {
  TempDir dir;
  const auto a = Seq(0, 16);
  const auto b = Seq(100, 16);
  {
    auto cache = OpenOrFail(DiskConfig(dir.path));
    Insert(*cache, a, {{8, Blob(40, 6)}, {16, Blob(40, 7)}});
    Insert(*cache, b, {{16, Blob(40, 8)}});
  }
  // Swap the values of the two snapshots at 16 (same size, same position), and break the
  // position field of the one at 8.
  std::vector<Bytes> at16;
  RewriteSnapshots(dir.path, [&](Bytes& v) {
    if (PositionOf(v) == 16) at16.push_back(v);
    return false;
  });
  REQUIRE(at16.size() == 2);
  int swapped = 0;
  REQUIRE(RewriteSnapshots(dir.path, [&](Bytes& v) {
            if (PositionOf(v) == 16) {
              v = at16[1 - swapped++];
            } else {
              v[32] ^= 0x10;
            }
            return true;
          }) == 3);
  auto cache = OpenOrFail(DiskConfig(dir.path));
  CHECK(cache->Counters().corrupt_entries_dropped == 3);
  CHECK(cache->Match(a).matched_tokens == 16);  // the pages are unaffected
  CHECK(cache->Match(a).snapshot_position == 0);
  CHECK(cache->Match(b).snapshot_position == 0);
  CHECK(cache->Sizes().disk_snapshots == 0);
  auto h = cache->Acquire(a);
  REQUIRE(h.ok());
  CHECK(h->snapshot_position() == 0);
  h->Release();
  CheckIntegrity(*cache);
}

TEST_CASE("deleting pages from disk deletes the snapshots at and below them") {
  TempDir dir;
  const auto a = Seq(0, 16);
  const auto b = [&] { auto v = Seq(0, 8); v.insert(v.end(), {9, 9, 9, 9, 9, 9, 9, 9}); return v; }();
  {
    auto cache = OpenOrFail(DiskConfig(dir.path));
    Insert(*cache, a, {{4, Blob(30, 9)}, {8, Blob(30, 10)}, {16, Blob(30, 11)}});
    Insert(*cache, b, {{16, Blob(30, 12)}});
  }
  // a's second page is bad: it and everything after it in the tree go, with their snapshots.
  REQUIRE(RewriteEntries(dir.path, [](Bytes& v) {
            if (PageIndexOf(v) != 1) return false;
            v.back() ^= 1;
            return true;
          }) == 1);
  auto cache = OpenOrFail(DiskConfig(dir.path));
  CHECK(cache->Sizes().disk_snapshots == 4);
  auto h = cache->Acquire(b);
  REQUIRE(h.ok());
  CHECK(h->tokens() == 4);
  CHECK(h->snapshot_position() == 4);  // the snapshot above the bad page stays
  CHECK(cache->Counters().corrupt_entries_dropped == 1);
  CHECK(cache->Counters().disk_snapshots_deleted == 3);  // at 8, and at 16 on both branches
  CHECK(cache->Sizes().disk_snapshots == 1);
  h->Release();
  CheckIntegrity(*cache);  // no snapshot entry is left without its pages
  cache.reset();
  cache = OpenOrFail(DiskConfig(dir.path));
  CHECK(cache->Counters().orphan_entries_dropped == 0);
  CHECK(cache->Sizes().disk_snapshots == 1);
  CheckIntegrity(*cache);
}

TEST_CASE("making disk room deletes a snapshot entry before its pages, and with them") {
  TempDir dir;
  constexpr uint64_t kSnap = kSnapshotHeader + 200;
  auto cache = OpenOrFail(DiskConfig(dir.path, 4 * kPageBytes, 8 * kEntryBytes + kSnap));
  const auto a = Seq(0, 16);
  Insert(*cache, a, {{16, Blob(200, 13)}});  // the snapshot spills, with a's pages
  CHECK(cache->Counters().snapshots_spilled == 1);
  Insert(*cache, Seq(100, 16));  // a's pages spill (already on disk)
  Insert(*cache, Seq(200, 4));   // b's pages spill: the disk is full
  CHECK(cache->Sizes().disk.used_bytes() == 8 * kEntryBytes + kSnap);
  Insert(*cache, Seq(300, 16));  // c's one page spills: a's snapshot entry alone makes room
  CHECK(cache->Counters().disk_snapshots_deleted == 1);
  CHECK(cache->Counters().disk_entries_deleted == 0);
  CHECK(cache->Match(a).matched_tokens == 16);
  CHECK(cache->Match(a).snapshot_position == 0);
  CheckIntegrity(*cache);
  Insert(*cache, Seq(400, 16));  // d's pages spill: now a's pages go
  CHECK(cache->Counters().disk_entries_deleted == 4);
  CHECK(cache->Match(a).matched_tokens == 0);
  CHECK(cache->Sizes().disk.used_bytes() <= 8 * kEntryBytes + kSnap);
  CheckIntegrity(*cache);
}

TEST_CASE("snapshot entries count in the disk budget; one that does not fit is dropped, its pages kept") {
  TempDir dir;
  const auto a = Seq(0, 16);
  {
    // Under RAM pressure: the pages fit on disk, the snapshot does not.
    auto cache = OpenOrFail(DiskConfig(dir.path, 4 * kPageBytes, 4 * kEntryBytes + 100));
    Insert(*cache, a, {{16, Blob(200, 14)}});
    CHECK(cache->Counters().snapshots_dropped == 1);
    CHECK(cache->Counters().snapshots_spilled == 0);
    CHECK(cache->Counters().disk_write_failures == 1);
    CHECK(cache->Sizes().disk_pages == 4);
    CHECK(cache->Match(a).snapshot_position == 0);
    CheckIntegrity(*cache);
    // A smaller one fits exactly.
    REQUIRE(cache->AddSnapshot(a, 16, Blob(20, 15)).ok());
    CHECK(cache->Counters().snapshots_spilled == 1);
    CHECK(cache->Sizes().disk.used_bytes() == 4 * kEntryBytes + kSnapshotHeader + 20);
    CHECK(cache->Sizes().disk.used_bytes() <= cache->Sizes().disk.budget_bytes);
    CheckIntegrity(*cache);
  }
  TempDir dir2;
  auto cache = OpenOrFail(DiskConfig(dir2.path, 1 << 20, 4 * kEntryBytes + 100));
  Insert(*cache, a, {{16, Blob(200, 16)}});
  const Status s = cache->Flush();  // the pages are written, the snapshot is not: not Ok
  CHECK(s.code() == StatusCode::kResourceExhausted);
  CHECK(cache->Sizes().disk_pages == 4);
  CHECK(cache->Sizes().disk_snapshots == 0);
  CHECK(cache->Match(a).snapshot_position == 16);  // RAM is unchanged
  CheckIntegrity(*cache);
}

TEST_CASE("replacing a snapshot deletes its disk copy at once; a restart never returns the old one") {
  TempDir dir;
  const auto a = Seq(0, 16);
  const Payload s1 = Blob(40, 17);
  const Payload s2 = Blob(50, 18);
  PrefixCacheConfig c = DiskConfig(dir.path);
  c.flush_on_close = false;
  {
    auto cache = OpenOrFail(c);
    Insert(*cache, a, {{16, s1}});
    REQUIRE(cache->Flush().ok());
    REQUIRE(cache->AddSnapshot(a, 16, MakePayload(*s1)).ok());  // equal bytes: the entry stays
    CHECK(cache->Sizes().disk_snapshots == 1);
    CHECK(cache->Counters().disk_snapshots_deleted == 0);
    REQUIRE(cache->AddSnapshot(a, 16, s2).ok());
    CHECK(cache->Sizes().disk_snapshots == 0);
    CHECK(cache->Counters().disk_snapshots_deleted == 1);
    CheckIntegrity(*cache);
  }  // closed without a flush: s2 is lost, and s1 must not come back
  {
    auto cache = OpenOrFail(c);
    CHECK(cache->Match(a).matched_tokens == 16);
    CHECK(cache->Match(a).snapshot_position == 0);
    Insert(*cache, a, {{16, s1}});  // onto pages that are only on disk
    REQUIRE(cache->Flush().ok());   // writes the snapshot alone
    CHECK(cache->Sizes().disk_snapshots == 1);
    Insert(*cache, a, {{16, s2}});  // Insert replaces too
    CHECK(cache->Sizes().disk_snapshots == 0);
    REQUIRE(cache->Flush().ok());
    CheckIntegrity(*cache);
  }
  auto cache = OpenOrFail(c);
  auto h = cache->Acquire(a);
  REQUIRE(h.ok());
  REQUIRE(h->snapshot_position() == 16);
  CHECK(*h->snapshot() == *s2);
}

}  // namespace cedar::cache
