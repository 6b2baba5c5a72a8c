// PrefixCache::CheckIntegrity: recomputes everything the cache keeps incrementally and compares.
#include <fmt/format.h>

#include <algorithm>
#include <set>
#include <unordered_map>

#include "cache/disk_store.h"
#include "cache/prefix_cache.h"

namespace cedar::cache {

using detail::DiskStore;
using detail::KeyOf;
using detail::Node;

namespace {

Status Violation(const Node* n, std::string_view what) {
  return Status::Corruption(fmt::format("node [{}, {}): {}", n->start(), n->end, what));
}

}  // namespace

// Checks one non-root node against its parent and its own fields.
Status PrefixCache::CheckNode(const Node* n) const {
  const Node* parent = n->parent;
  const size_t page = config_.page_tokens;
  if (n->pages() == 0) return Violation(n, "holds no page");
  if (n->tokens.size() != n->pages() * page) return Violation(n, "token count is not pages * page size");
  if (n->page_bytes.size() != n->pages()) return Violation(n, "page_bytes size differs from page count");
  if (n->end != parent->end + n->tokens.size()) return Violation(n, "span does not start where its parent ends");
  if (n->salt != parent->salt) return Violation(n, "tenant salt differs from its parent");
  if (!n->payloads.empty() && n->payloads.size() != n->pages()) return Violation(n, "partially resident in RAM");
  uint64_t sum = 0;
  for (size_t i = 0; i < n->pages(); ++i) {
    sum += n->page_bytes[i];
    if (n->in_ram() && (!n->payloads[i] || n->payloads[i]->size() != n->page_bytes[i])) {
      return Violation(n, fmt::format("page {} payload size differs from its accounting", i));
    }
  }
  if (sum != n->payload_bytes) return Violation(n, "payload_bytes is not the sum of page_bytes");
  uint64_t chain = ChainDigest(parent);
  for (size_t i = 0; i < n->pages(); ++i) {
    chain = config_.page_digest(chain, std::span(n->tokens).subspan(i * page, page), fingerprint_, n->salt);
    if (chain != n->page_digests[i]) return Violation(n, fmt::format("page {} digest breaks the chain", i));
  }
  if (!n->in_ram() && !n->on_disk) return Violation(n, "pages are neither in RAM nor on disk");
  if (n->snapshot_on_disk && !n->on_disk) return Violation(n, "snapshot on disk without its pages");
  if (n->snapshot && n->snapshot->size() != n->snapshot_size) {
    return Violation(n, "snapshot size differs from its accounting");
  }
  if (!n->has_snapshot() && n->snapshot_size != 0) return Violation(n, "snapshot size without a snapshot");
  if (n->on_disk && !parent->is_root() && !parent->on_disk) return Violation(n, "on disk under a parent that is not");
  if (n->pinned() && !n->in_ram()) return Violation(n, "pinned but not in RAM");
  if (n->soft_pins > n->pins || n->ending_soft_pins > n->ending_pins) return Violation(n, "more soft pins than pins");
  if (!parent->is_root() && n->tick > parent->tick) return Violation(n, "used more recently than its parent");

  uint32_t child_pins = 0;
  uint32_t child_soft = 0;
  for (const auto& [key, child] : n->children) {
    child_pins += child->pins;
    child_soft += child->soft_pins;
  }
  if (n->pins != n->ending_pins + child_pins) return Violation(n, "pin count != own pins + children's");
  if (n->soft_pins != n->ending_soft_pins + child_soft) return Violation(n, "soft pin count != own + children's");

  const bool free = !n->pinned();
  if (ram_lru_.count(KeyOf(n)) != size_t{free && n->in_ram()}) return Violation(n, "RAM LRU membership");
  if (disk_lru_.count(KeyOf(n)) != size_t{free && n->on_disk}) return Violation(n, "disk LRU membership");
  if (snapshot_lru_.count(KeyOf(n)) != size_t{free && n->snapshot != nullptr}) {
    return Violation(n, "snapshot LRU membership");
  }
  for (uint64_t d : n->page_digests) {
    auto it = disk_index_.find(d);
    const bool mine = it != disk_index_.end() && it->second == n;
    if (mine != n->on_disk) return Violation(n, "disk index disagrees with on_disk");
  }
  return Status::Ok();
}

Status PrefixCache::CheckIntegrity() const {
  struct Totals {
    uint64_t ram = 0, ram_pinned = 0, disk = 0, disk_pinned = 0, soft = 0;
    size_t nodes = 0, ram_pages = 0, disk_pages = 0, snapshots = 0, disk_snapshots = 0;
    size_t ram_free = 0, disk_free = 0, snap_free = 0;
    uint64_t ending_hard = 0;
  } t;
  std::unordered_map<const Node*, uint32_t> soft_records;
  for (const SoftPinRecord& r : soft_pins_) ++soft_records[r.deepest];
  size_t soft_records_seen = 0;

  for (const auto& [salt, root] : roots_) {
    if (root->salt != salt || !root->is_root() || !root->tokens.empty() || root->end != 0 || root->pins != 0) {
      return Status::Corruption(fmt::format("root of salt {} is malformed", salt));
    }
    std::vector<const Node*> stack{root.get()};
    while (!stack.empty()) {
      const Node* node = stack.back();
      stack.pop_back();
      std::set<std::vector<TokenId>> first_pages;
      for (const auto& [key, child] : node->children) {
        if (child->parent != node) return Violation(child.get(), "parent pointer is wrong");
        if (key != child->page_digests.front()) return Violation(child.get(), "child key is not its first digest");
        if (!first_pages.emplace(child->tokens.begin(), child->tokens.begin() + config_.page_tokens).second) {
          return Violation(child.get(), "two siblings start with the same page");
        }
        stack.push_back(child.get());
      }
      if (node->is_root()) continue;
      if (Status s = CheckNode(node); !s.ok()) return s;
      auto rec = soft_records.find(node);
      const uint32_t records = rec == soft_records.end() ? 0 : rec->second;
      if (records != node->ending_soft_pins) return Violation(node, "soft pin records disagree with ending_soft_pins");
      soft_records_seen += records;
      ++t.nodes;
      t.ram += node->ram_bytes();
      t.disk += DiskBytes(node);
      if (node->pinned()) {
        t.ram_pinned += node->ram_bytes();
        t.disk_pinned += DiskBytes(node);
      } else {
        t.ram_free += node->in_ram();
        t.disk_free += node->on_disk;
        t.snap_free += node->snapshot != nullptr;
      }
      if (node->soft_pins > 0) t.soft += node->ram_bytes();
      t.ram_pages += node->in_ram() ? node->pages() : 0;
      t.disk_pages += node->on_disk ? node->pages() : 0;
      t.snapshots += node->has_snapshot();
      t.disk_snapshots += node->snapshot_on_disk;
      t.ending_hard += node->ending_pins - node->ending_soft_pins;
    }
  }
  auto mismatch = [](std::string_view what, uint64_t kept, uint64_t actual) {
    return Status::Corruption(fmt::format("{}: kept {}, actual {}", what, kept, actual));
  };
  if (soft_records_seen != soft_pins_.size()) return Status::Corruption("a soft pin record points outside the tree");
  if (t.ending_hard != live_handles_) return mismatch("live handles", live_handles_, t.ending_hard);
  if (t.nodes != node_count_) return mismatch("node count", node_count_, t.nodes);
  if (t.ram != ram_used_) return mismatch("RAM bytes", ram_used_, t.ram);
  if (t.ram_pinned != ram_pinned_) return mismatch("pinned RAM bytes", ram_pinned_, t.ram_pinned);
  if (t.disk != disk_used_) return mismatch("disk bytes", disk_used_, t.disk);
  if (t.disk_pinned != disk_pinned_) return mismatch("pinned disk bytes", disk_pinned_, t.disk_pinned);
  if (t.soft != soft_pinned_ram_) return mismatch("soft-pinned RAM bytes", soft_pinned_ram_, t.soft);
  if (t.ram_pages != ram_pages_) return mismatch("RAM pages", ram_pages_, t.ram_pages);
  if (t.disk_pages != disk_pages_) return mismatch("disk pages", disk_pages_, t.disk_pages);
  if (t.snapshots != snapshot_count_) return mismatch("snapshots", snapshot_count_, t.snapshots);
  if (t.disk_snapshots != disk_snapshots_) return mismatch("disk snapshots", disk_snapshots_, t.disk_snapshots);
  if (t.ram_free != ram_lru_.size()) return mismatch("RAM LRU size", ram_lru_.size(), t.ram_free);
  if (t.disk_free != disk_lru_.size()) return mismatch("disk LRU size", disk_lru_.size(), t.disk_free);
  if (t.snap_free != snapshot_lru_.size()) return mismatch("snapshot LRU size", snapshot_lru_.size(), t.snap_free);
  if (t.disk_pages != disk_index_.size()) return mismatch("disk index size", disk_index_.size(), t.disk_pages);
  if (disk_used_ > config_.disk_budget_bytes && disk_) return mismatch("disk over budget", config_.disk_budget_bytes, disk_used_);
  if (ram_used_ > config_.ram_budget_bytes && (!ram_lru_.empty() || !snapshot_lru_.empty())) {
    return mismatch("RAM over budget with evictable state", config_.ram_budget_bytes, ram_used_);
  }
  // Pins never take RAM past the budget (Acquire, SoftPin and snapshot admission keep it).
  if (ram_pinned_ > config_.ram_budget_bytes) return mismatch("pinned RAM over budget", config_.ram_budget_bytes, ram_pinned_);
  if (soft_pinned_ram_ > SoftPinCap()) return mismatch("soft pins over their cap", SoftPinCap(), soft_pinned_ram_);
  return CheckDisk();
}

// The disk index must name exactly this fingerprint's LMDB page entries, with their sizes, and
// every LMDB snapshot entry must belong to a node that records it, with its size: no orphans.
Status PrefixCache::CheckDisk() const {
  if (!disk_) {
    const bool none = disk_index_.empty() && disk_snapshots_ == 0;
    return none ? Status::Ok() : Status::Corruption("disk state without a disk tier");
  }
  auto entries = disk_->List();
  if (!entries.ok()) return entries.status();
  size_t pages = 0;
  size_t snapshots = 0;
  for (const auto& [key, bytes] : *entries) {
    auto it = disk_index_.find(key.digest);
    const Node* n = it == disk_index_.end() ? nullptr : it->second;
    if (key.kind == detail::EntryKind::kSnapshot) {
      ++snapshots;
      if (n == nullptr || !n->snapshot_on_disk || n->page_digests.back() != key.digest) {
        return Status::Corruption(fmt::format("LMDB snapshot entry {:016x} is an orphan", key.digest));
      }
      if (bytes != DiskStore::SnapshotEntryBytes(n->snapshot_size)) {
        return Violation(n, fmt::format("LMDB snapshot entry has {} bytes", bytes));
      }
      continue;
    }
    ++pages;
    if (n == nullptr) return Status::Corruption(fmt::format("LMDB entry {:016x} is not indexed", key.digest));
    const size_t i = std::find(n->page_digests.begin(), n->page_digests.end(), key.digest) - n->page_digests.begin();
    if (bytes != DiskStore::EntryBytes(config_.page_tokens, n->page_bytes[i])) {
      return Violation(n, fmt::format("LMDB entry of page {} has {} bytes", i, bytes));
    }
  }
  if (pages != disk_index_.size()) {
    return Status::Corruption(fmt::format("LMDB holds {} page entries, the index {}", pages, disk_index_.size()));
  }
  if (snapshots != disk_snapshots_) {
    return Status::Corruption(fmt::format("LMDB holds {} snapshot entries, the tree {}", snapshots, disk_snapshots_));
  }
  return Status::Ok();
}

}  // namespace cedar::cache
