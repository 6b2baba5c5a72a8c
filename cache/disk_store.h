// Internal: the disk tier, an LMDB environment of page entries and snapshot entries.
//
// Entry values are entry_codec.h's format (shared with the remote tier); keys:
//   page      key   = model fingerprint (8 bytes, big-endian) | page digest (8 bytes, big-endian)
//             value = PageHeader | tokens (page_tokens x int32, host order) | payload bytes
//   snapshot  key   = model fingerprint | digest of the page ending at the snapshot | 'S'
//             value = SnapshotHeader | payload bytes
//
// A page header carries the chain (parent digest, page index, tenant salt); a snapshot header
// its position, tenant salt and a checksum of every token before it (so that an entry is never
// taken for another prefix's, even under colliding digests). Both carry the write sequence (for
// LRU order after a restart) and two XXH3-64 checksums: one over the metadata (verified at open,
// when the tree is rebuilt) and one over the payload (verified when the payload is loaded). An
// entry that fails any check is reported, never returned. Keys of this fingerprint with another
// shape (no such entries are written) are ignored, like other fingerprints' entries. Every Put
// or Delete is one LMDB transaction: all of it lands or none.
//
// Files: the directory is created 0700 when missing (its parent must exist) and refused when
// group or others can write it or another user owns it (a page holds a prompt's tokens);
// data.mdb and lock.mdb are made 0600 whatever the umask. A cache is a cache: a data file that
// fails the structural check (lmdb_check.h) or that LMDB cannot open is moved aside
// (`data.mdb.corrupt-<unix time>`, with its lock file), one warning is logged, and the store
// starts empty. The same happens at run time on the first structural error LMDB reports
// (MDB_CORRUPTED, MDB_PAGE_NOTFOUND, ...) or a value that lies outside the file: the store
// continues with a fresh empty file (or none, RAM only, if even that cannot be made), and the
// call that found the damage answers NotFound, like an entry that is gone.
//
// Thread contract: owned by one PrefixCache, used from its owner thread only.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "cache/cache_types.h"
#include "cache/status.h"
#include "cache/tier_store.h"

struct MDB_env;
struct MDB_val;

namespace cedar::cache::detail {

class DiskStore final : public TierStore {
 public:
  // Opens (creating the files if needed) the LMDB environment in `dir`, which must be writable
  // by its owner only (created 0700 if missing). The map is sized for twice the budget plus
  // slack (LMDB needs room for its pages). A damaged data file is moved aside (see above);
  // IOError only for what the operator must fix (the directory, permissions, no space).
  static Result<std::unique_ptr<DiskStore>> Open(const std::string& dir, uint64_t budget_bytes,
                                                 ModelFingerprint fingerprint, size_t page_tokens,
                                                 bool sync_writes);
  ~DiskStore();
  DiskStore(const DiskStore&) = delete;
  DiskStore& operator=(const DiskStore&) = delete;

  // Bytes one entry takes in the budget: header + tokens + payload, or header + payload.
  static uint64_t EntryBytes(size_t page_tokens, uint64_t payload_bytes);
  static uint64_t SnapshotEntryBytes(uint64_t payload_bytes);

  using PageWrite = detail::PageWrite;
  using SnapshotWrite = detail::SnapshotWrite;
  using PageRead = detail::PageRead;
  // Writes all pages and snapshots in one transaction (overwriting same keys). Mutates. A full
  // LMDB map gives ResourceExhausted and writes nothing.
  Status Put(std::span<const PageWrite> pages, std::span<const SnapshotWrite> snapshots = {}) override;

  // Deletes these entries in one transaction; absent ones are ignored. Mutates.
  Status Delete(std::span<const EntryKey> keys);

  // Reads and fully verifies the pages in order, in one read transaction, appending payloads
  // to `out`. Stops at the first bad page with Corruption (or NotFound when the entry is gone);
  // `out` then holds the payloads of the good pages before it. Does not mutate.
  Status Read(std::span<const PageRead> pages, std::vector<Payload>* out) const override;

  // Reads and fully verifies one snapshot against `want` (every field but the sequence):
  // Corruption when it differs or fails a checksum, NotFound when it is gone. Does not mutate.
  Result<Payload> ReadSnapshot(const SnapshotMeta& want) const override;

  struct ScannedPage {
    PageMeta meta;
    std::vector<TokenId> tokens;
  };
  struct ScanResult {
    std::vector<ScannedPage> pages;       // header and tokens verified (payload not yet)
    std::vector<SnapshotMeta> snapshots;  // header verified (payload not yet)
    std::vector<EntryKey> bad;            // entries of this fingerprint that failed verification
  };
  // Reads the metadata of every entry of this fingerprint. Does not mutate.
  Result<ScanResult> Scan() const;

  struct ListedEntry {
    EntryKey key;
    uint64_t bytes = 0;  // value size
  };
  // Every entry of this fingerprint with its size, for integrity checks.
  Result<std::vector<ListedEntry>> List() const;

  const std::string& dir() const { return dir_; }
  // Data files moved aside since Open (at open or at run time), and where the last one went.
  uint64_t files_moved_aside() const { return files_moved_aside_; }
  const std::string& last_moved_aside() const { return last_moved_aside_; }
  // False once the disk tier is gone (a damaged file that could not be replaced): every call
  // then answers as for an empty store and writes nothing.
  bool usable() const { return env_ != nullptr; }

 private:
  DiskStore() = default;

  // Opens the environment in dir_ (no checks); on failure env_ stays null and the LMDB code
  // is returned through *rc.
  Status OpenEnv(int* rc) const;
  // Closes the environment, moves data.mdb and lock.mdb aside, logs one warning naming the
  // reason and the new name, and opens a fresh empty environment (RAM only if that fails).
  void MoveAsideAndReopen(const std::string& reason) const;
  // For an LMDB error `rc` from `what`: a structural error drops the file (as above) and gives
  // NotFound; any other gives IOError.
  Status Failed(const char* what, int rc) const;
  // Is [v, v + size) inside the data file as it is now? (LMDB hands out pointers into its map;
  // a damaged size or page number could point past the file's end, where a read is SIGBUS.)
  // `file_bytes` is FileBytes() (the file's size, capped by the map), read once per transaction.
  bool InsideFile(const MDB_val& v, uint64_t file_bytes) const;
  uint64_t FileBytes() const;
  // Finds where LMDB mapped data.mdb (sets map_base_, or leaves it null: values unchecked).
  void FindMap() const;
  // Calls fn for every entry of this fingerprint in one read transaction.
  Status ForEachEntry(const std::function<void(const EntryKey&, const MDB_val&)>& fn) const;

  std::string dir_;
  ModelFingerprint fingerprint_ = 0;
  size_t page_tokens_ = 0;
  uint64_t map_bytes_ = 0;
  bool sync_writes_ = true;
  // Mutable: a read that finds damage replaces the file (the entries were lost either way).
  mutable MDB_env* env_ = nullptr;
  mutable unsigned dbi_ = 0;
  mutable uint64_t files_moved_aside_ = 0;
  mutable std::string last_moved_aside_;
  mutable const uint8_t* map_base_ = nullptr;  // LMDB's map of data.mdb (null: unknown)
  mutable uint64_t map_bytes_mapped_ = 0;
};

}  // namespace cedar::cache::detail
