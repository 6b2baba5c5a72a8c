#include "cache/disk_store.h"

#include <lmdb.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <fmt/format.h>

namespace cedar::cache::detail {
namespace {

static_assert(std::endian::native == std::endian::little,
              "disk entries store tokens and header fields in host (little-endian) order");

constexpr uint32_t kEntryMagic = 0x43504443;  // "CDPC": Cedar prefix cache
constexpr uint16_t kEntryVersion = 1;

// Fixed-layout header at the start of every value. Read and written with memcpy (LMDB values
// are not aligned).
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

using DiskKey = std::array<uint8_t, 16>;

void PutBigEndian(uint64_t v, uint8_t* out) {
  for (int i = 7; i >= 0; --i, v >>= 8) out[i] = static_cast<uint8_t>(v & 0xff);
}

uint64_t GetBigEndian(const uint8_t* in) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | in[i];
  return v;
}

DiskKey MakeKey(ModelFingerprint fingerprint, uint64_t digest) {
  DiskKey key;
  PutBigEndian(fingerprint, key.data());
  PutBigEndian(digest, key.data() + 8);
  return key;
}

MDB_val ValOf(DiskKey& key) { return MDB_val{key.size(), key.data()}; }

uint64_t MetaChecksum(EntryHeader header, const void* tokens, size_t token_bytes) {
  header.meta_checksum = 0;
  header.payload_checksum = 0;
  const uint64_t seed = XXH3_64bits(&header, sizeof(header));
  return XXH3_64bits_withSeed(tokens, token_bytes, seed);
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

Status DiskStore::Put(std::span<const PageWrite> pages) {
  MDB_txn* txn = nullptr;
  if (int rc = mdb_txn_begin(env_, nullptr, 0, &txn); rc != 0) return LmdbError("txn_begin", rc);
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

    DiskKey key = MakeKey(fingerprint_, page.meta.digest);
    MDB_val k = ValOf(key);
    MDB_val v{EntryBytes(page.tokens.size(), page.payload->size()), nullptr};
    if (int rc = mdb_put(txn, dbi_, &k, &v, MDB_RESERVE); rc != 0) {
      mdb_txn_abort(txn);
      if (rc == MDB_MAP_FULL) return Status::ResourceExhausted("LMDB map is full");
      return LmdbError("put", rc);
    }
    auto* out = static_cast<uint8_t*>(v.mv_data);
    std::memcpy(out, &h, sizeof(h));
    std::memcpy(out + sizeof(h), page.tokens.data(), token_bytes);
    if (!page.payload->empty()) std::memcpy(out + sizeof(h) + token_bytes, page.payload->data(), page.payload->size());
  }
  if (int rc = mdb_txn_commit(txn); rc != 0) {
    if (rc == MDB_MAP_FULL) return Status::ResourceExhausted("LMDB map is full");
    return LmdbError("commit", rc);
  }
  return Status::Ok();
}

Status DiskStore::Delete(std::span<const uint64_t> digests) {
  MDB_txn* txn = nullptr;
  if (int rc = mdb_txn_begin(env_, nullptr, 0, &txn); rc != 0) return LmdbError("txn_begin", rc);
  for (uint64_t digest : digests) {
    DiskKey key = MakeKey(fingerprint_, digest);
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
    DiskKey key = MakeKey(fingerprint_, want.meta.digest);
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

Result<DiskStore::ScanResult> DiskStore::Scan() const {
  ReadTxn rt;
  if (int rc = mdb_txn_begin(env_, nullptr, MDB_RDONLY, &rt.txn); rc != 0) return LmdbError("txn_begin", rc);
  MDB_cursor* cursor = nullptr;
  if (int rc = mdb_cursor_open(rt.txn, dbi_, &cursor); rc != 0) return LmdbError("cursor_open", rc);
  ScanResult result;
  DiskKey start = MakeKey(fingerprint_, 0);
  MDB_val k = ValOf(start);
  MDB_val v{};
  for (int rc = mdb_cursor_get(cursor, &k, &v, MDB_SET_RANGE); rc == 0;
       rc = mdb_cursor_get(cursor, &k, &v, MDB_NEXT)) {
    if (k.mv_size != 16 || GetBigEndian(static_cast<const uint8_t*>(k.mv_data)) != fingerprint_) break;
    const uint64_t digest = GetBigEndian(static_cast<const uint8_t*>(k.mv_data) + 8);
    EntryHeader h;
    if (!ParseMeta(v, fingerprint_, page_tokens_, digest, &h).ok()) {
      result.bad_digests.push_back(digest);
      continue;
    }
    const auto* tokens = reinterpret_cast<const uint8_t*>(v.mv_data) + sizeof(EntryHeader);
    ScannedPage page{MetaOf(h), std::vector<TokenId>(page_tokens_)};
    std::memcpy(page.tokens.data(), tokens, page_tokens_ * sizeof(TokenId));
    result.pages.push_back(std::move(page));
  }
  mdb_cursor_close(cursor);
  return result;
}

Result<std::vector<std::pair<uint64_t, uint64_t>>> DiskStore::List() const {
  ReadTxn rt;
  if (int rc = mdb_txn_begin(env_, nullptr, MDB_RDONLY, &rt.txn); rc != 0) return LmdbError("txn_begin", rc);
  MDB_cursor* cursor = nullptr;
  if (int rc = mdb_cursor_open(rt.txn, dbi_, &cursor); rc != 0) return LmdbError("cursor_open", rc);
  std::vector<std::pair<uint64_t, uint64_t>> entries;
  DiskKey start = MakeKey(fingerprint_, 0);
  MDB_val k = ValOf(start);
  MDB_val v{};
  for (int rc = mdb_cursor_get(cursor, &k, &v, MDB_SET_RANGE); rc == 0;
       rc = mdb_cursor_get(cursor, &k, &v, MDB_NEXT)) {
    if (k.mv_size != 16 || GetBigEndian(static_cast<const uint8_t*>(k.mv_data)) != fingerprint_) break;
    entries.emplace_back(GetBigEndian(static_cast<const uint8_t*>(k.mv_data) + 8), v.mv_size);
  }
  mdb_cursor_close(cursor);
  return entries;
}

}  // namespace cedar::cache::detail
