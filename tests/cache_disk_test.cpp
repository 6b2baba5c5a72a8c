// Prefix cache behaviours of the disk tier (LMDB in a temporary directory): spill and load,
// restart, fingerprints, corruption, budgets, collisions.
#include <doctest/doctest.h>
#include <lmdb.h>
#include <stdlib.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <numeric>

#include "cache/prefix_cache.h"

namespace cedar::cache {
namespace {

constexpr size_t kPage = 4;
constexpr size_t kPageBytes = 100;
constexpr size_t kEntryBytes = 80 + kPage * sizeof(TokenId) + kPageBytes;  // header + tokens + payload

Payload PagePayload(std::span<const TokenId> prefix, size_t end, size_t bytes = kPageBytes) {
  std::vector<uint8_t> b(bytes);
  uint32_t h = 2166136261u;
  for (size_t i = 0; i < end; ++i) h = (h ^ static_cast<uint32_t>(prefix[i])) * 16777619u;
  for (size_t i = 0; i < bytes; ++i) b[i] = static_cast<uint8_t>((h >> (i % 4 * 8)) + i);
  return MakePayload(std::move(b));
}

PrefixCache::PageProvider Provider(std::vector<TokenId> tokens, size_t bytes = kPageBytes) {
  return [tokens = std::move(tokens), bytes](size_t page_index, std::span<const TokenId>) -> Result<Payload> {
    return PagePayload(tokens, (page_index + 1) * kPage, bytes);
  };
}

std::vector<TokenId> Seq(TokenId first, size_t n) {
  std::vector<TokenId> v(n);
  std::iota(v.begin(), v.end(), first);
  return v;
}

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

std::unique_ptr<PrefixCache> OpenOrFail(PrefixCacheConfig c, ModelFingerprint fp = 1) {
  auto cache = PrefixCache::Open(fp, std::move(c));
  REQUIRE_MESSAGE(cache.ok(), cache.status().ToString());
  return std::move(cache).value();
}

void Insert(PrefixCache& cache, const std::vector<TokenId>& tokens, std::vector<SnapshotInput> snapshots = {},
            size_t bytes = kPageBytes) {
  auto r = cache.Insert(tokens, Provider(tokens, bytes), snapshots);
  REQUIRE_MESSAGE(r.ok(), r.status().ToString());
}

void CheckPayloads(const PrefixHandle& h, const std::vector<TokenId>& tokens) {
  REQUIRE(h.pages().size() * kPage == h.tokens());
  for (size_t i = 0; i < h.pages().size(); ++i) {
    CHECK_MESSAGE(*h.pages()[i] == *PagePayload(tokens, (i + 1) * kPage), "page " << i);
  }
}

void CheckIntegrity(const PrefixCache& cache) {
  const Status s = cache.CheckIntegrity();
  CHECK_MESSAGE(s.ok(), s.ToString());
}

// Opens the cache directory with raw LMDB (the cache must be closed) and lets `edit` change
// values in place; returns how many it changed. Header layout: page_index at byte 8, tokens
// from byte 80.
int RewriteEntries(const std::string& dir, const std::function<bool(std::vector<uint8_t>&)>& edit) {
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
    std::vector<uint8_t> value(vb, vb + v.mv_size);
    if (edit(value)) changed.emplace_back(std::vector<uint8_t>(kb, kb + k.mv_size), std::move(value));
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
  CHECK(m.snapshot_position == 0);  // snapshots live in RAM only
  CHECK(cache->Match(b).matched_tokens == 8);
  auto h = cache->Acquire(a);
  REQUIRE(h.ok());
  CheckPayloads(*h, a);
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
