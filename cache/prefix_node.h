// Internal: one node of the prefix cache's radix tree. Not part of the API; only
// prefix_cache*.cpp touch its fields, always through PrefixCache::Update() so that byte
// totals, LRU sets and the disk index follow every change.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "cache/cache_types.h"

namespace cedar::cache::detail {

// A node holds a span of whole pages: tokens [end - tokens.size(), end) of the prefix that the
// path from its tenant root spells. Spans are split at page boundaries when a match, a pin or a
// snapshot ends inside one; they are never merged after open.
//
// Residency is per node: all pages of a node are in RAM (payloads non-empty) or not, and all
// have a disk entry (on_disk) or not. Every node has its pages somewhere: in RAM, on disk, or
// both. Disk entries are prefix-closed: a node is on disk only if its parent is (or is a root),
// so the entries on disk always form whole chains that a restarted process can rebuild.
//
// A snapshot (at position `end`) lives in RAM (`snapshot` non-null), on disk (snapshot_on_disk),
// or both. A snapshot is on disk only if the node's pages are, so deleting a node's disk entries
// deletes its snapshot's too; its size is known wherever it lives.
struct Node {
  Node* parent = nullptr;               // null only for a tenant root
  TenantSalt salt = kNoTenant;          // the tenant root's salt, copied down for disk entries
  size_t end = 0;                       // prefix length (tokens) after this node's last token
  std::vector<TokenId> tokens;          // pages() * page_tokens tokens
  std::vector<uint64_t> page_digests;   // chained digest of each page, one per page
  std::vector<uint64_t> page_bytes;     // payload size of each page, known wherever it lives
  std::vector<Payload> payloads;        // one per page when in RAM, else empty
  uint64_t payload_bytes = 0;           // sum of page_bytes
  bool on_disk = false;                 // every page has a verified LMDB entry
  Payload snapshot;                     // opaque resume state at position `end` in RAM, or null
  uint64_t snapshot_size = 0;           // payload bytes of the snapshot wherever it lives; 0: none
  bool snapshot_on_disk = false;        // the snapshot has an LMDB entry (header verified)

  // Pin counts. `pins` counts every pin whose path passes through this node (handles and soft
  // pins); `soft_pins` the soft ones among them. `ending_*` count pins whose deepest node this is,
  // so pins == ending_pins + sum(children pins) (checked by CheckIntegrity).
  uint32_t pins = 0;
  uint32_t soft_pins = 0;
  uint32_t ending_pins = 0;
  uint32_t ending_soft_pins = 0;

  // Logical time of last use. Invariant: a parent's tick >= each child's tick.
  uint64_t tick = 0;

  // Children keyed by the digest of their first page. A multimap: colliding digests coexist and
  // are told apart by comparing tokens.
  std::unordered_multimap<uint64_t, std::unique_ptr<Node>> children;

  bool is_root() const { return parent == nullptr; }
  bool in_ram() const { return !payloads.empty(); }
  bool pinned() const { return pins > 0; }
  size_t pages() const { return page_digests.size(); }
  size_t start() const { return end - tokens.size(); }
  bool has_snapshot() const { return snapshot != nullptr || snapshot_on_disk; }
  uint64_t snapshot_ram_bytes() const { return snapshot ? snapshot->size() : 0; }
  uint64_t ram_bytes() const { return (in_ram() ? payload_bytes : 0) + snapshot_ram_bytes(); }
};

// Eviction order: older tick first; on equal ticks the deeper node (larger end) first. Since a
// parent's tick >= its children's and its end is smaller, every node sorts after all of its
// descendants: the first unpinned node of an LRU set is always a leaf of that set's tier.
struct LruKey {
  uint64_t tick = 0;
  size_t end = 0;
  Node* node = nullptr;

  friend bool operator<(const LruKey& a, const LruKey& b) {
    return std::make_tuple(a.tick, ~a.end, reinterpret_cast<uintptr_t>(a.node)) <
           std::make_tuple(b.tick, ~b.end, reinterpret_cast<uintptr_t>(b.node));
  }
  friend bool operator==(const LruKey&, const LruKey&) = default;
};

inline LruKey KeyOf(const Node* n) { return LruKey{n->tick, n->end, const_cast<Node*>(n)}; }

}  // namespace cedar::cache::detail
