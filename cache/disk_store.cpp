#include "cache/disk_store.h"

#include <lmdb.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <ctime>
#include <bit>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <optional>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "cache/entry_codec.h"
#include "cache/lmdb_check.h"

namespace cedar::cache::detail {
namespace {

constexpr uint8_t kSnapshotTag = 'S';            // last byte of a snapshot entry's key

// Page keys are 16 bytes, snapshot keys 17 (the tag last): a snapshot sorts right after its page.
struct DiskKey {
  std::array<uint8_t, 17> bytes;
  size_t size;
};

void PutBigEndian(uint64_t v, uint8_t* out) {
  for (int i = 7; i >= 0; --i, v >>= 8) out[i] = static_cast<uint8_t>(v & 0xff);
}

uint64_t GetBigEndian(const void* in) {
  const auto* b = static_cast<const uint8_t*>(in);
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | b[i];
  return v;
}

DiskKey MakeKey(ModelFingerprint fingerprint, EntryKey entry) {
  DiskKey key{};
  PutBigEndian(fingerprint, key.bytes.data());
  PutBigEndian(entry.digest, key.bytes.data() + 8);
  key.size = 16;
  if (entry.kind == EntryKind::kSnapshot) key.bytes[key.size++] = kSnapshotTag;
  return key;
}

MDB_val ValOf(DiskKey& key) { return MDB_val{key.size, key.bytes.data()}; }

// Is `k` a key of this fingerprint (false: the scan is past them)? If so, `*entry` names it, or
// is empty when the key has a shape this version does not write.
bool DecodeKey(const MDB_val& k, ModelFingerprint fingerprint, std::optional<EntryKey>* entry) {
  if (k.mv_size < 8 || GetBigEndian(k.mv_data) != fingerprint) return false;
  const auto* b = static_cast<const uint8_t*>(k.mv_data);
  entry->reset();
  if (k.mv_size == 16) *entry = EntryKey{GetBigEndian(b + 8), EntryKind::kPage};
  if (k.mv_size == 17 && b[16] == kSnapshotTag) *entry = EntryKey{GetBigEndian(b + 8), EntryKind::kSnapshot};
  return true;
}

Status LmdbError(const char* what, int rc) {
  return Status::IOError(fmt::format("LMDB {}: {}", what, mdb_strerror(rc)));
}

std::span<const uint8_t> BytesOf(const MDB_val& v) { return {static_cast<const uint8_t*>(v.mv_data), v.mv_size}; }

// A read-only transaction that aborts when it goes out of scope.
// End() it before anything that may close the environment (DiskStore::Failed).
struct ReadTxn {
  MDB_txn* txn = nullptr;
  void End() {
    if (txn) mdb_txn_abort(txn);
    txn = nullptr;
  }
  ~ReadTxn() { End(); }
};

}  // namespace

uint64_t DiskStore::EntryBytes(size_t page_tokens, uint64_t payload_bytes) {
  return PageValueBytes(page_tokens, payload_bytes);
}

uint64_t DiskStore::SnapshotEntryBytes(uint64_t payload_bytes) { return SnapshotValueBytes(payload_bytes); }

namespace {

// The directory must exist (created 0700 here when only its last component is missing) and be
// writable by its owner alone: its files hold prompt tokens, and whoever can write the
// directory can replace them.
Status PrepareDirectory(const std::string& dir) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) {
    // chmod after mkdir: the umask may have taken bits from 0700.
    if (errno != ENOENT || ::mkdir(dir.c_str(), 0700) != 0 || ::chmod(dir.c_str(), 0700) != 0 ||
        ::stat(dir.c_str(), &st) != 0) {
      return Status::IOError(fmt::format("cache directory '{}' does not exist and cannot be created ({})", dir,
                                         std::strerror(errno)));
    }
    spdlog::info("prefix cache: created cache directory '{}' (mode 0700)", dir);
  }
  if (!S_ISDIR(st.st_mode)) return Status::IOError(fmt::format("cache directory '{}' is not a directory", dir));
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0 || st.st_uid != ::geteuid()) {
    return Status::IOError(fmt::format(
        "cache directory '{}' has mode {:04o} and owner uid {}: expected a directory that only its owner (uid {}) "
        "can write, since its files hold prompt tokens (chmod 700 it, or use another directory)",
        dir, st.st_mode & 07777, st.st_uid, ::geteuid()));
  }
  if (::access(dir.c_str(), R_OK | W_OK | X_OK) != 0) {
    return Status::IOError(fmt::format("cache directory '{}' is not writable ({})", dir, std::strerror(errno)));
  }
  return Status::Ok();
}

// LMDB errors that mean the file (not the system) is bad: the file is dropped, not reported.
// Not MDB_PANIC: LMDB sets it after a failed write (a full disk), and a fresh file would not help.
bool IsStructural(int rc) {
  return rc == MDB_CORRUPTED || rc == MDB_PAGE_NOTFOUND || rc == MDB_BAD_TXN || rc == MDB_INVALID ||
         rc == MDB_VERSION_MISMATCH || rc == MDB_INCOMPATIBLE || rc == MDB_CURSOR_FULL;
}

// Makes `path` mode 0600 if it exists (LMDB creates with mode & ~umask; an earlier version
// used 0644).
Status MakePrivate(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return Status::Ok();
  if ((st.st_mode & 07777) != 0600 && ::chmod(path.c_str(), 0600) != 0) {
    return Status::IOError(fmt::format("cannot make '{}' mode 0600: {}", path, std::strerror(errno)));
  }
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<DiskStore>> DiskStore::Open(const std::string& dir, uint64_t budget_bytes,
                                                   ModelFingerprint fingerprint, size_t page_tokens,
                                                   bool sync_writes) {
  if (Status s = PrepareDirectory(dir); !s.ok()) return s;
  std::unique_ptr<DiskStore> store(new DiskStore());
  store->dir_ = dir;
  store->fingerprint_ = fingerprint;
  store->page_tokens_ = page_tokens;
  store->sync_writes_ = sync_writes;
  // Entries are counted against the budget by their own size; LMDB adds page and tree overhead,
  // so the map (virtual address space, the file grows as used) gets twice the budget plus slack.
  store->map_bytes_ = 2 * budget_bytes + (64ull << 20);

  // LMDB is never handed a file that fails the structural check: it would trust it.
  const std::string data = dir + "/data.mdb";
  bool failed_check = false;
  if (::access(data.c_str(), F_OK) == 0) {
    LmdbFileStats stats;
    Status check = CheckLmdbFile(data, &stats);
    if (check.code() == StatusCode::kIOError) return check;
    failed_check = !check.ok();
    if (failed_check) {
      store->MoveAsideAndReopen("structural check: " + check.message());
    } else {
      spdlog::debug("prefix cache: '{}' checked: {} bytes, {} tree pages, {} overflow pages, {} entries", data,
                    stats.file_bytes, stats.pages_walked, stats.overflow_pages, stats.entries);
    }
  }
  if (!failed_check) {  // (a file that failed is never opened, even when it could not be moved)
    int rc = 0;
    Status s = store->OpenEnv(&rc);
    if (!s.ok() && !IsStructural(rc)) return s;  // the directory or the system: the operator's to fix
    if (!s.ok()) store->MoveAsideAndReopen(s.message());
  }
  if (store->env_ == nullptr) {
    return Status::IOError(fmt::format("cannot open an LMDB environment in '{}': its data file is damaged and could "
                                       "not be replaced (see the warning above)", dir));
  }
  return store;
}

Status DiskStore::OpenEnv(int* rc_out) const {
  *rc_out = 0;
  auto fail = [&](const char* what, int rc) {
    if (env_) mdb_env_close(env_);
    env_ = nullptr;
    *rc_out = rc;
    return Status::IOError(fmt::format("cannot open LMDB environment in '{}' ({}): {}", dir_, what, mdb_strerror(rc)));
  };
  if (int rc = mdb_env_create(&env_); rc != 0) return fail("env_create", rc);
  if (int rc = mdb_env_set_mapsize(env_, map_bytes_); rc != 0) return fail("set_mapsize", rc);
  const unsigned flags = sync_writes_ ? 0u : unsigned{MDB_NOSYNC};
  if (int rc = mdb_env_open(env_, dir_.c_str(), flags, 0600); rc != 0) return fail("env_open", rc);
  FindMap();
  for (const char* name : {"/data.mdb", "/lock.mdb"}) {
    if (Status s = MakePrivate(dir_ + name); !s.ok()) {
      mdb_env_close(env_);
      env_ = nullptr;
      return s;
    }
  }
  MDB_txn* txn = nullptr;
  if (int rc = mdb_txn_begin(env_, nullptr, 0, &txn); rc != 0) return fail("txn_begin", rc);
  if (int rc = mdb_dbi_open(txn, nullptr, 0, &dbi_); rc != 0) {
    mdb_txn_abort(txn);
    return fail("dbi_open", rc);
  }
  if (int rc = mdb_txn_commit(txn); rc != 0) return fail("txn_commit", rc);
  return Status::Ok();
}

void DiskStore::MoveAsideAndReopen(const std::string& reason) const {
  if (env_) mdb_env_close(env_);
  env_ = nullptr;
  // data.mdb.corrupt-<unix time>, or -<time>.<n> when that name is taken.
  const std::string base = fmt::format("{}/data.mdb.corrupt-{}", dir_, static_cast<long long>(::time(nullptr)));
  std::string aside = base;
  for (int n = 1; ::access(aside.c_str(), F_OK) == 0; ++n) aside = fmt::format("{}.{}", base, n);
  const std::string data = dir_ + "/data.mdb", lock = dir_ + "/lock.mdb";
  std::string outcome;
  Status opened = Status::IOError("the damaged file is still in place");
  if (::rename(data.c_str(), aside.c_str()) == 0) {
    outcome = fmt::format("moved it to '{}'", aside);
    ++files_moved_aside_;
    last_moved_aside_ = aside;
    // The lock file goes too (a damaged one can also stop LMDB); LMDB makes a new one.
    const std::string lock_aside = lock + aside.substr(data.size());
    if (::rename(lock.c_str(), lock_aside.c_str()) != 0 && errno != ENOENT) (void)::unlink(lock.c_str());
    int rc = 0;
    opened = OpenEnv(&rc);
  } else {
    outcome = fmt::format("could not move it aside ({})", std::strerror(errno));
  }
  spdlog::warn("prefix cache: the disk tier's file '{}' is damaged ({}); {} and continue with {}", data, reason,
               outcome, opened.ok() ? "an empty disk tier" : "no disk tier (RAM only): " + opened.message());
}

// LMDB does not say where it mapped the file (mdb_env_info's me_mapaddr is the meta's fixed
// address, null here); the kernel does: the mapping of data.mdb's inode at offset 0.
void DiskStore::FindMap() const {
  map_base_ = nullptr;
  map_bytes_mapped_ = 0;
  struct stat st {};
  if (::stat((dir_ + "/data.mdb").c_str(), &st) != 0) return;
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    unsigned long long start = 0, end = 0, offset = 0, inode = 0;
    unsigned dev_major = 0, dev_minor = 0;
    char perms[8] = {0};
    if (std::sscanf(line.c_str(), "%llx-%llx %7s %llx %x:%x %llu", &start, &end, perms, &offset, &dev_major, &dev_minor,
                    &inode) != 7) {
      continue;
    }
    if (inode == static_cast<unsigned long long>(st.st_ino) && dev_major == major(st.st_dev) &&
        dev_minor == minor(st.st_dev) && offset == 0) {
      map_base_ = reinterpret_cast<const uint8_t*>(static_cast<uintptr_t>(start));
      map_bytes_mapped_ = end - start;
      return;
    }
  }
  spdlog::debug("prefix cache: the map of '{}/data.mdb' is not in /proc/self/maps; value bounds unchecked", dir_);
}

Status DiskStore::Failed(const char* what, int rc) const {
  if (!IsStructural(rc)) return LmdbError(what, rc);
  MoveAsideAndReopen(fmt::format("LMDB {}: {}", what, mdb_strerror(rc)));
  return Status::NotFound(fmt::format("the disk tier was replaced after LMDB {} failed", what));
}

uint64_t DiskStore::FileBytes() const {
  int fd = -1;
  struct stat st {};
  if (mdb_env_get_fd(env_, &fd) != 0 || ::fstat(fd, &st) != 0) return 0;
  return std::min<uint64_t>(static_cast<uint64_t>(st.st_size), map_bytes_mapped_);
}

bool DiskStore::InsideFile(const MDB_val& v, uint64_t file_bytes) const {
  if (map_base_ == nullptr) return true;  // the map was not found in /proc/self/maps: unchecked
  const auto* p = static_cast<const uint8_t*>(v.mv_data);
  if (p < map_base_) return false;
  const auto off = static_cast<uint64_t>(p - map_base_);
  return off <= file_bytes && v.mv_size <= file_bytes - off;
}

DiskStore::~DiskStore() {
  if (env_) mdb_env_close(env_);
}

Status DiskStore::Put(std::span<const PageWrite> pages, std::span<const SnapshotWrite> snapshots) {
  if (!env_) return Status::IOError("the disk tier is gone (its file was damaged and could not be replaced)");
  MDB_txn* txn = nullptr;
  if (int rc = mdb_txn_begin(env_, nullptr, 0, &txn); rc != 0) return Failed("txn_begin", rc);
  // Reserves `bytes` under `entry`'s key; null (transaction aborted, *status set) on failure.
  Status status;
  auto reserve = [&](EntryKey entry, size_t bytes) -> uint8_t* {
    DiskKey key = MakeKey(fingerprint_, entry);
    MDB_val k = ValOf(key);
    MDB_val v{bytes, nullptr};
    if (int rc = mdb_put(txn, dbi_, &k, &v, MDB_RESERVE); rc != 0) {
      mdb_txn_abort(txn);
      status = rc == MDB_MAP_FULL ? Status::ResourceExhausted("LMDB map is full") : Failed("put", rc);
      return nullptr;
    }
    return static_cast<uint8_t*>(v.mv_data);
  };
  for (const PageWrite& page : pages) {
    assert(page.tokens.size() == page_tokens_ && page.payload != nullptr);
    uint8_t* out = reserve({page.meta.digest, EntryKind::kPage}, EntryBytes(page.tokens.size(), page.payload->size()));
    if (out == nullptr) return status;
    EncodePageValue(page.meta, fingerprint_, page.tokens, *page.payload, out);
  }
  for (const SnapshotWrite& snap : snapshots) {
    assert(snap.payload != nullptr && snap.payload->size() == snap.meta.payload_bytes);
    uint8_t* out = reserve({snap.meta.digest, EntryKind::kSnapshot}, SnapshotEntryBytes(snap.payload->size()));
    if (out == nullptr) return status;
    EncodeSnapshotValue(snap.meta, fingerprint_, *snap.payload, out);
  }
  if (int rc = mdb_txn_commit(txn); rc != 0) {
    if (rc == MDB_MAP_FULL) return Status::ResourceExhausted("LMDB map is full");
    return Failed("commit", rc);
  }
  return Status::Ok();
}

Status DiskStore::Delete(std::span<const EntryKey> keys) {
  if (!env_) return Status::Ok();  // nothing is stored
  MDB_txn* txn = nullptr;
  if (int rc = mdb_txn_begin(env_, nullptr, 0, &txn); rc != 0) return Failed("txn_begin", rc);
  for (EntryKey entry : keys) {
    DiskKey key = MakeKey(fingerprint_, entry);
    MDB_val k = ValOf(key);
    if (int rc = mdb_del(txn, dbi_, &k, nullptr); rc != 0 && rc != MDB_NOTFOUND) {
      mdb_txn_abort(txn);
      // After a replaced file the entries are gone, which is what was asked.
      Status s = Failed("del", rc);
      return s.code() == StatusCode::kNotFound ? Status::Ok() : s;
    }
  }
  if (int rc = mdb_txn_commit(txn); rc != 0) {
    Status s = Failed("commit", rc);
    return s.code() == StatusCode::kNotFound ? Status::Ok() : s;
  }
  return Status::Ok();
}

Status DiskStore::Read(std::span<const PageRead> pages, std::vector<Payload>* out) const {
  if (!env_) return Status::NotFound("no disk tier");
  ReadTxn rt;
  if (int rc = mdb_txn_begin(env_, nullptr, MDB_RDONLY, &rt.txn); rc != 0) return Failed("txn_begin", rc);
  const uint64_t file_bytes = FileBytes();  // constant during the read (this thread is the only writer)
  for (size_t i = 0; i < pages.size(); ++i) {
    const PageRead& want = pages[i];
    DiskKey key = MakeKey(fingerprint_, {want.meta.digest, EntryKind::kPage});
    MDB_val k = ValOf(key);
    MDB_val v{};
    if (int rc = mdb_get(rt.txn, dbi_, &k, &v); rc != 0) {
      if (rc == MDB_NOTFOUND) return Status::NotFound(fmt::format("page {} has no disk entry", i));
      rt.End();
      return Failed("get", rc);
    }
    if (!InsideFile(v, file_bytes)) {
      rt.End();
      return Failed("get (a value outside the file)", MDB_CORRUPTED);
    }
    auto payload = VerifyPageValue(BytesOf(v), fingerprint_, page_tokens_, want);
    if (!payload.ok()) return Status::Corruption(fmt::format("page {}: {}", i, payload.status().message()));
    out->push_back(MakePayload(std::vector<uint8_t>(payload->begin(), payload->end())));
  }
  return Status::Ok();
}

Result<Payload> DiskStore::ReadSnapshot(const SnapshotMeta& want) const {
  if (!env_) return Status::NotFound("no disk tier");
  ReadTxn rt;
  if (int rc = mdb_txn_begin(env_, nullptr, MDB_RDONLY, &rt.txn); rc != 0) return Failed("txn_begin", rc);
  DiskKey key = MakeKey(fingerprint_, {want.digest, EntryKind::kSnapshot});
  MDB_val k = ValOf(key);
  MDB_val v{};
  if (int rc = mdb_get(rt.txn, dbi_, &k, &v); rc != 0) {
    if (rc == MDB_NOTFOUND) return Status::NotFound("snapshot has no disk entry");
    rt.End();
    return Failed("get", rc);
  }
  if (!InsideFile(v, FileBytes())) {
    rt.End();
    return Failed("get (a value outside the file)", MDB_CORRUPTED);
  }
  auto payload = VerifySnapshotValue(BytesOf(v), fingerprint_, want);
  if (!payload.ok()) return payload.status();
  return MakePayload(std::vector<uint8_t>(payload->begin(), payload->end()));
}

// Calls fn(key, value) for every entry of this fingerprint, in key order, in one read
// transaction (Scan and List differ only in what they keep of each entry). An LMDB error other
// than the end of the data, or a value outside the file, fails the walk (and drops the file).
Status DiskStore::ForEachEntry(const std::function<void(const EntryKey&, const MDB_val&)>& fn) const {
  if (!env_) return Status::Ok();  // no disk tier: no entries
  ReadTxn rt;
  if (int rc = mdb_txn_begin(env_, nullptr, MDB_RDONLY, &rt.txn); rc != 0) return Failed("txn_begin", rc);
  MDB_cursor* cursor = nullptr;
  if (int rc = mdb_cursor_open(rt.txn, dbi_, &cursor); rc != 0) {
    rt.End();
    return Failed("cursor_open", rc);
  }
  DiskKey start = MakeKey(fingerprint_, {0, EntryKind::kPage});
  MDB_val k = ValOf(start);
  MDB_val v{};
  std::optional<EntryKey> entry;
  const uint64_t file_bytes = FileBytes();  // constant during the walk (this thread is the only writer)
  int rc = mdb_cursor_get(cursor, &k, &v, MDB_SET_RANGE);
  for (; rc == 0 && DecodeKey(k, fingerprint_, &entry); rc = mdb_cursor_get(cursor, &k, &v, MDB_NEXT)) {
    if (!InsideFile(k, file_bytes) || !InsideFile(v, file_bytes)) {
      rc = MDB_CORRUPTED;
      break;
    }
    if (entry) fn(*entry, v);
  }
  mdb_cursor_close(cursor);
  rt.End();
  if (rc != 0 && rc != MDB_NOTFOUND) return Failed("cursor_get", rc);
  return Status::Ok();
}

Result<DiskStore::ScanResult> DiskStore::Scan() const {
  ScanResult result;
  Status s = ForEachEntry([&](const EntryKey& entry, const MDB_val& v) {
    if (entry.kind == EntryKind::kSnapshot) {
      SnapshotMeta meta;
      if (!ParseSnapshotValue(BytesOf(v), fingerprint_, entry.digest, &meta).ok()) {
        result.bad.push_back(entry);
      } else {
        result.snapshots.push_back(meta);
      }
      return;
    }
    PageMeta meta;
    const uint8_t* tokens = nullptr;
    if (!ParsePageValue(BytesOf(v), fingerprint_, page_tokens_, entry.digest, &meta, &tokens).ok()) {
      result.bad.push_back(entry);
      return;
    }
    ScannedPage page{meta, std::vector<TokenId>(page_tokens_)};
    std::memcpy(page.tokens.data(), tokens, page_tokens_ * sizeof(TokenId));
    result.pages.push_back(std::move(page));
  });
  if (s.code() == StatusCode::kNotFound) return ScanResult{};  // the file was replaced: empty
  if (!s.ok()) return s;
  return result;
}

Result<std::vector<DiskStore::ListedEntry>> DiskStore::List() const {
  std::vector<ListedEntry> entries;
  Status s = ForEachEntry([&](const EntryKey& entry, const MDB_val& v) { entries.push_back(ListedEntry{entry, v.mv_size}); });
  if (s.code() == StatusCode::kNotFound) return std::vector<ListedEntry>{};  // the file was replaced: empty
  if (!s.ok()) return s;
  return entries;
}

}  // namespace cedar::cache::detail
