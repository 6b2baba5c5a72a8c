#include "cache/disk_store.h"

#include <lmdb.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <functional>
#include <optional>
#include <fmt/format.h>

namespace cedar::cache::detail {
namespace {

static_assert(std::endian::native == std::endian::little,
              "disk entries store tokens and header fields in host (little-endian) order");

constexpr uint32_t kEntryMagic = 0x43504443;     // "CDPC": Cedar prefix cache page
constexpr uint32_t kSnapshotMagic = 0x4e534443;  // "CDSN": Cedar prefix cache snapshot
constexpr uint16_t kEntryVersion = 1;
constexpr uint8_t kSnapshotTag = 'S';            // last byte of a snapshot entry's key

// Fixed-layout header at the start of every page value. Read and written with memcpy (LMDB
// values are not aligned).
struct EntryHeader {
  uint32_t magic;
  uint16_t version;
  uint16_t reserved;
  uint32_t page_index;
  uint32_t token_count;
  uint64_t fingerprint;
  uint64_t salt;
  uint64_t parent_digest;
  uint64_t digest;
  uint64_t sequence;
  uint64_t payload_bytes;
  uint64_t meta_checksum;     // XXH3 over this header (both checksums zeroed) and the tokens
  uint64_t payload_checksum;  // XXH3 over the payload
};
static_assert(sizeof(EntryHeader) == 80);

// Fixed-layout header at the start of every snapshot value.
struct SnapshotHeader {
  uint32_t magic;
  uint16_t version;
  uint16_t reserved;
  uint64_t fingerprint;
  uint64_t salt;
  uint64_t digest;            // of the page that ends at `position`; also in the key
  uint64_t position;          // tokens
  uint64_t prefix_checksum;   // of the tokens before `position` (computed by PrefixCache)
  uint64_t sequence;
  uint64_t payload_bytes;
  uint64_t meta_checksum;     // XXH3 over this header (both checksums zeroed)
  uint64_t payload_checksum;  // XXH3 over the payload
};
static_assert(sizeof(SnapshotHeader) == 80);

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

uint64_t MetaChecksum(EntryHeader header, const void* tokens, size_t token_bytes) {
  header.meta_checksum = 0;
  header.payload_checksum = 0;
  const uint64_t seed = XXH3_64bits(&header, sizeof(header));
  return XXH3_64bits_withSeed(tokens, token_bytes, seed);
}

uint64_t SnapshotMetaChecksum(SnapshotHeader header) {
  header.meta_checksum = 0;
  header.payload_checksum = 0;
  return XXH3_64bits(&header, sizeof(header));
}

Status LmdbError(const char* what, int rc) {
  return Status::IOError(fmt::format("LMDB {}: {}", what, mdb_strerror(rc)));
}

// Parses and verifies header and tokens of one value. Returns the header through `out`.
Status ParseMeta(const MDB_val& val, ModelFingerprint fingerprint, size_t page_tokens,
                 uint64_t key_digest, EntryHeader* out) {
  if (val.mv_size < sizeof(EntryHeader)) return Status::Corruption("entry shorter than its header");
  EntryHeader h;
  std::memcpy(&h, val.mv_data, sizeof(h));
  if (h.magic != kEntryMagic || h.version != kEntryVersion) return Status::Corruption("bad magic or version");
  if (h.token_count != page_tokens) {
    return Status::Corruption(fmt::format("entry has {} tokens, page size is {}", h.token_count, page_tokens));
  }
  const uint64_t token_bytes = uint64_t{h.token_count} * sizeof(TokenId);
  if (val.mv_size != sizeof(EntryHeader) + token_bytes + h.payload_bytes) {
    return Status::Corruption(fmt::format("entry is {} bytes, header says {}", val.mv_size,
                                          sizeof(EntryHeader) + token_bytes + h.payload_bytes));
  }
  const auto* tokens = static_cast<const uint8_t*>(val.mv_data) + sizeof(EntryHeader);
  if (MetaChecksum(h, tokens, token_bytes) != h.meta_checksum) return Status::Corruption("metadata checksum mismatch");
  if (h.fingerprint != fingerprint) return Status::Corruption("fingerprint differs from its key");
  if (h.digest != key_digest) return Status::Corruption("digest differs from its key");
  *out = h;
  return Status::Ok();
}

// Parses and verifies the header of one snapshot value. Returns it through `out`.
Status ParseSnapshotMeta(const MDB_val& val, ModelFingerprint fingerprint, uint64_t key_digest,
                         SnapshotHeader* out) {
  if (val.mv_size < sizeof(SnapshotHeader)) return Status::Corruption("snapshot entry shorter than its header");
  SnapshotHeader h;
  std::memcpy(&h, val.mv_data, sizeof(h));
  if (h.magic != kSnapshotMagic || h.version != kEntryVersion) {
    return Status::Corruption("bad snapshot magic or version");
  }
  if (val.mv_size != sizeof(SnapshotHeader) + h.payload_bytes) {
    return Status::Corruption(fmt::format("snapshot entry is {} bytes, header says {}", val.mv_size,
                                          sizeof(SnapshotHeader) + h.payload_bytes));
  }
  if (SnapshotMetaChecksum(h) != h.meta_checksum) return Status::Corruption("snapshot metadata checksum mismatch");
  if (h.fingerprint != fingerprint) return Status::Corruption("fingerprint differs from its key");
  if (h.digest != key_digest) return Status::Corruption("digest differs from its key");
  *out = h;
  return Status::Ok();
}

SnapshotMeta SnapshotMetaOf(const SnapshotHeader& h) {
  return SnapshotMeta{h.digest, h.salt, h.position, h.prefix_checksum, h.payload_bytes, h.sequence};
}

PageMeta MetaOf(const EntryHeader& h) {
  return PageMeta{h.digest, h.parent_digest, h.salt, h.page_index, h.payload_bytes, h.sequence};
}

// A read-only transaction that aborts when it goes out of scope.
struct ReadTxn {
  MDB_txn* txn = nullptr;
  ~ReadTxn() { if (txn) mdb_txn_abort(txn); }
};

}  // namespace

uint64_t DiskStore::EntryBytes(size_t page_tokens, uint64_t payload_bytes) {
  return sizeof(EntryHeader) + page_tokens * sizeof(TokenId) + payload_bytes;
}

uint64_t DiskStore::SnapshotEntryBytes(uint64_t payload_bytes) { return sizeof(SnapshotHeader) + payload_bytes; }

Result<std::unique_ptr<DiskStore>> DiskStore::Open(const std::string& dir, uint64_t budget_bytes,
                                                   ModelFingerprint fingerprint, size_t page_tokens,
                                                   bool sync_writes) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) {
    return Status::IOError(fmt::format("cache directory '{}' does not exist ({})", dir, std::strerror(errno)));
  }
  if (!S_ISDIR(st.st_mode)) return Status::IOError(fmt::format("cache directory '{}' is not a directory", dir));
  if (::access(dir.c_str(), R_OK | W_OK | X_OK) != 0) {
    return Status::IOError(fmt::format("cache directory '{}' is not writable ({})", dir, std::strerror(errno)));
  }

  std::unique_ptr<DiskStore> store(new DiskStore());
  store->dir_ = dir;
  store->fingerprint_ = fingerprint;
  store->page_tokens_ = page_tokens;
  if (int rc = mdb_env_create(&store->env_); rc != 0) return LmdbError("env_create", rc);
  // Entries are counted against the budget by their own size; LMDB adds page and tree overhead,
  // so the map (virtual address space, the file grows as used) gets twice the budget plus slack.
  const uint64_t map_bytes = 2 * budget_bytes + (64ull << 20);
  if (int rc = mdb_env_set_mapsize(store->env_, map_bytes); rc != 0) return LmdbError("set_mapsize", rc);
  const unsigned flags = sync_writes ? 0u : unsigned{MDB_NOSYNC};
  if (int rc = mdb_env_open(store->env_, dir.c_str(), flags, 0644); rc != 0) {
    return Status::IOError(fmt::format("cannot open LMDB environment in '{}': {}", dir, mdb_strerror(rc)));
  }
  MDB_txn* txn = nullptr;
  if (int rc = mdb_txn_begin(store->env_, nullptr, 0, &txn); rc != 0) return LmdbError("txn_begin", rc);
  if (int rc = mdb_dbi_open(txn, nullptr, 0, &store->dbi_); rc != 0) {
    mdb_txn_abort(txn);
    return LmdbError("dbi_open", rc);
  }
  if (int rc = mdb_txn_commit(txn); rc != 0) return LmdbError("txn_commit", rc);
  return store;
}

DiskStore::~DiskStore() {
  if (env_) mdb_env_close(env_);
}

Status DiskStore::Put(std::span<const PageWrite> pages, std::span<const SnapshotWrite> snapshots) {
  MDB_txn* txn = nullptr;
  if (int rc = mdb_txn_begin(env_, nullptr, 0, &txn); rc != 0) return LmdbError("txn_begin", rc);
  // Reserves `bytes` under `entry`'s key; null (transaction aborted, *status set) on failure.
  Status status;
  auto reserve = [&](EntryKey entry, size_t bytes) -> uint8_t* {
    DiskKey key = MakeKey(fingerprint_, entry);
    MDB_val k = ValOf(key);
    MDB_val v{bytes, nullptr};
    if (int rc = mdb_put(txn, dbi_, &k, &v, MDB_RESERVE); rc != 0) {
      mdb_txn_abort(txn);
      status = rc == MDB_MAP_FULL ? Status::ResourceExhausted("LMDB map is full") : LmdbError("put", rc);
      return nullptr;
    }
    return static_cast<uint8_t*>(v.mv_data);
  };
  for (const PageWrite& page : pages) {
    assert(page.tokens.size() == page_tokens_ && page.payload != nullptr);
    EntryHeader h{};
    h.magic = kEntryMagic;
    h.version = kEntryVersion;
    h.page_index = page.meta.page_index;
    h.token_count = static_cast<uint32_t>(page.tokens.size());
    h.fingerprint = fingerprint_;
    h.salt = page.meta.salt;
    h.parent_digest = page.meta.parent_digest;
    h.digest = page.meta.digest;
    h.sequence = page.meta.sequence;
    h.payload_bytes = page.payload->size();
    const size_t token_bytes = page.tokens.size_bytes();
    h.meta_checksum = MetaChecksum(h, page.tokens.data(), token_bytes);
    h.payload_checksum = XXH3_64bits(page.payload->data(), page.payload->size());

    uint8_t* out = reserve({page.meta.digest, EntryKind::kPage}, EntryBytes(page.tokens.size(), page.payload->size()));
    if (out == nullptr) return status;
    std::memcpy(out, &h, sizeof(h));
    std::memcpy(out + sizeof(h), page.tokens.data(), token_bytes);
    if (!page.payload->empty()) std::memcpy(out + sizeof(h) + token_bytes, page.payload->data(), page.payload->size());
  }
  for (const SnapshotWrite& snap : snapshots) {
    assert(snap.payload != nullptr && snap.payload->size() == snap.meta.payload_bytes);
    SnapshotHeader h{};
    h.magic = kSnapshotMagic;
    h.version = kEntryVersion;
    h.fingerprint = fingerprint_;
    h.salt = snap.meta.salt;
    h.digest = snap.meta.digest;
    h.position = snap.meta.position;
    h.prefix_checksum = snap.meta.prefix_checksum;
    h.sequence = snap.meta.sequence;
    h.payload_bytes = snap.payload->size();
    h.meta_checksum = SnapshotMetaChecksum(h);
    h.payload_checksum = XXH3_64bits(snap.payload->data(), snap.payload->size());

    uint8_t* out = reserve({snap.meta.digest, EntryKind::kSnapshot}, SnapshotEntryBytes(snap.payload->size()));
    if (out == nullptr) return status;
    std::memcpy(out, &h, sizeof(h));
    if (!snap.payload->empty()) std::memcpy(out + sizeof(h), snap.payload->data(), snap.payload->size());
  }
  if (int rc = mdb_txn_commit(txn); rc != 0) {
    if (rc == MDB_MAP_FULL) return Status::ResourceExhausted("LMDB map is full");
    return LmdbError("commit", rc);
  }
  return Status::Ok();
}

Status DiskStore::Delete(std::span<const EntryKey> keys) {
  MDB_txn* txn = nullptr;
  if (int rc = mdb_txn_begin(env_, nullptr, 0, &txn); rc != 0) return LmdbError("txn_begin", rc);
  for (EntryKey entry : keys) {
    DiskKey key = MakeKey(fingerprint_, entry);
    MDB_val k = ValOf(key);
    if (int rc = mdb_del(txn, dbi_, &k, nullptr); rc != 0 && rc != MDB_NOTFOUND) {
      mdb_txn_abort(txn);
      return LmdbError("del", rc);
    }
  }
  if (int rc = mdb_txn_commit(txn); rc != 0) return LmdbError("commit", rc);
  return Status::Ok();
}

Status DiskStore::Read(std::span<const PageRead> pages, std::vector<Payload>* out) const {
  ReadTxn rt;
  if (int rc = mdb_txn_begin(env_, nullptr, MDB_RDONLY, &rt.txn); rc != 0) return LmdbError("txn_begin", rc);
  for (size_t i = 0; i < pages.size(); ++i) {
    const PageRead& want = pages[i];
    DiskKey key = MakeKey(fingerprint_, {want.meta.digest, EntryKind::kPage});
    MDB_val k = ValOf(key);
    MDB_val v{};
    if (int rc = mdb_get(rt.txn, dbi_, &k, &v); rc != 0) {
      if (rc == MDB_NOTFOUND) return Status::NotFound(fmt::format("page {} has no disk entry", i));
      return LmdbError("get", rc);
    }
    EntryHeader h;
    if (Status s = ParseMeta(v, fingerprint_, page_tokens_, want.meta.digest, &h); !s.ok()) {
      return Status::Corruption(fmt::format("page {}: {}", i, s.message()));
    }
    const auto* bytes = static_cast<const uint8_t*>(v.mv_data);
    // The entry must be this very page: same chain position, tenant and tokens.
    if (h.parent_digest != want.meta.parent_digest || h.page_index != want.meta.page_index ||
        h.salt != want.meta.salt || h.payload_bytes != want.meta.payload_bytes ||
        std::memcmp(bytes + sizeof(h), want.tokens.data(), want.tokens.size_bytes()) != 0) {
      return Status::Corruption(fmt::format("page {}: entry belongs to another prefix", i));
    }
    const uint8_t* payload = bytes + sizeof(h) + want.tokens.size_bytes();
    if (XXH3_64bits(payload, h.payload_bytes) != h.payload_checksum) {
      return Status::Corruption(fmt::format("page {}: payload checksum mismatch", i));
    }
    out->push_back(MakePayload(std::vector<uint8_t>(payload, payload + h.payload_bytes)));
  }
  return Status::Ok();
}

Result<Payload> DiskStore::ReadSnapshot(const SnapshotMeta& want) const {
  ReadTxn rt;
  if (int rc = mdb_txn_begin(env_, nullptr, MDB_RDONLY, &rt.txn); rc != 0) return LmdbError("txn_begin", rc);
  DiskKey key = MakeKey(fingerprint_, {want.digest, EntryKind::kSnapshot});
  MDB_val k = ValOf(key);
  MDB_val v{};
  if (int rc = mdb_get(rt.txn, dbi_, &k, &v); rc != 0) {
    if (rc == MDB_NOTFOUND) return Status::NotFound("snapshot has no disk entry");
    return LmdbError("get", rc);
  }
  SnapshotHeader h;
  if (Status s = ParseSnapshotMeta(v, fingerprint_, want.digest, &h); !s.ok()) return s;
  // The entry must be this very snapshot: same position, tenant, prefix tokens and size.
  if (h.position != want.position || h.salt != want.salt || h.prefix_checksum != want.prefix_checksum ||
      h.payload_bytes != want.payload_bytes) {
    return Status::Corruption(fmt::format("snapshot entry at {} belongs to another prefix", want.position));
  }
  const uint8_t* payload = static_cast<const uint8_t*>(v.mv_data) + sizeof(h);
  if (XXH3_64bits(payload, h.payload_bytes) != h.payload_checksum) {
    return Status::Corruption(fmt::format("snapshot at {}: payload checksum mismatch", want.position));
  }
  return MakePayload(std::vector<uint8_t>(payload, payload + h.payload_bytes));
}

namespace {

// Calls fn(key, value) for every entry of this fingerprint, in key order, in one read
// transaction (Scan and List differ only in what they keep of each entry).
Status ForEachEntry(MDB_env* env, unsigned dbi, ModelFingerprint fingerprint,
                    const std::function<void(const EntryKey&, const MDB_val&)>& fn) {
  ReadTxn rt;
  if (int rc = mdb_txn_begin(env, nullptr, MDB_RDONLY, &rt.txn); rc != 0) return LmdbError("txn_begin", rc);
  MDB_cursor* cursor = nullptr;
  if (int rc = mdb_cursor_open(rt.txn, dbi, &cursor); rc != 0) return LmdbError("cursor_open", rc);
  DiskKey start = MakeKey(fingerprint, {0, EntryKind::kPage});
  MDB_val k = ValOf(start);
  MDB_val v{};
  std::optional<EntryKey> entry;
  for (int rc = mdb_cursor_get(cursor, &k, &v, MDB_SET_RANGE); rc == 0 && DecodeKey(k, fingerprint, &entry);
       rc = mdb_cursor_get(cursor, &k, &v, MDB_NEXT)) {
    if (entry) fn(*entry, v);
  }
  mdb_cursor_close(cursor);
  return Status::Ok();
}

}  // namespace

Result<DiskStore::ScanResult> DiskStore::Scan() const {
  ScanResult result;
  Status s = ForEachEntry(env_, dbi_, fingerprint_, [&](const EntryKey& entry, const MDB_val& v) {
    if (entry.kind == EntryKind::kSnapshot) {
      SnapshotHeader h;
      if (!ParseSnapshotMeta(v, fingerprint_, entry.digest, &h).ok()) {
        result.bad.push_back(entry);
      } else {
        result.snapshots.push_back(SnapshotMetaOf(h));
      }
      return;
    }
    EntryHeader h;
    if (!ParseMeta(v, fingerprint_, page_tokens_, entry.digest, &h).ok()) {
      result.bad.push_back(entry);
      return;
    }
    const auto* tokens = reinterpret_cast<const uint8_t*>(v.mv_data) + sizeof(EntryHeader);
    ScannedPage page{MetaOf(h), std::vector<TokenId>(page_tokens_)};
    std::memcpy(page.tokens.data(), tokens, page_tokens_ * sizeof(TokenId));
    result.pages.push_back(std::move(page));
  });
  if (!s.ok()) return s;
  return result;
}

Result<std::vector<DiskStore::ListedEntry>> DiskStore::List() const {
  std::vector<ListedEntry> entries;
  Status s = ForEachEntry(env_, dbi_, fingerprint_,
                          [&](const EntryKey& entry, const MDB_val& v) { entries.push_back(ListedEntry{entry, v.mv_size}); });
  if (!s.ok()) return s;
  return entries;
}

}  // namespace cedar::cache::detail
