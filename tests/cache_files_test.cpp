// The disk tier's files: created private (0600 files in a 0700 directory, whatever the umask),
// a directory others can write refused; and a data file that is truncated, garbage or has a
// damaged B-tree is moved aside with one warning, the cache opens empty and serves correct
// payloads. A file written by ordinary use (spills, deletions, restarts) always passes the
// structural check (no false alarm throws a good cache away).
#include <doctest/doctest.h>
#include <sys/stat.h>

#include <filesystem>

#include "cache/disk_store.h"
#include "cache/lmdb_check.h"
#include "cache/prefix_cache.h"
#include "tests/cache_files_util.h"
#include "tests/cache_test_util.h"

namespace cedar::cache {
namespace {

using namespace testing;

PrefixCacheConfig FilesConfig(const std::string& dir, uint64_t ram_budget = 1 << 20, uint64_t disk_budget = 4 << 20) {
  PrefixCacheConfig c;
  c.page_tokens = kPage;
  c.ram_budget_bytes = ram_budget;
  c.disk_dir = dir;
  c.disk_budget_bytes = disk_budget;
  c.sync_disk_writes = false;
  return c;
}

// Prefix i: 64 tokens (16 pages) starting at 1000 * i.
std::vector<TokenId> PrefixOf(int i) { return Seq(static_cast<TokenId>(1000 * i), 64); }

// Fills `dir` with `prefixes` prefixes (all flushed to disk at close) and returns the data
// file's path.
std::string WriteCache(const std::string& dir, int prefixes) {
  auto cache = OpenOrFail(FilesConfig(dir));
  for (int i = 0; i < prefixes; ++i) {
    const auto t = PrefixOf(i);
    REQUIRE(cache->Insert(t, Provider(t)).ok());
  }
  return dir + "/data.mdb";
}

// After damage: the cache opens, has a fresh disk tier, warned exactly once naming the moved
// file, the damaged file and its lock file are kept aside, nothing old matches, and the cache
// stores and serves a new prefix (payloads verified), also after a restart.
void ExpectMovedAsideAndServing(const std::string& dir, int old_prefixes) {
  WarningCapture capture;
  {
    auto cache = OpenOrFail(FilesConfig(dir));
    CHECK(cache->has_disk_tier());
    const auto warnings = capture.warnings();
    REQUIRE_MESSAGE(warnings.size() == 1, capture.joined());
    CHECK(warnings[0].find("data.mdb.corrupt-") != std::string::npos);
    CHECK(FilesStartingWith(dir, "data.mdb.corrupt-").size() == 1);
    CHECK(FilesStartingWith(dir, "lock.mdb.corrupt-").size() == 1);
    for (int i = 0; i < old_prefixes; ++i) CHECK(cache->Match(PrefixOf(i)).matched_tokens == 0);
    const auto t = PrefixOf(7777);
    REQUIRE(cache->Insert(t, Provider(t)).ok());
    CheckIntegrity(*cache);
  }
  auto cache = OpenOrFail(FilesConfig(dir));  // the fresh file is good: no second warning
  CHECK_MESSAGE(capture.warnings().size() == 1, capture.joined());
  const auto t = PrefixOf(7777);
  auto h = cache->Acquire(t);
  REQUIRE(h.ok());
  CHECK(h->tokens() == t.size());
  CheckPayloads(*h, t);
  h->Release();
  CheckIntegrity(*cache);
}

}  // namespace

TEST_CASE("cache files are 0600 and a created directory 0700, whatever the umask") {
  for (mode_t mask : {mode_t{0}, mode_t{022}, mode_t{0277}}) {
    CAPTURE(mask);
    FilesTempDir parent;
    const std::string dir = parent.path + "/cache";  // missing: Open creates it
    const mode_t old = ::umask(mask);
    {
      auto cache = PrefixCache::Open(1, FilesConfig(dir));
      ::umask(old);
      REQUIRE_MESSAGE(cache.ok(), cache.status().ToString());
      const auto t = PrefixOf(1);
      REQUIRE((*cache)->Insert(t, Provider(t)).ok());
    }
    CHECK(ModeOf(dir) == 0700);
    CHECK(ModeOf(dir + "/data.mdb") == 0600);
    CHECK(ModeOf(dir + "/lock.mdb") == 0600);
  }
}

TEST_CASE("files left readable by others (an older version made them 0644) become 0600 at open") {
  FilesTempDir dir;
  WriteCache(dir.path, 1);
  REQUIRE(::chmod((dir.path + "/data.mdb").c_str(), 0644) == 0);
  REQUIRE(::chmod((dir.path + "/lock.mdb").c_str(), 0644) == 0);
  auto cache = OpenOrFail(FilesConfig(dir.path));
  CHECK(ModeOf(dir.path + "/data.mdb") == 0600);
  CHECK(ModeOf(dir.path + "/lock.mdb") == 0600);
  CHECK(cache->Match(PrefixOf(0)).matched_tokens == 64);  // and the entries are still there
}

TEST_CASE("a cache directory that group or others can write is refused, naming it and its mode") {
  for (mode_t mode : {mode_t{0777}, mode_t{0770}, mode_t{0703}}) {
    CAPTURE(mode);
    FilesTempDir dir;
    REQUIRE(::chmod(dir.path.c_str(), mode) == 0);
    auto cache = PrefixCache::Open(1, FilesConfig(dir.path));
    REQUIRE(!cache.ok());
    CHECK(cache.status().code() == StatusCode::kIOError);
    const std::string m = cache.status().message();  // a copy: status() returns a temporary
    CHECK_MESSAGE(m.find(dir.path) != std::string::npos, m);
    CHECK_MESSAGE(m.find(fmt::format("{:04o}", mode)) != std::string::npos, m);
    CHECK(!std::filesystem::exists(dir.path + "/data.mdb"));  // refused before any file is made
  }
  FilesTempDir readable;  // readable by others but writable only by its owner: accepted
  REQUIRE(::chmod(readable.path.c_str(), 0755) == 0);
  CHECK(PrefixCache::Open(1, FilesConfig(readable.path)).ok());
}

TEST_CASE("a truncated data file is moved aside; the cache opens empty and serves") {
  struct Cut {
    const char* name;
    size_t (*size)(size_t file, size_t psize);
  };
  const Cut cuts[] = {
      {"half, whole pages", [](size_t f, size_t p) { return f / 2 / p * p; }},
      {"half, a partial page", [](size_t f, size_t p) { return f / 2 / p * p + 123; }},
      {"the two meta pages only", [](size_t, size_t p) { return 2 * p; }},
      {"1000 bytes, inside the first meta page", [](size_t, size_t) { return size_t{1000}; }},
      {"empty", [](size_t, size_t) { return size_t{0}; }},
  };
  for (const Cut& cut : cuts) {
    const std::string name = cut.name;
    CAPTURE(name);
    FilesTempDir dir;
    const std::string data = WriteCache(dir.path, 40);
    const auto file = ReadFile(data);
    const size_t size = cut.size(file.size(), LmdbPageSize(file));
    REQUIRE(size < file.size());
    std::filesystem::resize_file(data, size);
    ExpectMovedAsideAndServing(dir.path, 40);
  }
}

TEST_CASE("a data file of garbage is moved aside; the cache opens empty and serves") {
  for (size_t bytes : {size_t{10}, size_t{4096 * 3}, size_t{1 << 20}}) {
    CAPTURE(bytes);
    FilesTempDir dir;
    WriteCache(dir.path, 3);
    FillWithGarbage(dir.path + "/data.mdb", bytes, bytes);
    ExpectMovedAsideAndServing(dir.path, 3);
  }
}

TEST_CASE("a data file with bit flips in its B-tree pages is moved aside; the cache opens empty and serves") {
  for (int flips : {1, 20, 500}) {
    for (uint64_t seed : {1, 2, 3}) {
      CAPTURE(flips);
      CAPTURE(seed);
      FilesTempDir dir;
      const std::string data = WriteCache(dir.path, 40);
      const size_t tree_pages = FlipTreeBits(data, flips, seed);
      CHECK(tree_pages >= 3);  // a real tree: branch and leaves
      const Status check = detail::CheckLmdbFile(data);
      if (check.ok()) {
        // A flip that changes nothing LMDB follows (free space of a page, key bytes that keep
        // the order): the file is usable and the cache's own checksums guard the entries.
        MESSAGE("flips left the structure intact");
        continue;
      }
      ExpectMovedAsideAndServing(dir.path, 40);
    }
  }
}

TEST_CASE("random bit flips anywhere in the data file never crash the cache or return a wrong payload") {
  for (uint64_t seed : {11, 12, 13, 14}) {
    CAPTURE(seed);
    FilesTempDir dir;
    const std::string data = WriteCache(dir.path, 40);
    FlipFileBits(data, 300, seed);
    WarningCapture capture;
    auto cache = OpenOrFail(FilesConfig(dir.path));
    CHECK(cache->has_disk_tier());
    for (int i = 0; i < 40; ++i) {
      const auto t = PrefixOf(i);
      auto h = cache->Acquire(t);
      REQUIRE(h.ok());
      CheckPayloads(*h, t);  // whatever is served was verified
      h->Release();
    }
    CHECK(!capture.warnings().empty());  // 300 flips in a ~200 KB file do not go unnoticed
    CheckIntegrity(*cache);
  }
}

TEST_CASE("a data file written by ordinary use (spills, evictions, restarts) passes the structural check") {
  // 100-byte payloads live in leaf pages, 5000-byte ones in overflow runs.
  for (size_t bytes : {size_t{100}, size_t{5000}}) {
    CAPTURE(bytes);
    FilesTempDir dir;
    WarningCapture capture;
    // A small RAM tier spills to disk, a small disk tier deletes the oldest entries.
    const PrefixCacheConfig c = FilesConfig(dir.path, /*ram_budget=*/200 * bytes, /*disk_budget=*/1500 * bytes);
    for (int round = 0; round < 5; ++round) {
      CAPTURE(round);
      {
        auto cache = OpenOrFail(c);
        for (int i = 0; i < 30; ++i) {
          const auto t = PrefixOf(round * 17 + i);
          REQUIRE(cache->Insert(t, Provider(t, nullptr, bytes)).ok());
          if (i % 3 == 0) {
            auto h = cache->Acquire(PrefixOf(round * 17 + i / 2));
            REQUIRE(h.ok());
            h->Release();
          }
        }
        CHECK(cache->Counters().disk_entries_deleted + cache->Counters().pages_spilled > 0);
      }
      detail::LmdbFileStats stats;
      const Status s = detail::CheckLmdbFile(dir.path + "/data.mdb", &stats);
      CHECK_MESSAGE(s.ok(), s.ToString());
      CHECK(stats.entries > 0);
      CHECK(stats.pages_walked > 0);
      if (bytes > 4096) CHECK(stats.overflow_pages > 0);
    }
    CHECK_MESSAGE(capture.warnings().empty(), capture.joined());
    CHECK(FilesStartingWith(dir.path, "data.mdb.corrupt-").empty());
  }
}

TEST_CASE("a damaged freelist record (LMDB would hand out pages from it) is found at open and the file moved aside") {
  FilesTempDir dir;
  {
    // Evictions on a small disk tier free pages, so the freelist has records.
    auto cache = OpenOrFail(FilesConfig(dir.path, /*ram_budget=*/20'000, /*disk_budget=*/150'000));
    for (int i = 0; i < 60; ++i) {
      const auto t = PrefixOf(i);
      REQUIRE(cache->Insert(t, Provider(t)).ok());
    }
    REQUIRE(cache->Counters().disk_entries_deleted > 0);
  }
  const std::string data = dir.path + "/data.mdb";
  REQUIRE(detail::CheckLmdbFile(data).ok());
  const auto file = ReadFile(data);
  const uint32_t psize = LmdbPageSize(file);
  // The freelist's root (the free database record's root, byte 80 of the meta in use) is a
  // leaf here; its first record's page count (the first 8 bytes of the value) becomes huge.
  uint64_t txn0, txn1, free_root;
  std::memcpy(&txn0, file.data() + 144, 8);
  std::memcpy(&txn1, file.data() + psize + 144, 8);
  std::memcpy(&free_root, file.data() + (txn0 < txn1 ? psize : 0) + 80, 8);
  REQUIRE(free_root >= 2);
  REQUIRE(free_root != ~uint64_t{0});
  const uint8_t* page = file.data() + free_root * psize;
  uint16_t flags, node_offset, key_bytes, node_flags;
  std::memcpy(&flags, page + 10, 2);
  REQUIRE((flags & 0x02) != 0);  // a leaf
  std::memcpy(&node_offset, page + 16, 2);
  std::memcpy(&node_flags, page + node_offset + 4, 2);
  std::memcpy(&key_bytes, page + node_offset + 6, 2);
  REQUIRE(node_flags == 0);  // the record sits in the leaf
  const uint64_t huge = uint64_t{1} << 40;
  PatchFile(data, free_root * psize + node_offset + 8 + key_bytes, &huge, sizeof(huge));
  const Status check = detail::CheckLmdbFile(data);
  CHECK_MESSAGE(check.message().find("freelist") != std::string::npos, check.ToString());
  ExpectMovedAsideAndServing(dir.path, 0);
}

namespace {

using detail::DiskStore;

// A store in `dir` holding one 300-byte page entry (small enough to sit in the root leaf page).
struct OneEntryStore {
  std::unique_ptr<DiskStore> store;
  std::vector<TokenId> tokens = Seq(0, kPage);
  std::vector<uint8_t> payload = std::vector<uint8_t>(300, 7);
  detail::PageMeta meta{/*digest=*/42, 0, kNoTenant, 0, 300, 1};

  explicit OneEntryStore(const std::string& dir) {
    auto opened = DiskStore::Open(dir, 1 << 20, /*fingerprint=*/1, kPage, /*sync_writes=*/false);
    REQUIRE_MESSAGE(opened.ok(), opened.status().ToString());
    store = std::move(opened).value();
    REQUIRE(Put().ok());
    std::vector<Payload> out;
    REQUIRE(Read(&out).ok());
  }
  Status Put() {
    const DiskStore::PageWrite write{meta, tokens, MakePayload(payload)};
    return store->Put({&write, 1});
  }
  Status Read(std::vector<Payload>* out) {
    const DiskStore::PageRead read{meta, tokens};
    return store->Read({&read, 1}, out);
  }
  // After the damage: one warning, the file aside, and the fresh file stores and serves.
  void ExpectReplaced(const WarningCapture& capture) {
    CHECK(store->files_moved_aside() == 1);
    CHECK(store->usable());
    CHECK(std::filesystem::exists(store->last_moved_aside()));
    REQUIRE_MESSAGE(capture.warnings().size() == 1, capture.joined());
    REQUIRE(Put().ok());
    std::vector<Payload> out;
    REQUIRE(Read(&out).ok());
    REQUIRE(out.size() == 1);
    CHECK(*out[0] == payload);
    CHECK(capture.warnings().size() == 1);
  }
};

}  // namespace

TEST_CASE("damage found at run time drops the file once; the store continues with a fresh one") {
  FilesTempDir dir;
  OneEntryStore s(dir.path);
  // Another writer damages the main tree's root page under the open map: its type becomes
  // "overflow" (LMDB answers MDB_CORRUPTED when it looks for a leaf there).
  const std::string data = dir.path + "/data.mdb";
  const auto file = ReadFile(data);
  const uint64_t root = MainRootPage(file);
  REQUIRE(root >= 2);
  const uint16_t overflow = 0x04;
  PatchFile(data, root * LmdbPageSize(file) + 10, &overflow, sizeof(overflow));

  WarningCapture capture;
  std::vector<Payload> out;
  CHECK(s.Read(&out).code() == StatusCode::kNotFound);  // like an entry that is gone
  s.ExpectReplaced(capture);
}

TEST_CASE("a value LMDB returns that reaches past the file's end is never read; the file is dropped") {
  FilesTempDir dir;
  OneEntryStore s(dir.path);
  // The root leaf's only node gets a data size of about 2 GB (its high 16 bits, bytes 2..3 of
  // the node, become 0x7fff): LMDB hands back a pointer into the page and that size.
  const std::string data = dir.path + "/data.mdb";
  const auto file = ReadFile(data);
  const uint32_t psize = LmdbPageSize(file);
  const uint64_t root = MainRootPage(file);
  uint16_t node_offset, flags;
  std::memcpy(&flags, file.data() + root * psize + 10, 2);
  REQUIRE((flags & 0x02) != 0);  // a leaf
  std::memcpy(&node_offset, file.data() + root * psize + 16, 2);
  const uint16_t high = 0x7fff;
  PatchFile(data, root * psize + node_offset + 2, &high, sizeof(high));

  WarningCapture capture;
  std::vector<Payload> out;
  CHECK(s.Read(&out).code() == StatusCode::kNotFound);
  CHECK(capture.joined().find("outside the file") != std::string::npos);
  s.ExpectReplaced(capture);
}

}  // namespace cedar::cache

namespace cedar::cache {
namespace {
using namespace testing;

TEST_CASE("damage the cache finds at run time: the tree forgets what was only on disk and stays consistent") {
  FilesTempDir dir;
  const std::string data = WriteCache(dir.path, 12);  // flushed at close: after reopening, all of it is disk-only
  auto cache = OpenOrFail(FilesConfig(dir.path));
  REQUIRE(cache->Match(PrefixOf(3)).matched_tokens == PrefixOf(3).size());
  // Another writer damages the main tree's root page under the open map (as in the store test
  // above); the next disk read finds it and the store swaps in a fresh file.
  const auto file = ReadFile(data);
  const uint64_t root = MainRootPage(file);
  REQUIRE(root >= 2);
  const uint16_t overflow = 0x04;
  PatchFile(data, root * LmdbPageSize(file) + 10, &overflow, sizeof(overflow));

  WarningCapture capture;
  auto h = cache->Acquire(PrefixOf(3));
  REQUIRE(h.ok());
  CHECK(h->tokens() == 0);  // nothing of it could be read
  h->Release();
  CHECK(!capture.warnings().empty());
  CheckIntegrity(*cache);  // no node still claims an entry of the file that was moved aside
  for (int i = 0; i < 12; ++i) CHECK(cache->Match(PrefixOf(i)).matched_tokens == 0);
  // The fresh file stores and serves; a restart finds it good.
  const auto t = PrefixOf(4242);
  REQUIRE(cache->Insert(t, Provider(t)).ok());
  REQUIRE(cache->Flush().ok());
  CheckIntegrity(*cache);
  cache.reset();
  auto again = OpenOrFail(FilesConfig(dir.path));
  auto h2 = again->Acquire(t);
  REQUIRE(h2.ok());
  CHECK(h2->tokens() == t.size());
  CheckPayloads(*h2, t);
  h2->Release();
  CheckIntegrity(*again);
}

}  // namespace
}  // namespace cedar::cache
