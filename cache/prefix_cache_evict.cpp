// PrefixCache tier mechanics: indexing, eviction (snapshot spill, page spill, disk delete),
// loading from disk, flush, and the tree rebuild at open.
#include <spdlog/spdlog.h>
#include <xxhash.h>

#include <algorithm>
#include <unordered_set>

#include "cache/disk_store.h"
#include "cache/prefix_cache.h"

namespace cedar::cache {

using detail::DiskStore;
using detail::EntryKey;
using detail::EntryKind;
using detail::KeyOf;
using detail::LruKey;
using detail::Node;
using detail::PageMeta;
using detail::SnapshotMeta;

// ---- Index: the sets and totals follow node state exactly ----
//
// Membership rules (leveldb's two-list idea, per tier): a node is in ram_lru_ iff it holds RAM
// pages and is unpinned, in disk_lru_ iff it has disk entries and is unpinned (a disk snapshot
// implies disk pages), in snapshot_lru_ iff it has a RAM snapshot and is unpinned. Pinned nodes
// are in none of them, so eviction never sees pinned state. Index() and Unindex() are exact
// inverses; Update() brackets every change with them.

uint64_t PrefixCache::DiskBytes(const Node* n) const {
  uint64_t bytes = 0;
  if (n->on_disk) bytes += n->pages() * DiskStore::EntryBytes(config_.page_tokens, 0) + n->payload_bytes;
  if (n->snapshot_on_disk) bytes += DiskStore::SnapshotEntryBytes(n->snapshot_size);
  return bytes;
}

// Checksum of every token before node->end, chained page by page (so node boundaries, which
// differ between processes, do not change it), seeded with the fingerprint and tenant. A snapshot
// entry carries it: under colliding digests it still names exactly one prefix.
uint64_t PrefixCache::PrefixChecksum(const Node* node) const {
  std::vector<const Node*> path;
  for (const Node* n = node; !n->is_root(); n = n->parent) path.push_back(n);
  const uint64_t context[2] = {fingerprint_, node->salt};
  uint64_t h = XXH3_64bits(context, sizeof(context));
  const size_t page_bytes = config_.page_tokens * sizeof(TokenId);
  for (auto it = path.rbegin(); it != path.rend(); ++it) {
    for (size_t i = 0; i < (*it)->pages(); ++i) {
      h = XXH3_64bits_withSeed((*it)->tokens.data() + i * config_.page_tokens, page_bytes, h);
    }
  }
  return h;
}

SnapshotMeta PrefixCache::SnapshotMetaOf(const Node* node) const {
  return SnapshotMeta{node->page_digests.back(), node->salt, node->end, PrefixChecksum(node), node->snapshot_size,
                      node->tick};
}

void PrefixCache::Index(Node* n) {
  assert(!n->is_root());
  const uint64_t ram = n->ram_bytes();
  const uint64_t disk = DiskBytes(n);
  ++node_count_;
  ram_used_ += ram;
  disk_used_ += disk;
  ram_pages_ += n->in_ram() ? n->pages() : 0;
  disk_pages_ += n->on_disk ? n->pages() : 0;
  snapshot_count_ += n->has_snapshot() ? 1 : 0;
  disk_snapshots_ += n->snapshot_on_disk ? 1 : 0;
  if (n->pinned()) {
    ram_pinned_ += ram;
    disk_pinned_ += disk;
  } else {
    if (n->in_ram()) ram_lru_.insert(KeyOf(n));
    if (n->on_disk) disk_lru_.insert(KeyOf(n));
    if (n->snapshot) snapshot_lru_.insert(KeyOf(n));
  }
  if (n->soft_pins > 0) soft_pinned_ram_ += ram;
  if (n->on_disk) {
    for (uint64_t d : n->page_digests) {
      const bool fresh = disk_index_.emplace(d, n).second;
      assert(fresh && "one disk entry per key");
      (void)fresh;
    }
  }
}

void PrefixCache::Unindex(Node* n) {
  assert(!n->is_root());
  const uint64_t ram = n->ram_bytes();
  const uint64_t disk = DiskBytes(n);
  --node_count_;
  ram_used_ -= ram;
  disk_used_ -= disk;
  ram_pages_ -= n->in_ram() ? n->pages() : 0;
  disk_pages_ -= n->on_disk ? n->pages() : 0;
  snapshot_count_ -= n->has_snapshot() ? 1 : 0;
  disk_snapshots_ -= n->snapshot_on_disk ? 1 : 0;
  if (n->pinned()) {
    ram_pinned_ -= ram;
    disk_pinned_ -= disk;
  } else {
    [[maybe_unused]] size_t erased = 0;
    if (n->in_ram()) erased += ram_lru_.erase(KeyOf(n));
    if (n->on_disk) erased += disk_lru_.erase(KeyOf(n));
    if (n->snapshot) erased += snapshot_lru_.erase(KeyOf(n));
    assert(erased == size_t{n->in_ram()} + size_t{n->on_disk} + size_t{n->snapshot != nullptr});
  }
  if (n->soft_pins > 0) soft_pinned_ram_ -= ram;
  if (n->on_disk) {
    for (uint64_t d : n->page_digests) disk_index_.erase(d);
  }
}

// ---- Removing nodes ----

// Removes `node` and everything below it from the tree, deleting their disk entries (pages and
// snapshots) in one transaction. REQUIRES: node unpinned (then nothing below it is pinned either).
void PrefixCache::DropSubtree(Node* node) {
  assert(!node->pinned());
  std::vector<Node*> nodes{node};
  for (size_t i = 0; i < nodes.size(); ++i) {
    for (auto& [key, child] : nodes[i]->children) nodes.push_back(child.get());
  }
  std::vector<EntryKey> keys;
  for (Node* n : nodes) {
    if (n->on_disk) {
      for (uint64_t d : n->page_digests) keys.push_back({d, EntryKind::kPage});
      counters_.disk_entries_deleted += n->pages();
    }
    if (n->snapshot_on_disk) {
      keys.push_back({n->page_digests.back(), EntryKind::kSnapshot});
      ++counters_.disk_snapshots_deleted;
    }
    if (n->in_ram()) counters_.pages_dropped += n->pages();
    if (n->snapshot) ++counters_.snapshots_dropped;
    Unindex(n);
  }
  if (!keys.empty()) {
    // On failure the entries stay in LMDB, unaccounted; the next Open() finds them again.
    if (Status s = disk_->Delete(keys); !s.ok()) spdlog::warn("prefix cache: {}", s.ToString());
  }
  spdlog::debug("prefix cache: dropped {} nodes from position {}", nodes.size(), node->start());
  ++subtrees_dropped_;
  Node* parent = node->parent;
  for (auto [it, end] = parent->children.equal_range(node->page_digests.front()); it != end; ++it) {
    if (it->second.get() == node) {
      parent->children.erase(it);
      return;
    }
  }
  assert(false && "node missing from its parent");
}

// ---- RAM tier ----

void PrefixCache::EvictRamTo(uint64_t target_bytes) {
  const DiskResetSync sync(this);
  // 1. Snapshots of unpinned nodes, least recently used first: spilled or dropped.
  while (ram_used_ > target_bytes && !snapshot_lru_.empty()) SpillSnapshot(snapshot_lru_.begin()->node);
  // 2. Page payloads of unpinned RAM leaves, least recently used first.
  while (ram_used_ > target_bytes && !ram_lru_.empty()) SpillNode(ram_lru_.begin()->node);
}

// Releases the node's RAM snapshot, writing it (with any of the node's pages not yet on disk)
// first if it has no disk entry. Writing makes disk room only from entries older than the node,
// so the node itself survives the write.
// REQUIRES: node is unpinned and has a RAM snapshot.
void PrefixCache::SpillSnapshot(Node* node) {
  assert(node->snapshot && !node->pinned());
  if (disk_ && !node->snapshot_on_disk) (void)WriteChain(node, /*with_snapshot=*/true);
  const bool kept = node->snapshot_on_disk;
  spdlog::debug("prefix cache: {} snapshot at {}", kept ? "spill" : "drop", node->end);
  ++(kept ? counters_.snapshots_spilled : counters_.snapshots_dropped);
  Update(node, [&] {
    node->snapshot.reset();
    if (!kept) node->snapshot_size = 0;
  });
}

// REQUIRES: node is the first of ram_lru_: unpinned, in RAM, and no child holds RAM pages.
// EvictRamTo() has released every unpinned RAM snapshot first, so the node has none.
void PrefixCache::SpillNode(Node* node) {
  assert(node->in_ram() && !node->pinned() && !node->snapshot);
  bool on_disk = node->on_disk;
  if (!on_disk && disk_) on_disk = WriteChain(node, /*with_snapshot=*/false).ok();
  if (on_disk) {
    spdlog::debug("prefix cache: spill {} pages at {}", node->pages(), node->start());
    counters_.pages_spilled += node->pages();
    Update(node, [&] { node->payloads.clear(); });
  } else {
    // Not on disk, so no child is either (entries are prefix-closed), and no child is in RAM:
    // the node is a leaf and its pages are lost.
    assert(node->children.empty());
    spdlog::debug("prefix cache: drop {} pages at {} (no disk copy)", node->pages(), node->start());
    DropSubtree(node);
  }
}

// Loads the node's pages. If page i > 0 fails verification, the node is split there: the
// verified head stays (loaded) and the rest is dropped. Returns the loaded node or null.
Node* PrefixCache::LoadNode(Node* node) {
  assert(!node->in_ram() && node->on_disk);
  std::vector<DiskStore::PageRead> reads;
  uint64_t parent_digest = ChainDigest(node->parent);
  const size_t first_page = node->start() / config_.page_tokens;
  for (size_t i = 0; i < node->pages(); ++i) {
    const PageMeta meta{node->page_digests[i], parent_digest, node->salt,
                        static_cast<uint32_t>(first_page + i), node->page_bytes[i], 0};
    reads.push_back({meta, std::span(node->tokens).subspan(i * config_.page_tokens, config_.page_tokens)});
    parent_digest = node->page_digests[i];
  }
  std::vector<Payload> payloads;
  const Status s = disk_->Read(reads, &payloads);
  Node* loaded = node;
  if (s.code() == StatusCode::kIOError) {
    // LMDB itself failed (not the entry): keep the entries and serve nothing from this node.
    spdlog::warn("prefix cache: cannot read disk entries at {}: {}", node->start(), s.ToString());
    return nullptr;
  }
  if (!s.ok()) {
    const size_t bad = node->start() + payloads.size() * config_.page_tokens;
    spdlog::warn("prefix cache: disk entries from position {} dropped: {}", bad, s.ToString());
    ++counters_.corrupt_entries_dropped;
    loaded = payloads.empty() ? nullptr : SplitNode(node, payloads.size());
    DropSubtree(node);
  }
  if (loaded != nullptr) {
    spdlog::debug("prefix cache: load {} pages at {} from disk", loaded->pages(), loaded->start());
    Update(loaded, [&] { loaded->payloads = std::move(payloads); });
  }
  return loaded;
}

void PrefixCache::SyncDiskReset() {
  if (!disk_ || disk_->files_moved_aside() == disk_resets_seen_) return;
  disk_resets_seen_ = disk_->files_moved_aside();
  std::vector<Node*> nodes;  // parents before children
  for (auto& [salt, root] : roots_) nodes.push_back(root.get());
  for (size_t i = 0; i < nodes.size(); ++i) {
    for (auto& [key, child] : nodes[i]->children) nodes.push_back(child.get());
  }
  for (Node* n : nodes) {
    if (n->is_root() || (!n->on_disk && !n->snapshot_on_disk)) continue;
    Update(n, [&] {
      n->on_disk = false;
      n->snapshot_on_disk = false;
      if (!n->snapshot) n->snapshot_size = 0;
    });
  }
  const uint64_t before = counters_.pages_dropped;
  for (auto& [salt, root] : roots_) DropDiskOnlyChildren(root.get());
  spdlog::info("prefix cache: the disk tier was replaced; prefixes that were only on disk are forgotten");
  spdlog::debug("prefix cache: disk reset dropped {} RAM pages below disk-only nodes", counters_.pages_dropped - before);
}

void PrefixCache::DropDiskOnlyChildren(Node* node) {
  std::vector<Node*> gone, kept;
  for (auto& [key, child] : node->children) {
    (child->in_ram() || child->pinned() ? kept : gone).push_back(child.get());
  }
  for (Node* n : gone) DropSubtree(n);  // no disk flags left: nothing is deleted from the store
  for (Node* n : kept) DropDiskOnlyChildren(n);
}

// ---- Snapshots ----

// A snapshot set where one exists replaces it; its disk entry is deleted now (not at the next
// flush), so a restart can never resume from the replaced state. The entry stays only when the
// new bytes equal the RAM copy (a disk-only snapshot is not read back to compare).
void PrefixCache::SetSnapshot(Node* node, Payload payload) {
  assert(payload);
  const bool same = node->snapshot && *node->snapshot == *payload;
  if (node->snapshot_on_disk && !same) {
    const EntryKey key{node->page_digests.back(), EntryKind::kSnapshot};
    // On failure the entry stays in LMDB, unaccounted (CheckIntegrity reports it).
    if (Status s = disk_->Delete({&key, 1}); !s.ok()) spdlog::warn("prefix cache: {}", s.ToString());
    ++counters_.disk_snapshots_deleted;
  }
  Update(node, [&] {
    node->snapshot = std::move(payload);
    node->snapshot_size = node->snapshot->size();
    if (!same) node->snapshot_on_disk = false;
  });
  if (remote_ && !pulling_ && !same) WriteRemoteSnapshot(node);
}

// Reads the node's disk snapshot into RAM, verified against everything the tree knows about it.
// An entry that fails is deleted and counted; an LMDB failure keeps it. Returns whether the node
// now has a RAM snapshot. Skips (false) a snapshot larger than the RAM budget left unpinned.
// REQUIRES: node pinned (its bytes become protected), snapshot on disk and not in RAM.
bool PrefixCache::LoadSnapshot(Node* node) {
  assert(node->pinned() && node->snapshot_on_disk && !node->snapshot);
  const uint64_t room = config_.ram_budget_bytes > ram_pinned_ ? config_.ram_budget_bytes - ram_pinned_ : 0;
  if (node->snapshot_size > room) {
    spdlog::debug("prefix cache: snapshot at {} not loaded: RAM budget", node->end);
    return false;
  }
  Result<Payload> payload = disk_->ReadSnapshot(SnapshotMetaOf(node));
  if (payload.ok()) {
    ++counters_.snapshots_loaded;
    Update(node, [&] { node->snapshot = std::move(payload).value(); });
    return true;
  }
  if (payload.status().code() == StatusCode::kIOError) {
    spdlog::warn("prefix cache: cannot read snapshot at {}: {}", node->end, payload.status().ToString());
    return false;
  }
  spdlog::warn("prefix cache: snapshot entry at {} dropped: {}", node->end, payload.status().ToString());
  ++counters_.corrupt_entries_dropped;
  const EntryKey key{node->page_digests.back(), EntryKind::kSnapshot};
  if (Status s = disk_->Delete({&key, 1}); !s.ok()) spdlog::warn("prefix cache: {}", s.ToString());
  Update(node, [&] {
    node->snapshot_on_disk = false;
    node->snapshot_size = 0;
  });
  return false;
}

// ---- Disk tier ----

// Writes `node` and its ancestors that have no disk entry yet, root side first, and (if
// with_snapshot) the node's RAM snapshot when it has no disk entry, in one transaction, so disk
// entries stay prefix-closed and a snapshot never lands without its pages. Refuses (counted,
// nothing written) when a page's key is taken by another page (a digest collision), or when room
// can be made only by deleting entries newer than `node`; if only the pages fit, they are written
// without the snapshot. Returns Ok iff everything asked was written.
Status PrefixCache::WriteChain(Node* node, bool with_snapshot) {
  assert(disk_);
  std::vector<Node*> chain;
  for (Node* n = node; !n->is_root() && !n->on_disk; n = n->parent) chain.push_back(n);
  std::reverse(chain.begin(), chain.end());
  bool snapshot = with_snapshot && node->snapshot && !node->snapshot_on_disk;
  assert(!chain.empty() || snapshot);

  Status status;
  uint64_t bytes = 0;
  std::unordered_set<uint64_t> keys;
  for (Node* n : chain) {
    bytes += n->pages() * DiskStore::EntryBytes(config_.page_tokens, 0) + n->payload_bytes;
    for (uint64_t d : n->page_digests) {
      if (disk_index_.count(d) || !keys.insert(d).second) {
        status = Status::ResourceExhausted("disk key taken by another prefix (digest collision)");
      }
    }
  }
  // Room for pages and snapshot, else for the pages alone (snapshots are cheaper to lose).
  auto make_room = [&](uint64_t need) {
    if (need > config_.disk_budget_bytes) return Status::ResourceExhausted("entry exceeds the disk budget");
    return MakeDiskRoom(need, KeyOf(node));
  };
  Status snapshot_status;
  if (status.ok() && snapshot) {
    snapshot_status = make_room(bytes + DiskStore::SnapshotEntryBytes(node->snapshot->size()));
    snapshot = snapshot_status.ok();
    if (!snapshot && chain.empty()) status = snapshot_status;
  }
  if (status.ok() && !snapshot) status = make_room(bytes);
  if (status.ok()) {
    std::vector<DiskStore::PageWrite> writes;
    for (Node* n : chain) {
      uint64_t parent_digest = ChainDigest(n->parent);
      const size_t first_page = n->start() / config_.page_tokens;
      for (size_t i = 0; i < n->pages(); ++i) {
        const PageMeta meta{n->page_digests[i], parent_digest, n->salt, static_cast<uint32_t>(first_page + i),
                            n->page_bytes[i], n->tick};
        writes.push_back({meta, std::span(n->tokens).subspan(i * config_.page_tokens, config_.page_tokens),
                          n->payloads[i]});
        parent_digest = n->page_digests[i];
      }
    }
    std::vector<DiskStore::SnapshotWrite> snapshot_writes;
    if (snapshot) snapshot_writes.push_back({SnapshotMetaOf(node), node->snapshot});
    status = disk_->Put(writes, snapshot_writes);
  }
  if (!status.ok() || !snapshot_status.ok()) {
    ++counters_.disk_write_failures;
    spdlog::debug("prefix cache: disk write at {} refused: {}", node->start(),
                  (status.ok() ? snapshot_status : status).ToString());
  }
  if (!status.ok()) return status;
  for (Node* n : chain) Update(n, [&] { n->on_disk = true; });
  if (snapshot) Update(node, [&] { node->snapshot_on_disk = true; });
  return snapshot_status;
}

// Deletes least recently used disk leaves until `bytes` more fit in the budget: a leaf's
// snapshot entry first (its pages may then stay), then its page entries. Only entries that sort
// before `limit` (older than the writer) are deleted; the writer's ancestors never do, since
// they sort after it.
Status PrefixCache::MakeDiskRoom(uint64_t bytes, const LruKey& limit) {
  while (disk_used_ + bytes > config_.disk_budget_bytes) {
    if (disk_lru_.empty() || !(*disk_lru_.begin() < limit)) {
      return Status::ResourceExhausted("disk budget is held by newer or pinned entries");
    }
    Node* victim = disk_lru_.begin()->node;
    if (Status s = victim->snapshot_on_disk ? EvictDiskSnapshot(victim) : EvictDiskNode(victim); !s.ok()) return s;
  }
  return Status::Ok();
}

// Deletes the node's snapshot entry; the snapshot survives if it is also in RAM.
// REQUIRES: node unpinned, snapshot on disk.
Status PrefixCache::EvictDiskSnapshot(Node* node) {
  assert(node->snapshot_on_disk && !node->pinned());
  spdlog::debug("prefix cache: delete disk snapshot at {}", node->end);
  const EntryKey key{node->page_digests.back(), EntryKind::kSnapshot};
  if (Status s = disk_->Delete({&key, 1}); !s.ok()) return s;
  ++counters_.disk_snapshots_deleted;
  Update(node, [&] {
    node->snapshot_on_disk = false;
    if (!node->snapshot) node->snapshot_size = 0;
  });
  return Status::Ok();
}

// Deletes the node's page entries and its snapshot entry, if any (useless without them).
// REQUIRES: node is the first of disk_lru_: unpinned, on disk, no child on disk.
Status PrefixCache::EvictDiskNode(Node* node) {
  assert(node->on_disk && !node->pinned());
  spdlog::debug("prefix cache: delete {} disk entries at {}", node->pages(), node->start());
  if (!node->in_ram()) {
    DropSubtree(node);  // its pages existed only on disk
    return Status::Ok();
  }
  std::vector<EntryKey> keys;
  for (uint64_t d : node->page_digests) keys.push_back({d, EntryKind::kPage});
  if (node->snapshot_on_disk) keys.push_back({node->page_digests.back(), EntryKind::kSnapshot});
  if (Status s = disk_->Delete(keys); !s.ok()) return s;
  counters_.disk_entries_deleted += node->pages();
  counters_.disk_snapshots_deleted += node->snapshot_on_disk ? 1 : 0;
  Update(node, [&] {
    node->on_disk = false;
    node->snapshot_on_disk = false;
    if (!node->snapshot) node->snapshot_size = 0;
  });
  return Status::Ok();
}

Status PrefixCache::Flush() {
  const DiskResetSync sync(this);
  if (!disk_) return Status::Ok();
  ReleaseExpiredSoftPins();
  Status first_error;
  std::unordered_set<Node*> tried;
  auto unwritten = [](const Node* n) { return !n->on_disk || (n->snapshot && !n->snapshot_on_disk); };
  // Newest first, so that if the budget runs out it is the oldest pages that stay unwritten.
  // Making room may drop subtrees (and free nodes listed here): then list again.
  for (bool again = true; again;) {
    again = false;
    std::vector<Node*> pending;
    for (auto& [salt, root] : roots_) {
      std::vector<Node*> stack{root.get()};
      while (!stack.empty()) {
        Node* n = stack.back();
        stack.pop_back();
        for (auto& [key, child] : n->children) stack.push_back(child.get());
        if (!n->is_root() && unwritten(n) && !tried.count(n)) pending.push_back(n);
      }
    }
    std::sort(pending.begin(), pending.end(), [](Node* a, Node* b) { return KeyOf(b) < KeyOf(a); });
    for (Node* n : pending) {
      tried.insert(n);
      if (!unwritten(n)) continue;  // written with a descendant
      const uint64_t drops = subtrees_dropped_;
      if (Status s = WriteChain(n, /*with_snapshot=*/true); !s.ok() && first_error.ok()) first_error = s;
      if (subtrees_dropped_ != drops) {
        again = true;
        break;
      }
    }
  }
  return first_error;
}

// ---- Open: rebuild the tree from disk metadata ----

Status PrefixCache::RebuildFromDisk() {
  auto scan = disk_->Scan();
  if (!scan.ok()) return scan.status();
  std::vector<EntryKey> doomed = scan->bad;
  counters_.corrupt_entries_dropped += doomed.size();

  // Parents before children: sort by page index, then attach each page under its parent page.
  auto& pages = scan->pages;
  std::sort(pages.begin(), pages.end(),
            [](const auto& a, const auto& b) { return a.meta.page_index < b.meta.page_index; });
  std::unordered_map<uint64_t, Node*> by_digest;
  const size_t page = config_.page_tokens;
  for (auto& p : pages) {
    const PageMeta& meta = p.meta;
    if (config_.page_digest(meta.parent_digest, p.tokens, fingerprint_, meta.salt) != meta.digest ||
        (meta.page_index == 0) != (meta.parent_digest == 0)) {
      ++counters_.corrupt_entries_dropped;  // chain fields disagree (or another digest function)
      doomed.push_back({meta.digest, EntryKind::kPage});
      continue;
    }
    Node* parent = nullptr;
    if (meta.page_index == 0) {
      parent = RootForInsert(meta.salt);
    } else if (auto it = by_digest.find(meta.parent_digest);
               it != by_digest.end() && it->second->salt == meta.salt && it->second->end == meta.page_index * page) {
      parent = it->second;
    } else {
      ++counters_.orphan_entries_dropped;
      doomed.push_back({meta.digest, EntryKind::kPage});
      continue;
    }
    auto node = std::make_unique<Node>();
    node->parent = parent;
    node->salt = meta.salt;
    node->end = (meta.page_index + 1) * page;
    node->tokens = std::move(p.tokens);
    node->page_digests = {meta.digest};
    node->page_bytes = {meta.payload_bytes};
    node->payload_bytes = meta.payload_bytes;
    node->on_disk = true;
    node->tick = meta.sequence;
    by_digest[meta.digest] = node.get();
    parent->children.emplace(meta.digest, std::move(node));
  }
  // Snapshots attach to the (still one-page) node of their page, if it is the same prefix.
  for (const SnapshotMeta& meta : scan->snapshots) {
    auto it = by_digest.find(meta.digest);
    if (it == by_digest.end()) {
      ++counters_.orphan_entries_dropped;  // its page is gone or was dropped above
      doomed.push_back({meta.digest, EntryKind::kSnapshot});
      continue;
    }
    Node* n = it->second;
    if (n->salt != meta.salt || n->end != meta.position || PrefixChecksum(n) != meta.prefix_checksum) {
      ++counters_.corrupt_entries_dropped;  // written for another prefix under a colliding key
      doomed.push_back({meta.digest, EntryKind::kSnapshot});
      continue;
    }
    n->snapshot_on_disk = true;
    n->snapshot_size = meta.payload_bytes;
    n->tick = std::max(n->tick, meta.sequence);
  }
  if (!doomed.empty()) {
    if (Status s = disk_->Delete(doomed); !s.ok()) spdlog::warn("prefix cache: {}", s.ToString());
  }
  IndexRebuiltTree();
  const bool dropped = counters_.corrupt_entries_dropped + counters_.orphan_entries_dropped > 0;
  spdlog::log(dropped ? spdlog::level::warn : spdlog::level::debug,
              "prefix cache: opened '{}': {} pages and {} snapshots on disk ({} bytes), {} corrupt and {} orphan "
              "entries dropped",
              disk_->dir(), disk_pages_, disk_snapshots_, disk_used_, counters_.corrupt_entries_dropped,
              counters_.orphan_entries_dropped);
  // A smaller budget than last time: delete the oldest entries.
  return MakeDiskRoom(0, LruKey{UINT64_MAX, 0, nullptr});
}

// Merges single-child chains of the one-page nodes built from disk into span nodes (up to
// max_node_pages; a node with a snapshot ends there), lifts ticks so that no parent is older than
// a child, and indexes every node.
void PrefixCache::IndexRebuiltTree() {
  uint64_t max_tick = 0;
  std::vector<Node*> order;  // pre-order
  for (auto& [salt, root] : roots_) {
    std::vector<Node*> stack{root.get()};
    while (!stack.empty()) {
      Node* n = stack.back();
      stack.pop_back();
      while (!n->is_root() && n->children.size() == 1 && !n->has_snapshot() &&
             n->pages() + n->children.begin()->second->pages() <= config_.max_node_pages) {
        std::unique_ptr<Node> child = std::move(n->children.begin()->second);
        n->children.clear();
        n->tokens.insert(n->tokens.end(), child->tokens.begin(), child->tokens.end());
        n->page_digests.insert(n->page_digests.end(), child->page_digests.begin(), child->page_digests.end());
        n->page_bytes.insert(n->page_bytes.end(), child->page_bytes.begin(), child->page_bytes.end());
        n->payload_bytes += child->payload_bytes;
        n->end = child->end;
        n->snapshot_on_disk = child->snapshot_on_disk;
        n->snapshot_size = child->snapshot_size;
        n->tick = std::max(n->tick, child->tick);
        n->children = std::move(child->children);
        for (auto& [key, grandchild] : n->children) grandchild->parent = n;
      }
      order.push_back(n);
      for (auto& [key, child] : n->children) stack.push_back(child.get());
    }
  }
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    Node* n = *it;
    if (!n->is_root()) {
      n->parent->tick = std::max(n->parent->tick, n->tick);
      max_tick = std::max(max_tick, n->tick);
      Index(n);
    }
  }
  for (auto& [salt, root] : roots_) root->tick = 0;
  tick_ = max_tick + 1;
}

}  // namespace cedar::cache
