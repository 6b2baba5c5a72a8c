// Internal: the disk tier, an LMDB environment of page entries. One entry per page:
//
//   key   = model fingerprint (8 bytes, big-endian) | page digest (8 bytes, big-endian)
//   value = EntryHeader | tokens (page_tokens x int32, host order) | payload bytes
//
// The header carries the chain (parent digest, page index, tenant salt), the write sequence
// (for LRU order after a restart) and two XXH3-64 checksums: one over header and tokens
// (verified at open, when the tree is rebuilt from metadata) and one over the payload
// (verified when the payload is loaded). An entry that fails any check is reported, never
// returned. Every write or delete is one LMDB transaction: all of it lands or none.
//
// Thread contract: owned by one PrefixCache, used from its owner thread only.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "cache/cache_types.h"
#include "cache/status.h"

struct MDB_env;

namespace cedar::cache::detail {

// What a page entry says about itself (everything but the payload).
struct PageMeta {
  uint64_t digest = 0;
  uint64_t parent_digest = 0;   // 0 for a prefix's first page (page_index 0)
  TenantSalt salt = kNoTenant;
  uint32_t page_index = 0;      // position of the page in its prefix, in pages
  uint64_t payload_bytes = 0;
  uint64_t sequence = 0;        // logical time of the write (PrefixCache tick)
};

class DiskStore {
 public:
  // Opens (creating the files if needed) the LMDB environment in `dir`, which must exist and be
  // writable. The map is sized for twice the budget plus slack (LMDB needs room for its pages).
  static Result<std::unique_ptr<DiskStore>> Open(const std::string& dir, uint64_t budget_bytes,
                                                 ModelFingerprint fingerprint, size_t page_tokens,
                                                 bool sync_writes);
  ~DiskStore();
  DiskStore(const DiskStore&) = delete;
  DiskStore& operator=(const DiskStore&) = delete;

  // Bytes one entry takes in the budget: header + tokens + payload.
  static uint64_t EntryBytes(size_t page_tokens, uint64_t payload_bytes);

  struct PageWrite {
    PageMeta meta;
    std::span<const TokenId> tokens;  // page_tokens tokens
    const std::vector<uint8_t>* payload = nullptr;
  };
  // Writes all pages in one transaction (overwriting same keys). Mutates. A full LMDB map
  // gives ResourceExhausted and writes nothing.
  Status Put(std::span<const PageWrite> pages);

  // Deletes the entries of these digests in one transaction; absent ones are ignored. Mutates.
  Status Delete(std::span<const uint64_t> digests);

  struct PageRead {
    PageMeta meta;                    // expected header fields (sequence is not checked)
    std::span<const TokenId> tokens;  // expected tokens
  };
  // Reads and fully verifies the pages in order, in one read transaction, appending payloads
  // to `out`. Stops at the first bad page with Corruption (or NotFound when the entry is gone);
  // `out` then holds the payloads of the good pages before it. Does not mutate.
  Status Read(std::span<const PageRead> pages, std::vector<Payload>* out) const;

  struct ScannedPage {
    PageMeta meta;
    std::vector<TokenId> tokens;
  };
  struct ScanResult {
    std::vector<ScannedPage> pages;    // header and tokens verified (payload not yet)
    std::vector<uint64_t> bad_digests; // entries of this fingerprint that failed verification
  };
  // Reads the metadata of every entry of this fingerprint. Does not mutate.
  Result<ScanResult> Scan() const;

  // (digest, value size) of every entry of this fingerprint, for integrity checks.
  Result<std::vector<std::pair<uint64_t, uint64_t>>> List() const;

  const std::string& dir() const { return dir_; }

 private:
  DiskStore() = default;

  std::string dir_;
  MDB_env* env_ = nullptr;
  unsigned dbi_ = 0;
  ModelFingerprint fingerprint_ = 0;
  size_t page_tokens_ = 0;
};

}  // namespace cedar::cache::detail
