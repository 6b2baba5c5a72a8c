// Internal: a structural check of an LMDB data file (data.mdb) before LMDB is asked to open it.
//
// LMDB trusts its file: a truncated file makes it read past the end of its map (SIGBUS), a bad
// meta page makes it refuse to open, and damaged branch/leaf/freelist pages make it follow wild
// page numbers (reads anywhere in the map, huge allocations, a freelist that hands out live
// pages). CheckLmdbFile reads the file itself (a read-only map of exactly its size, so no access
// can pass its end) and checks everything LMDB will follow:
//   - size: a whole number of pages (LMDB writes whole pages), at least the two meta pages;
//   - meta pages: flags, magic, data version, page size (a power of two in [512, 65536], the
//     same in both), tree roots and last page in range; the newer one (as LMDB picks it) is
//     then walked;
//   - both trees (the freelist and the main database), every branch, leaf and overflow page
//     reachable from the root: page number inside the file and stored in the page itself, the
//     type expected at its depth (all leaves at md_depth), header bounds, every node inside its
//     page, key sizes <= 511, keys strictly increasing in walk order, no page reached twice,
//     overflow runs long enough for their value and inside the file, only node flags this
//     store writes (no sub-databases or duplicates), and the per-tree counts (branch, leaf,
//     overflow pages, entries, depth) equal to the meta's;
//   - freelist records: 8-byte txnid keys, well-formed ID lists of page numbers in [2, last
//     page], none also used by a tree or listed twice, and every page between the file's end
//     and the meta's last page listed as free (LMDB may leave freed pages unwritten there).
// Cost: one read of every branch and leaf page plus the first page of every overflow run (the
// pages the cache's own metadata scan at open reads anyway), and one bit per page of memory; no
// payload bytes are read (the cache verifies payloads by checksum when it loads them).
// Layout constants are LMDB 0.9's on-disk format for 64-bit little-endian hosts.
#pragma once

#include <cstdint>
#include <string>

#include "cache/status.h"

namespace cedar::cache::detail {

struct LmdbFileStats {
  uint64_t file_bytes = 0;
  uint32_t page_bytes = 0;
  uint64_t pages_walked = 0;     // branch + leaf pages read (both trees)
  uint64_t overflow_pages = 0;   // pages of overflow runs (headers read, contents not)
  uint64_t entries = 0;          // main-database entries
};

// Ok when `path` (an existing data.mdb) passes every check above; Corruption naming the first
// failed check otherwise; IOError when the file cannot be read at all. Does not modify the file.
Status CheckLmdbFile(const std::string& path, LmdbFileStats* stats = nullptr);

}  // namespace cedar::cache::detail
