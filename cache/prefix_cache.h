// The prefix cache: a radix tree over token ids that keeps, per page of tokens, an opaque page
// payload (later: the model's compressed K/V rows of those tokens) and, at chosen page
// boundaries, opaque snapshot payloads (later: the resume state at that boundary).
//
// Storage is in whole pages only: of a prompt of N tokens, the first floor(N / page) * page
// tokens are stored and the partial page at the end is not (the caller recomputes it). A match
// therefore always ends on a page boundary, and snapshots sit on page boundaries.
//
// Tiers: RAM with a byte budget, then an LMDB directory with its own budget. Pages and snapshots
// both live in either tier or both; a snapshot is on disk only while its pages are (a snapshot
// without its pages is useless), so deleting a page's disk entry deletes the disk snapshots at
// and below it. Under RAM pressure, in this order: (1) snapshots of unpinned nodes leave RAM,
// least recently used first: spilled when they have or get a disk entry (written with any of
// their pages not yet on disk, in one transaction), dropped when there is no disk tier or the
// write is refused; (2) page payloads of unpinned nodes spill to LMDB, least recently used leaves
// first (a page whose disk write is refused is dropped instead); (3) to make room on disk, the
// least recently used disk entries are deleted, leaves first, a node's snapshot entry before its
// page entries (snapshots are cheaper to lose: the pages may then stay), but only entries older
// than what is being written: when disk holds only newer entries, the write is refused cleanly.
// Pinned state (handles, soft pins) is never evicted, in either tier.
//
// Restart: Open() over a directory rebuilds the tree eagerly from the entries' metadata (page
// headers and tokens, snapshot headers: position, size, tenant and a checksum of the tokens
// before it, all checksummed); payloads are read and verified lazily, when an Acquire uses them.
// RAM pages and snapshots are written to disk by Flush() and, by default, when the cache is
// destroyed, so a restarted cache resumes exactly where the snapshots were. Match() reports a
// snapshot on disk like one in RAM (MatchResult::snapshot_on_disk tells them apart); Acquire()
// loads and verifies the one snapshot it returns, the deepest, and falls back to the next
// shallower one if that entry fails verification (dropped and counted) or does not fit the RAM
// budget. Setting a snapshot where one exists (Insert, AddSnapshot) deletes the old disk entry
// at once (unless the new bytes equal the RAM copy), so a restart never resumes from a replaced
// state.
//
// Disk entries are keyed by the model fingerprint, then the page's chained digest (a snapshot:
// the digest of the page it follows, then a snapshot tag): entries of another fingerprint in the
// same directory are never read, counted or deleted. A missing or unwritable cache directory is an
// error at Open() (IOError naming the path); there is no silent fallback to RAM, which would hide
// a misconfiguration. An empty `disk_dir` asks for a RAM-only cache.
//
// Thread contract: single owner thread. All methods, and PrefixHandle's destructor, run on the
// thread that owns the cache. Handles must be released before the cache is destroyed.
#pragma once

#include <chrono>
#include <cstdint>
#include <list>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "cache/cache_types.h"
#include "cache/prefix_node.h"
#include "cache/remote_config.h"
#include "cache/status.h"

namespace cedar::cache {

struct RemoteStats;

namespace detail {
class DiskStore;
class RemoteStore;
struct SnapshotMeta;
}  // namespace detail

struct PrefixCacheConfig {
  size_t page_tokens = 16;                       // tokens per page: a power of two, >= 2
  size_t max_node_pages = 64;                    // new nodes are cut to at most this many pages
                                                 // (bounds spill and load granularity)
  uint64_t ram_budget_bytes = 1ull << 30;        // page payloads + snapshots held in RAM
  std::string disk_dir;                          // existing writable directory; empty = RAM only
  uint64_t disk_budget_bytes = 8ull << 30;       // sum of entry sizes (header + tokens + payload)
  bool sync_disk_writes = true;                  // fsync each LMDB commit (off: faster, and a
                                                 // power cut may lose recent entries)
  bool flush_on_close = true;                    // destructor writes RAM pages to disk
  double soft_pin_max_share = 0.25;              // cap on soft-pinned RAM bytes / RAM budget
  std::chrono::milliseconds soft_pin_ttl{std::chrono::minutes(10)};  // default soft-pin TTL
  ClockFn clock;                                 // empty = SteadyClock()
  PageDigestFn page_digest;                      // empty = Xxh3PageDigest
  RemoteTierConfig remote;                       // the shared Redis tier under RAM and disk
                                                 // (remote_store.h); url "" = none
};

// What PullRemote() brought from the remote tier into RAM. Lengths in tokens.
struct RemotePull {
  size_t from_tokens = 0;        // the local match (RAM or disk) the pull extended
  size_t pulled_tokens = 0;      // pages brought: [from_tokens, from_tokens + pulled_tokens)
  size_t snapshot_position = 0;  // a snapshot brought (0 = none)
  size_t end() const { return from_tokens + pulled_tokens; }
};

// One opaque snapshot at a page boundary: the resume state after `position` tokens.
struct SnapshotInput {
  size_t position = 0;  // a multiple of page_tokens, > 0
  Payload payload;
};

// What Match() found. All lengths are in tokens and multiples of the page size.
struct MatchResult {
  size_t matched_tokens = 0;      // longest cached prefix of the query
  size_t ram_tokens = 0;          // of which held in RAM
  size_t disk_tokens = 0;         // of which only on disk (Acquire loads them)
  size_t snapshot_position = 0;   // deepest snapshot at or before matched_tokens; 0 = none
  bool snapshot_on_disk = false;  // that snapshot is only on disk (Acquire loads and verifies it)
};

struct InsertResult {
  size_t cached_tokens = 0;   // full-page tokens that were already present
  size_t added_tokens = 0;    // tokens of the pages added by this call
  size_t stored_tokens = 0;   // cached + added: the part of the input the cache now holds
  size_t refused_tokens = 0;  // whole-page tokens past stored_tokens that did not fit beside
                              // the pinned bytes (a partial insert; 0 = everything stored)
  std::vector<size_t> refused_snapshots;  // positions of input snapshots not set (past the
                                          // stored part, or on a pinned node with no room)
  bool partial() const { return refused_tokens > 0 || !refused_snapshots.empty(); }
};

// Bytes of one tier. Protected bytes belong to pinned nodes (handles and soft pins): in RAM
// their payloads and snapshots, on disk their entries; eviction skips both.
struct TierBytes {
  uint64_t evictable_bytes = 0;
  uint64_t protected_bytes = 0;
  uint64_t budget_bytes = 0;
  uint64_t used_bytes() const { return evictable_bytes + protected_bytes; }
};

struct CacheSizes {
  TierBytes ram;                     // page payloads and snapshots held in RAM
  TierBytes disk;                    // LMDB entries of this fingerprint (pages and snapshots)
  uint64_t soft_pinned_ram_bytes = 0;  // part of ram.protected_bytes held by soft pins
  size_t nodes = 0;
  size_t ram_pages = 0;
  size_t disk_pages = 0;
  size_t snapshots = 0;              // in RAM, on disk or both
  size_t disk_snapshots = 0;         // of which with an LMDB entry
};

struct CacheCounters {
  uint64_t acquires = 0;                 // Acquire() calls
  uint64_t acquire_misses = 0;           // of which acquired nothing
  uint64_t ram_hit_tokens = 0;           // tokens acquired from RAM
  uint64_t disk_hit_tokens = 0;          // tokens acquired by loading from disk
  uint64_t miss_tokens = 0;              // query tokens Acquire could not serve
  uint64_t snapshots_spilled = 0;        // eviction kind 1: RAM payload released, disk keeps it
  uint64_t snapshots_dropped = 0;        // RAM snapshots lost: no disk copy (RAM-only cache, or
                                         // the disk write was refused), or their node dropped
  uint64_t snapshots_loaded = 0;         // snapshots Acquire read (and verified) from disk
  uint64_t pages_spilled = 0;            // eviction kind 2: RAM payload released, disk keeps it
  uint64_t pages_dropped = 0;            // RAM pages lost: disk refused or RAM-only cache
  uint64_t disk_entries_deleted = 0;     // eviction kind 3: page entries
  uint64_t disk_snapshots_deleted = 0;   // snapshot entries deleted: disk room, with their
                                         // pages, or replaced by a new snapshot
  uint64_t corrupt_entries_dropped = 0;  // disk entries (pages or snapshots) that failed
                                         // verification (the entries after them in their prefix
                                         // count as deleted)
  uint64_t orphan_entries_dropped = 0;   // disk entries whose parent entry (for a snapshot: its
                                         // page) was missing at open
  uint64_t disk_write_failures = 0;      // refused or failed disk writes (budget, collision, IO)
  uint64_t soft_pins_expired = 0;
  uint64_t soft_pins_yielded = 0;        // released early to respect the soft-pin cap
  uint64_t remote_hit_tokens = 0;        // tokens PullRemote brought from the remote tier
  uint64_t remote_snapshots_loaded = 0;  // snapshots PullRemote brought (verified)
  uint64_t remote_pulls = 0;             // PullRemote calls that asked the remote tier
};

class PrefixCache;

// A pinned cached prefix. While alive, every node of the prefix (from the first page to the
// last) stays in RAM and nothing evicts them or their snapshots (in RAM or on disk). The
// payloads it hands out are shared immutable buffers that stay valid after release. Move-only; releases the pin when
// destroyed or on Release().
// REQUIRES: released on the cache's owner thread, before the cache is destroyed.
class PrefixHandle {
 public:
  PrefixHandle() = default;
  PrefixHandle(PrefixHandle&& other) noexcept;
  PrefixHandle& operator=(PrefixHandle&& other) noexcept;
  PrefixHandle(const PrefixHandle&) = delete;
  PrefixHandle& operator=(const PrefixHandle&) = delete;
  ~PrefixHandle() { Release(); }

  bool empty() const { return tokens_ == 0; }
  size_t tokens() const { return tokens_; }                  // a multiple of the page size
  const std::vector<Payload>& pages() const { return pages_; }  // one per page, in order
  size_t snapshot_position() const { return snapshot_position_; }  // 0 = no snapshot
  const Payload& snapshot() const { return snapshot_; }       // null when position is 0

  void Release();  // unpins now (idempotent)

 private:
  friend class PrefixCache;

  PrefixCache* cache_ = nullptr;
  detail::Node* deepest_ = nullptr;
  size_t tokens_ = 0;
  std::vector<Payload> pages_;
  size_t snapshot_position_ = 0;
  Payload snapshot_;
};

// The cache. Not copyable or movable (handles point to it). See the file comment for the
// eviction order, restart behaviour and thread contract.
class PrefixCache {
 public:
  using PageProvider = std::function<Result<Payload>(size_t page_index, std::span<const TokenId> page)>;

  // Opens a cache for one model. With a disk_dir, opens the LMDB environment there and
  // rebuilds the tree from this fingerprint's entries (dropping and counting corrupt ones).
  // REQUIRES: no other open PrefixCache in this process uses the same directory.
  static Result<std::unique_ptr<PrefixCache>> Open(ModelFingerprint fingerprint, PrefixCacheConfig config);
  ~PrefixCache();  // REQUIRES: no live handle. Flushes RAM pages and snapshots if flush_on_close.
  PrefixCache(const PrefixCache&) = delete;
  PrefixCache& operator=(const PrefixCache&) = delete;

  // ---- Queries (do not mutate) ----

  // Longest cached prefix of `tokens` under `salt`, confirmed token by token. Counts nothing
  // and touches no LRU state: Acquire() is what records a use.
  MatchResult Match(std::span<const TokenId> tokens, TenantSalt salt = kNoTenant) const;

  CacheSizes Sizes() const;
  CacheCounters Counters() const { return counters_; }

  // Verifies every invariant: tree shape and token spans, digest chains, residency, pin counts,
  // LRU sets, byte totals, the disk index against LMDB, budgets. Returns the first violation
  // as Corruption, or Ok. O(size of the cache); reads LMDB keys.
  Status CheckIntegrity() const;

  ModelFingerprint fingerprint() const { return fingerprint_; }
  const PrefixCacheConfig& config() const { return config_; }
  bool has_disk_tier() const { return disk_ != nullptr; }
  bool has_remote_tier() const { return remote_ != nullptr; }
  // The remote tier's counters (all zero without one). Thread-safe snapshot of atomics.
  RemoteStats RemoteCounters() const;

  // ---- Mutations ----

  // Pins the longest cached prefix of `tokens` and returns its payloads. Loads pages that live
  // on disk (a disk hit); a disk entry that fails verification is dropped with everything below
  // it and counted, and the handle ends before it. The pinned bytes never exceed the RAM budget:
  // the handle stops at the last node that fits. An empty handle is a miss. The handle's
  // snapshot is the deepest one of the pinned prefix; one only on disk is loaded and verified
  // (position, chain digest, tenant, prefix tokens, payload checksum): if it fails, its entry is
  // deleted and counted and the next shallower snapshot is tried, so a handle never carries a
  // wrong snapshot. A disk snapshot that does not fit the RAM budget left is skipped likewise.
  Result<PrefixHandle> Acquire(std::span<const TokenId> tokens, TenantSalt salt = kNoTenant);

  // The remote tier (remote_store.h), read only where RAM and disk miss: looks up, in one
  // deadline, the whole pages of `tokens` past the local match and the snapshots past the local
  // match's deepest one, verifies them (key, chain, tenant, tokens, checksums) and adds what
  // verified to RAM as an ordinary insert (admission and budget as Insert; nothing is written
  // back). A fault is a miss: nothing changes. Without a remote tier, does nothing.
  RemotePull PullRemote(std::span<const TokenId> tokens, TenantSalt salt = kNoTenant);

  // Blocks until the remote tier's writer has sent what was queued so far (tests).
  void DrainRemoteWrites();

  // Adds the missing whole pages of `tokens` (a trailing partial page is ignored). Planning
  // comes first: `provider` is called once per missing page, in order (page_index counts from
  // the start of `tokens`), before anything changes; if it fails, the call returns its error
  // and the cache is unchanged. Then the pages are added, the snapshots set (replacing any at
  // the same position, in the new or the already cached part), and the RAM budget enforced.
  // Admission respects the budget: pinned bytes cannot be evicted, so the new pages are
  // admitted only while they (and the RAM pages of the cached prefix they extend) fit in the
  // RAM budget beside them; the rest is refused (a partial insert, reported in the result),
  // as is a snapshot past the admitted end or one that would take pinned bytes over the budget.
  // Older unpinned state is evicted before the new pages are added, so RAM use never
  // overshoots the budget, not even inside the call, unless pinned state alone exceeds it.
  // REQUIRES (else InvalidArgument, nothing changed): every snapshot position is a multiple of
  // page_tokens in (0, stored tokens] with a non-null payload; the provider returns non-null.
  Result<InsertResult> Insert(std::span<const TokenId> tokens, const PageProvider& provider,
                              std::span<const SnapshotInput> snapshots = {},
                              TenantSalt salt = kNoTenant);

  // Sets the snapshot after `position` tokens of `tokens_prefix`, replacing any there.
  // REQUIRES: position is a multiple of page_tokens, 0 < position <= tokens_prefix.size().
  // NotFound if those pages are not cached; ResourceExhausted (nothing changed) if the node is
  // pinned and the snapshot would take pinned bytes over the RAM budget.
  Status AddSnapshot(std::span<const TokenId> tokens_prefix, size_t position, Payload payload,
                     TenantSalt salt = kNoTenant);

  // Soft-pins the longest cached prefix of `tokens` (as Acquire, loading from disk) for `ttl`
  // (default config.soft_pin_ttl); pinning the same prefix again renews it. Soft-pinned RAM
  // bytes are capped at soft_pin_max_share of the RAM budget: beyond it the oldest soft pins
  // yield. Returns the pinned length; NotFound if nothing is cached, ResourceExhausted if this
  // prefix alone exceeds the cap.
  Result<size_t> SoftPin(std::span<const TokenId> tokens, TenantSalt salt = kNoTenant,
                         std::optional<std::chrono::milliseconds> ttl = std::nullopt);

  // Releases the soft pin whose prefix is exactly the longest cached prefix of `tokens`.
  Status SoftUnpin(std::span<const TokenId> tokens, TenantSalt salt = kNoTenant);

  // Releases soft pins whose TTL has passed; every other mutation does this first. Returns how
  // many expired.
  size_t ReleaseExpiredSoftPins();

  // Evicts (in the order of the file comment) until RAM use is <= target_bytes or only pinned
  // state remains. Enforcing the budget is EvictRamTo(ram_budget_bytes).
  void EvictRamTo(uint64_t target_bytes);

  // Writes every RAM page and every RAM snapshot that has no disk entry yet, newest first, within
  // the disk budget: each node's missing pages (with those of its ancestors) and its snapshot in
  // one transaction, or its pages alone if the snapshot does not fit too. RAM contents do not
  // change. Ok when everything was written (or there is no disk tier).
  Status Flush();

  // Forgets partition `salt` (one tenant's, or one cache_salt's): drops every unpinned node in
  // it, RAM and disk, as eviction would. Pinned paths (sessions' prefixes, soft pins, handles in
  // use) stay. Other partitions are untouched. Returns the tokens dropped (cache/prefix_cache_drop.cpp).
  size_t DropPartition(TenantSalt salt);

 private:
  friend class PrefixHandle;
  using Node = detail::Node;
  struct PathMatch;
  struct SoftPinRecord {
    Node* deepest;
    std::chrono::milliseconds expires;
  };

  PrefixCache(ModelFingerprint fingerprint, PrefixCacheConfig config);

  // prefix_cache.cpp: walking, pins, acquisition.
  Node* RootFor(TenantSalt salt) const;
  Node* RootForInsert(TenantSalt salt);
  PathMatch Walk(std::span<const TokenId> tokens, TenantSalt salt) const;
  std::vector<Node*> PathTo(Node* deepest) const;          // root's child .. deepest
  Node* SplitNode(Node* node, size_t keep_pages);          // returns the new head
  Node* MaterializePath(PathMatch& m);                     // splits a partial end; deepest
  Node* NodeEndingAt(Node* deepest, size_t position);     // splits so a node ends there
  std::vector<Node*> LoadPathWithinBudget(Node* deepest, size_t* loaded_tokens);
  void Pin(Node* deepest, bool soft);
  void Unpin(Node* deepest, bool soft);
  void ReleaseHandle(Node* deepest);
  void Touch(Node* deepest);
  bool SnapshotFits(const Node* node, const Payload& payload) const;  // pinned bytes stay <= budget

  // prefix_cache_evict.cpp: tiers, eviction, disk, rebuild.
  template <class F> void Update(Node* node, F&& change);
  void Index(Node* node);
  void Unindex(Node* node);
  Node* LoadNode(Node* node);                              // the verified part, or null
  void DropSubtree(Node* node);                            // unpinned node and all below it
  void SpillNode(Node* node);
  void SpillSnapshot(Node* node);                          // eviction kind 1
  void SetSnapshot(Node* node, Payload payload);           // replaces any, in RAM and on disk
  bool LoadSnapshot(Node* node);                           // false: none usable (entry dropped)
  Status WriteChain(Node* node, bool with_snapshot);       // node + ancestors not on disk
  Status MakeDiskRoom(uint64_t bytes, const detail::LruKey& limit);
  Status EvictDiskNode(Node* node);
  Status EvictDiskSnapshot(Node* node);
  uint64_t DiskBytes(const Node* node) const;
  uint64_t ChainDigest(const Node* parent) const;          // digest the next page chains from
  uint64_t PrefixChecksum(const Node* node) const;         // of the tokens before node->end
  detail::SnapshotMeta SnapshotMetaOf(const Node* node) const;
  Status RebuildFromDisk();
  void IndexRebuiltTree();
  void ReleaseSoftPin(std::list<SoftPinRecord>::iterator it);
  uint64_t SoftPinCap() const;
  bool EnforceSoftPinCap(const Node* keep);               // false: `keep` alone is over the cap
  void Settle();                                           // soft-pin cap, then RAM budget
  // After the disk store replaced a damaged file with an empty one (DiskStore::files_moved_aside
  // moved), nothing the tree has on disk is there any more: RAM pages and snapshots lose their
  // disk flags, and nodes whose pages were only on disk are dropped with everything below them
  // (never pinned: a pin keeps its whole path in RAM). Runs when the outermost public call that
  // may touch the disk returns (DiskResetSync), never in the middle of one.
  void SyncDiskReset();
  void DropDiskOnlyChildren(Node* node);
  struct DiskResetSync {
    explicit DiskResetSync(PrefixCache* c) : cache(c) { ++cache->disk_call_depth_; }
    ~DiskResetSync() {
      if (--cache->disk_call_depth_ == 0) cache->SyncDiskReset();
    }
    DiskResetSync(const DiskResetSync&) = delete;
    DiskResetSync& operator=(const DiskResetSync&) = delete;
    PrefixCache* cache;
  };

  // prefix_cache_remote.cpp: the remote tier's writes (pages of `deepest`'s path: those at or
  // past `new_from` tokens are new, the rest refreshed; and one snapshot).
  void WriteRemotePages(Node* deepest, size_t new_from);
  void WriteRemoteSnapshot(Node* node);

  // prefix_cache_check.cpp
  Status CheckNode(const Node* node) const;
  Status CheckDisk() const;

  const ModelFingerprint fingerprint_;
  const PrefixCacheConfig config_;
  std::unique_ptr<detail::DiskStore> disk_;
  std::unique_ptr<detail::RemoteStore> remote_;
  bool pulling_ = false;  // PullRemote's insert: what came from the remote tier is not sent back

  // One root per tenant salt; roots hold no tokens and are never pinned or evicted.
  std::unordered_map<TenantSalt, std::unique_ptr<Node>> roots_;

  // Indexes kept by Index()/Unindex() (leveldb-style: membership follows state exactly):
  //   ram_lru_      nodes with RAM pages and no pin
  //   disk_lru_     nodes with disk entries (pages, and maybe a snapshot) and no pin
  //   snapshot_lru_ nodes with a RAM snapshot and no pin
  //   disk_index_   page digest -> node, for every page with a disk entry (one owner per key);
  //                 a disk snapshot is keyed by its node's last page digest, so this also
  //                 finds the owner of every snapshot entry
  // LruKey orders leaves before their ancestors, so begin() is the next victim of each tier.
  std::set<detail::LruKey> ram_lru_;
  std::set<detail::LruKey> disk_lru_;
  std::set<detail::LruKey> snapshot_lru_;
  std::unordered_map<uint64_t, Node*> disk_index_;

  // Totals kept by Index()/Unindex().
  uint64_t ram_used_ = 0;
  uint64_t ram_pinned_ = 0;
  uint64_t disk_resets_seen_ = 0;  // DiskStore::files_moved_aside() the tree has caught up with
  int disk_call_depth_ = 0;         // public calls in progress (DiskResetSync)
  uint64_t disk_used_ = 0;
  uint64_t disk_pinned_ = 0;
  uint64_t soft_pinned_ram_ = 0;
  size_t node_count_ = 0;
  size_t ram_pages_ = 0;
  size_t disk_pages_ = 0;
  size_t snapshot_count_ = 0;
  size_t disk_snapshots_ = 0;
  uint64_t subtrees_dropped_ = 0;  // lets Flush() notice that nodes it listed may be gone

  std::list<SoftPinRecord> soft_pins_;  // oldest (first pinned or renewed) first
  size_t live_handles_ = 0;
  uint64_t tick_ = 1;
  CacheCounters counters_;
};

// Every change to a node's indexed state (residency, snapshot, pins, tick, span) goes through
// Update, so the LRU sets, disk index and byte totals always describe the tree exactly.
template <class F>
void PrefixCache::Update(Node* node, F&& change) {
  Unindex(node);
  change();
  Index(node);
}

}  // namespace cedar::cache
