// Internal: the interface every storage tier below RAM implements (the LMDB disk tier,
// disk_store.h; the shared Redis tier, remote_store.h), and the entry metadata they share.
//
// An entry is self-describing (entry_codec.h): a page carries its chain position (digest,
// parent digest, page index), tenant salt, model fingerprint, tokens and two checksums; a
// snapshot its position, tenant, a checksum of every token before it and two checksums. A tier
// verifies every field against what the caller expects before it returns a payload, so an entry
// is never taken for another prefix's, another tenant's or another model's.
//
// What differs between tiers is who knows what is stored: the disk tier is private and the
// PrefixCache indexes it (Scan at open), while the remote tier is shared by many processes and
// is only ever probed (a read that finds nothing is a miss).
#pragma once

#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "cache/cache_types.h"
#include "cache/status.h"

namespace cedar::cache::detail {

// payload_bytes of a read that does not know the payload's size (the remote tier: the caller has
// never seen the entry): the size is then taken from the entry and checked by its checksums.
inline constexpr uint64_t kAnyPayloadBytes = std::numeric_limits<uint64_t>::max();

// What a page entry says about itself (everything but the payload).
struct PageMeta {
  uint64_t digest = 0;
  uint64_t parent_digest = 0;   // 0 for a prefix's first page (page_index 0)
  TenantSalt salt = kNoTenant;
  uint32_t page_index = 0;      // position of the page in its prefix, in pages
  uint64_t payload_bytes = 0;   // kAnyPayloadBytes in a read: not known to the reader
  uint64_t sequence = 0;        // logical time of the write (PrefixCache tick)
};

// What a snapshot entry says about itself (everything but the payload).
struct SnapshotMeta {
  uint64_t digest = 0;           // chained digest of the page that ends at `position`
  TenantSalt salt = kNoTenant;
  uint64_t position = 0;         // tokens before the snapshot, a multiple of the page size
  uint64_t prefix_checksum = 0;  // PrefixCache's checksum of those tokens
  uint64_t payload_bytes = 0;    // kAnyPayloadBytes in a read: not known to the reader
  uint64_t sequence = 0;         // logical time of the write (PrefixCache tick)
};

enum class EntryKind : uint8_t { kPage, kSnapshot };

// Names one entry of this fingerprint: a page or a snapshot, by digest.
struct EntryKey {
  uint64_t digest = 0;
  EntryKind kind = EntryKind::kPage;
  friend bool operator==(const EntryKey&, const EntryKey&) = default;
};

struct PageWrite {
  PageMeta meta;
  std::span<const TokenId> tokens;  // page_tokens tokens (copied by a tier that writes later)
  Payload payload;                  // shared, immutable: an asynchronous tier keeps it alive
};
struct SnapshotWrite {
  SnapshotMeta meta;
  Payload payload;
};
struct PageRead {
  PageMeta meta;                    // expected header fields (sequence is not checked)
  std::span<const TokenId> tokens;  // expected tokens
};

// The tier interface. Each implementation states its own thread contract and whether Put is
// synchronous (disk: one transaction, done on return) or asynchronous (remote: queued, written
// by a background thread, faults counted, never reported to the caller).
class TierStore {
 public:
  virtual ~TierStore() = default;

  // Writes these entries (overwriting same keys). Mutates.
  virtual Status Put(std::span<const PageWrite> pages, std::span<const SnapshotWrite> snapshots = {}) = 0;

  // Reads and fully verifies the pages in order, appending payloads to `out`. Stops at the first
  // bad page with Corruption (or NotFound when the entry is gone, or the tier cannot answer);
  // `out` then holds the payloads of the good pages before it.
  virtual Status Read(std::span<const PageRead> pages, std::vector<Payload>* out) const = 0;

  // Reads and fully verifies one snapshot against `want` (every field but the sequence):
  // Corruption when it differs or fails a checksum, NotFound when it is gone.
  virtual Result<Payload> ReadSnapshot(const SnapshotMeta& want) const = 0;
};

}  // namespace cedar::cache::detail
