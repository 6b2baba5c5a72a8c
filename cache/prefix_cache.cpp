// PrefixCache: opening, walking the tree, and the public operations (match, acquire, insert,
// snapshots, soft pins). Tier mechanics live in prefix_cache_evict.cpp, checks in
// prefix_cache_check.cpp.
#include "cache/prefix_cache.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <bit>

#include "cache/disk_store.h"
#include "cache/remote_store.h"

namespace cedar::cache {

using detail::Node;

struct PrefixCache::PathMatch {
  Node* root = nullptr;         // null when the tenant has no root yet
  std::vector<Node*> full;      // nodes matched completely, root's child first
  Node* partial = nullptr;      // next node, matched for its first partial_pages pages only
  size_t partial_pages = 0;     // 0 < partial_pages < partial->pages()
  size_t matched_tokens = 0;
};

// ---- PrefixHandle ----

PrefixHandle::PrefixHandle(PrefixHandle&& other) noexcept { *this = std::move(other); }

PrefixHandle& PrefixHandle::operator=(PrefixHandle&& other) noexcept {
  if (this != &other) {
    Release();
    cache_ = std::exchange(other.cache_, nullptr);
    deepest_ = std::exchange(other.deepest_, nullptr);
    tokens_ = std::exchange(other.tokens_, 0);
    pages_ = std::move(other.pages_);
    snapshot_position_ = std::exchange(other.snapshot_position_, 0);
    snapshot_ = std::move(other.snapshot_);
  }
  return *this;
}

void PrefixHandle::Release() {
  if (cache_ != nullptr) cache_->ReleaseHandle(deepest_);
  cache_ = nullptr;
  deepest_ = nullptr;
  tokens_ = 0;
  pages_.clear();
  snapshot_position_ = 0;
  snapshot_.reset();
}

// ---- Open / close ----

PrefixCache::PrefixCache(ModelFingerprint fingerprint, PrefixCacheConfig config)
    : fingerprint_(fingerprint), config_(std::move(config)) {}

Result<std::unique_ptr<PrefixCache>> PrefixCache::Open(ModelFingerprint fingerprint, PrefixCacheConfig config) {
  if (config.page_tokens < 2 || !std::has_single_bit(config.page_tokens)) {
    return Status::InvalidArgument("page_tokens must be a power of two >= 2");
  }
  if (config.max_node_pages == 0) return Status::InvalidArgument("max_node_pages must be >= 1");
  if (!(config.soft_pin_max_share >= 0.0 && config.soft_pin_max_share <= 1.0)) {
    return Status::InvalidArgument("soft_pin_max_share must be in [0, 1]");
  }
  if (!config.clock) config.clock = SteadyClock();
  if (!config.page_digest) config.page_digest = Xxh3PageDigest;

  std::unique_ptr<PrefixCache> cache(new PrefixCache(fingerprint, std::move(config)));
  const PrefixCacheConfig& c = cache->config_;
  if (!c.disk_dir.empty()) {
    auto store = detail::DiskStore::Open(c.disk_dir, c.disk_budget_bytes, fingerprint, c.page_tokens,
                                         c.sync_disk_writes);
    if (!store.ok()) return store.status();
    cache->disk_ = std::move(store).value();
    cache->disk_resets_seen_ = cache->disk_->files_moved_aside();  // a file moved aside at open: the tree starts empty
    const DiskResetSync sync(cache.get());  // damage found while rebuilding
    if (Status s = cache->RebuildFromDisk(); !s.ok()) return s;
  }
  if (c.remote.enabled()) {
    auto remote = detail::RemoteStore::Open(c.remote, fingerprint, c.page_tokens);
    if (!remote.ok()) return remote.status();
    cache->remote_ = std::move(remote).value();
  }
  return cache;
}

PrefixCache::~PrefixCache() {
  assert(live_handles_ == 0 && "REQUIRES: every PrefixHandle is released before the cache");
  if (disk_ && config_.flush_on_close) {
    // Refusals (budget, digest collision) are ordinary; only an LMDB failure is worth a warning.
    if (Status s = Flush(); !s.ok()) {
      spdlog::log(s.code() == StatusCode::kResourceExhausted ? spdlog::level::debug : spdlog::level::warn,
                  "prefix cache: flush at close incomplete: {}", s.ToString());
    }
  }
}

// ---- Walking ----

Node* PrefixCache::RootFor(TenantSalt salt) const {
  auto it = roots_.find(salt);
  return it == roots_.end() ? nullptr : it->second.get();
}

Node* PrefixCache::RootForInsert(TenantSalt salt) {
  auto& root = roots_[salt];
  if (!root) {
    root = std::make_unique<Node>();
    root->salt = salt;
  }
  return root.get();
}

uint64_t PrefixCache::ChainDigest(const Node* parent) const {
  return parent->is_root() ? 0 : parent->page_digests.back();
}

// Digests only pick candidate children; every page is confirmed by comparing its tokens.
PrefixCache::PathMatch PrefixCache::Walk(std::span<const TokenId> tokens, TenantSalt salt) const {
  PathMatch m;
  m.root = RootFor(salt);
  if (m.root == nullptr) return m;
  const size_t page = config_.page_tokens;
  const size_t whole = tokens.size() / page * page;  // a trailing partial page never matches
  Node* node = m.root;
  size_t pos = 0;
  while (pos + page <= whole) {
    const auto first = tokens.subspan(pos, page);
    const uint64_t digest = config_.page_digest(ChainDigest(node), first, fingerprint_, salt);
    Node* child = nullptr;
    for (auto [it, end] = node->children.equal_range(digest); it != end; ++it) {
      if (std::equal(first.begin(), first.end(), it->second->tokens.begin())) {
        child = it->second.get();
        break;
      }
    }
    if (child == nullptr) break;
    size_t k = 1;
    while (k < child->pages() && pos + (k + 1) * page <= whole &&
           std::equal(tokens.begin() + pos + k * page, tokens.begin() + pos + (k + 1) * page,
                      child->tokens.begin() + k * page)) {
      ++k;
    }
    pos += k * page;
    if (k < child->pages()) {
      m.partial = child;
      m.partial_pages = k;
      break;
    }
    m.full.push_back(child);
    node = child;
  }
  m.matched_tokens = pos;
  return m;
}

std::vector<Node*> PrefixCache::PathTo(Node* deepest) const {
  std::vector<Node*> path;
  for (Node* n = deepest; n != nullptr && !n->is_root(); n = n->parent) path.push_back(n);
  std::reverse(path.begin(), path.end());
  return path;
}

// Splits `node` after keep_pages pages. The new head takes the node's place under its parent
// and the node (keeping its end, snapshot, children and identity) becomes the head's only
// child, so handles and soft pins that point at the node stay valid.
Node* PrefixCache::SplitNode(Node* node, size_t keep_pages) {
  assert(keep_pages > 0 && keep_pages < node->pages());
  const size_t keep_tokens = keep_pages * config_.page_tokens;
  Node* parent = node->parent;
  auto slot = parent->children.end();
  for (auto [it, end] = parent->children.equal_range(node->page_digests.front()); it != end; ++it) {
    if (it->second.get() == node) slot = it;
  }
  assert(slot != parent->children.end());

  Unindex(node);
  auto head = std::make_unique<Node>();
  head->parent = parent;
  head->salt = node->salt;
  head->end = node->start() + keep_tokens;
  head->tokens.assign(node->tokens.begin(), node->tokens.begin() + keep_tokens);
  node->tokens.erase(node->tokens.begin(), node->tokens.begin() + keep_tokens);
  head->page_digests.assign(node->page_digests.begin(), node->page_digests.begin() + keep_pages);
  node->page_digests.erase(node->page_digests.begin(), node->page_digests.begin() + keep_pages);
  head->page_bytes.assign(node->page_bytes.begin(), node->page_bytes.begin() + keep_pages);
  node->page_bytes.erase(node->page_bytes.begin(), node->page_bytes.begin() + keep_pages);
  if (node->in_ram()) {
    head->payloads.assign(node->payloads.begin(), node->payloads.begin() + keep_pages);
    node->payloads.erase(node->payloads.begin(), node->payloads.begin() + keep_pages);
  }
  for (uint64_t b : head->page_bytes) head->payload_bytes += b;
  node->payload_bytes -= head->payload_bytes;
  head->on_disk = node->on_disk;
  head->pins = node->pins;
  head->soft_pins = node->soft_pins;
  head->tick = node->tick;

  Node* h = head.get();
  std::unique_ptr<Node> owned = std::move(slot->second);
  slot->second = std::move(head);
  node->parent = h;
  h->children.emplace(node->page_digests.front(), std::move(owned));
  Index(h);
  Index(node);
  return h;
}

Node* PrefixCache::MaterializePath(PathMatch& m) {
  if (m.partial != nullptr) {
    m.full.push_back(SplitNode(m.partial, m.partial_pages));
    m.partial = nullptr;
    m.partial_pages = 0;
  }
  return m.full.empty() ? nullptr : m.full.back();
}

Node* PrefixCache::NodeEndingAt(Node* deepest, size_t position) {
  Node* n = deepest;
  while (n->start() >= position) n = n->parent;
  assert(!n->is_root() && position <= n->end);
  if (n->end == position) return n;
  return SplitNode(n, (position - n->start()) / config_.page_tokens);
}

// ---- Pins and LRU ----

void PrefixCache::Touch(Node* deepest) {
  const uint64_t now = ++tick_;
  for (Node* n : PathTo(deepest)) Update(n, [&] { n->tick = now; });
}

void PrefixCache::Pin(Node* deepest, bool soft) {
  for (Node* n : PathTo(deepest)) {
    assert(n->in_ram() && "only RAM-resident nodes are pinned");
    Update(n, [&] {
      ++n->pins;
      if (soft) ++n->soft_pins;
    });
  }
  ++deepest->ending_pins;
  if (soft) ++deepest->ending_soft_pins;
}

void PrefixCache::Unpin(Node* deepest, bool soft) {
  assert(deepest->ending_pins > 0 && (!soft || deepest->ending_soft_pins > 0));
  --deepest->ending_pins;
  if (soft) --deepest->ending_soft_pins;
  for (Node* n : PathTo(deepest)) {
    Update(n, [&] {
      --n->pins;
      if (soft) --n->soft_pins;
    });
  }
}

void PrefixCache::ReleaseHandle(Node* deepest) {
  Unpin(deepest, /*soft=*/false);
  --live_handles_;
  Settle();
}

// Loads the disk-only nodes of the path to `deepest`, top down, stopping before a node whose
// newly protected bytes would take pinned RAM over the budget, or at a node that fails
// verification (dropped with its subtree). Returns the usable path prefix. Room for the loads
// is made first, from older unpinned state, so RAM use never passes the budget while loading.
std::vector<Node*> PrefixCache::LoadPathWithinBudget(Node* deepest, size_t* loaded_tokens) {
  const std::vector<Node*> all = PathTo(deepest);
  uint64_t room = config_.ram_budget_bytes > ram_pinned_ ? config_.ram_budget_bytes - ram_pinned_ : 0;
  size_t fit = 0;
  uint64_t to_load = 0;
  for (Node* n : all) {
    const uint64_t need = n->pinned() ? 0 : n->payload_bytes + n->snapshot_ram_bytes();
    if (need > room) {
      spdlog::debug("prefix cache: pin stops at {} tokens: RAM budget", n->start());
      break;
    }
    room -= need;
    if (!n->in_ram()) to_load += n->payload_bytes;
    ++fit;
  }
  // The planned prefix is touched (newest, so evicted last) and its new bytes fit beside the
  // pinned ones, so what must go is older unpinned state or nodes past the plan (never used
  // below): the planned nodes' pages stay.
  if (fit > 0 && to_load > 0) {
    Touch(all[fit - 1]);
    EvictRamTo(config_.ram_budget_bytes - std::min(to_load, config_.ram_budget_bytes));
  }
  std::vector<Node*> usable;
  for (size_t i = 0; i < fit; ++i) {
    Node* n = all[i];
    if (!n->in_ram()) {
      Node* loaded = LoadNode(n);  // on a bad entry: the verified head, or null
      if (loaded != nullptr) {
        *loaded_tokens += loaded->tokens.size();
        usable.push_back(loaded);
      }
      if (loaded != n) break;
    } else {
      usable.push_back(n);
    }
  }
  return usable;
}

// ---- Queries ----

MatchResult PrefixCache::Match(std::span<const TokenId> tokens, TenantSalt salt) const {
  const PathMatch m = Walk(tokens, salt);
  MatchResult r;
  r.matched_tokens = m.matched_tokens;
  auto count = [&](const Node* n, size_t t) { (n->in_ram() ? r.ram_tokens : r.disk_tokens) += t; };
  for (const Node* n : m.full) {
    count(n, n->tokens.size());
    if (n->has_snapshot()) {
      r.snapshot_position = n->end;
      r.snapshot_on_disk = n->snapshot == nullptr;
    }
  }
  if (m.partial) count(m.partial, m.partial_pages * config_.page_tokens);
  return r;
}

CacheSizes PrefixCache::Sizes() const {
  CacheSizes s;
  s.ram = TierBytes{ram_used_ - ram_pinned_, ram_pinned_, config_.ram_budget_bytes};
  s.disk = TierBytes{disk_used_ - disk_pinned_, disk_pinned_, disk_ ? config_.disk_budget_bytes : 0};
  s.soft_pinned_ram_bytes = soft_pinned_ram_;
  s.nodes = node_count_;
  s.ram_pages = ram_pages_;
  s.disk_pages = disk_pages_;
  s.snapshots = snapshot_count_;
  s.disk_snapshots = disk_snapshots_;
  return s;
}

// ---- Mutations ----

Result<PrefixHandle> PrefixCache::Acquire(std::span<const TokenId> tokens, TenantSalt salt) {
  const DiskResetSync sync(this);
  ReleaseExpiredSoftPins();
  ++counters_.acquires;
  PathMatch m = Walk(tokens, salt);
  PrefixHandle handle;
  size_t loaded = 0;
  if (Node* deepest = MaterializePath(m)) {
    const std::vector<Node*> path = LoadPathWithinBudget(deepest, &loaded);
    if (!path.empty()) {
      deepest = path.back();
      Touch(deepest);
      Pin(deepest, /*soft=*/false);
      ++live_handles_;
      handle.cache_ = this;
      handle.deepest_ = deepest;
      handle.tokens_ = deepest->end;
      for (Node* n : path) handle.pages_.insert(handle.pages_.end(), n->payloads.begin(), n->payloads.end());
      // The deepest usable snapshot: one only on disk is loaded (and verified) now.
      for (auto it = path.rbegin(); it != path.rend(); ++it) {
        Node* n = *it;
        if (!n->has_snapshot() || (!n->snapshot && !LoadSnapshot(n))) continue;
        handle.snapshot_position_ = n->end;
        handle.snapshot_ = n->snapshot;
        break;
      }
    }
  }
  counters_.ram_hit_tokens += handle.tokens_ - loaded;
  counters_.disk_hit_tokens += loaded;
  counters_.miss_tokens += tokens.size() - handle.tokens_;
  if (handle.empty()) {
    ++counters_.acquire_misses;
    spdlog::debug("prefix cache: miss ({} tokens)", tokens.size());
  } else {
    spdlog::debug("prefix cache: hit {} of {} tokens ({} from disk), snapshot at {}", handle.tokens_,
                  tokens.size(), loaded, handle.snapshot_position_);
  }
  Settle();
  return handle;
}

Result<InsertResult> PrefixCache::Insert(std::span<const TokenId> tokens, const PageProvider& provider,
                                         std::span<const SnapshotInput> snapshots, TenantSalt salt) {
  const DiskResetSync sync(this);
  const size_t page = config_.page_tokens;
  const size_t whole = tokens.size() / page * page;  // only full pages are stored
  for (const SnapshotInput& s : snapshots) {
    if (s.position == 0 || s.position % page != 0 || s.position > whole || !s.payload) {
      return Status::InvalidArgument("snapshot position must be a page multiple in (0, stored tokens] with a payload");
    }
  }
  ReleaseExpiredSoftPins();

  // Plan: find what is present and obtain every missing page before changing anything.
  PathMatch m = Walk(tokens, salt);
  InsertResult result;
  result.cached_tokens = m.matched_tokens;
  result.added_tokens = whole - m.matched_tokens;
  result.stored_tokens = whole;
  std::vector<Payload> fresh;
  for (size_t pos = m.matched_tokens; pos < whole; pos += page) {
    Result<Payload> p = provider(pos / page, tokens.subspan(pos, page));
    if (!p.ok()) return p.status();
    if (!*p) return Status::InvalidArgument("page provider returned a null payload");
    fresh.push_back(std::move(p).value());
  }
  if (whole == 0) {
    for (const SnapshotInput& s : snapshots) result.refused_snapshots.push_back(s.position);
    return result;
  }

  // Admission: pinned bytes cannot be evicted, so only what fits beside them is admitted: the
  // RAM pages of the cached prefix being extended (they stay: the new pages hang below them)
  // plus as many new pages as fit. Pages past that are refused: storing them would overshoot
  // the budget.
  uint64_t room = config_.ram_budget_bytes > ram_pinned_ ? config_.ram_budget_bytes - ram_pinned_ : 0;
  auto take = [&](uint64_t bytes) {
    if (bytes > room) return false;
    room -= bytes;
    return true;
  };
  bool fits = true;
  for (const Node* n : m.full) fits = fits && (n->pinned() || !n->in_ram() || take(n->payload_bytes));
  if (m.partial != nullptr && !m.partial->pinned() && m.partial->in_ram()) {
    uint64_t head = 0;
    for (size_t i = 0; i < m.partial_pages; ++i) head += m.partial->page_bytes[i];
    fits = fits && take(head);
  }
  size_t admitted = 0;
  uint64_t admitted_bytes = 0;
  while (fits && admitted < fresh.size() && take(fresh[admitted]->size())) admitted_bytes += fresh[admitted++]->size();
  if (admitted < fresh.size()) {
    result.refused_tokens = (fresh.size() - admitted) * page;
    result.added_tokens = admitted * page;
    result.stored_tokens = m.matched_tokens + admitted * page;
    fresh.resize(admitted);
    spdlog::debug("prefix cache: insert refuses {} of {} tokens: RAM budget held by pinned state",
                  result.refused_tokens, whole);
  }
  const size_t stored = result.stored_tokens;

  // Apply: cannot fail from here on.
  Node* parent = MaterializePath(m);
  if (parent != nullptr) Touch(parent);  // the prefix we extend is the newest: evicted last
  // Room first, from older unpinned state, so RAM never overshoots the budget. The touched
  // prefix is not evicted: the admission above left room for it and for what comes in, so
  // what must go is older unpinned state.
  // The new snapshots get room too, as far as it can be made without touching the prefix:
  // else the next Settle would drop them first (snapshots go before pages), and a snapshot
  // just cut at a prompt's end is the one its next turn or an exact repeat needs.
  uint64_t snapshot_bytes = 0;
  for (const SnapshotInput& s : snapshots)
    if (s.position <= stored) snapshot_bytes += s.payload->size();
  const uint64_t incoming = admitted_bytes + std::min(snapshot_bytes, room);
  if (incoming > 0) EvictRamTo(config_.ram_budget_bytes - std::min(incoming, config_.ram_budget_bytes));
  if (parent == nullptr) parent = RootForInsert(salt);
  size_t pos = m.matched_tokens;
  while (pos < stored) {
    const size_t pages = std::min(config_.max_node_pages, (stored - pos) / page);
    auto node = std::make_unique<Node>();
    node->parent = parent;
    node->salt = salt;
    node->end = pos + pages * page;
    node->tokens.assign(tokens.begin() + pos, tokens.begin() + node->end);
    uint64_t chain = ChainDigest(parent);
    for (size_t i = 0; i < pages; ++i) {
      chain = config_.page_digest(chain, tokens.subspan(pos + i * page, page), fingerprint_, salt);
      node->page_digests.push_back(chain);
      Payload& p = fresh[(pos - m.matched_tokens) / page + i];
      node->page_bytes.push_back(p->size());
      node->payload_bytes += p->size();
      node->payloads.push_back(std::move(p));
    }
    Node* raw = node.get();
    parent->children.emplace(raw->page_digests.front(), std::move(node));
    Index(raw);
    parent = raw;
    pos = raw->end;
  }
  if (stored > 0) {
    Touch(parent);
    if (remote_ && !pulling_) WriteRemotePages(parent, m.matched_tokens);
    for (const SnapshotInput& s : snapshots) {
      Node* n = s.position <= stored ? NodeEndingAt(parent, s.position) : nullptr;
      if (n == nullptr || !SnapshotFits(n, s.payload)) {
        result.refused_snapshots.push_back(s.position);
        continue;
      }
      SetSnapshot(n, s.payload);
    }
  } else {
    for (const SnapshotInput& s : snapshots) result.refused_snapshots.push_back(s.position);
  }
  spdlog::debug("prefix cache: insert {} tokens ({} new, {} refused), {} snapshots ({} refused)", whole,
                result.added_tokens, result.refused_tokens, snapshots.size(), result.refused_snapshots.size());
  Settle();
  return result;
}

// A snapshot on a pinned node is protected at once: it must fit beside the other pinned bytes.
bool PrefixCache::SnapshotFits(const Node* node, const Payload& payload) const {
  if (!node->pinned()) return true;
  const uint64_t old = node->snapshot_ram_bytes(), need = payload->size();
  return need <= old || ram_pinned_ + (need - old) <= config_.ram_budget_bytes;
}

Status PrefixCache::AddSnapshot(std::span<const TokenId> tokens_prefix, size_t position, Payload payload,
                                TenantSalt salt) {
  const DiskResetSync sync(this);
  if (position == 0 || position % config_.page_tokens != 0 || position > tokens_prefix.size() || !payload) {
    return Status::InvalidArgument("snapshot position must be a page multiple in (0, prefix length] with a payload");
  }
  ReleaseExpiredSoftPins();
  PathMatch m = Walk(tokens_prefix.first(position), salt);
  if (m.matched_tokens < position) {
    return Status::NotFound(fmt::format("only {} of the {} tokens before the snapshot are cached",
                                        m.matched_tokens, position));
  }
  Node* n = MaterializePath(m);  // ends exactly at `position`
  if (!SnapshotFits(n, payload)) {
    return Status::ResourceExhausted(fmt::format("snapshot of {} bytes on a pinned prefix: over the RAM budget",
                                                 payload->size()));
  }
  Touch(n);
  SetSnapshot(n, std::move(payload));
  Settle();
  return Status::Ok();
}

Result<size_t> PrefixCache::SoftPin(std::span<const TokenId> tokens, TenantSalt salt,
                                    std::optional<std::chrono::milliseconds> ttl) {
  const DiskResetSync sync(this);
  ReleaseExpiredSoftPins();
  PathMatch m = Walk(tokens, salt);
  Node* deepest = MaterializePath(m);
  if (deepest == nullptr) return Status::NotFound("no cached prefix to soft-pin");
  size_t loaded = 0;
  const std::vector<Node*> path = LoadPathWithinBudget(deepest, &loaded);
  if (path.empty()) return Status::ResourceExhausted("no part of the prefix fits in the RAM budget");
  deepest = path.back();
  uint64_t own_bytes = 0;
  for (const Node* n : path) own_bytes += n->ram_bytes();
  if (own_bytes > SoftPinCap()) {
    Settle();
    return Status::ResourceExhausted(fmt::format("prefix holds {} bytes, over the soft-pin cap of {}",
                                                 own_bytes, SoftPinCap()));
  }
  const auto expires = config_.clock() + ttl.value_or(config_.soft_pin_ttl);
  Touch(deepest);
  auto same = std::find_if(soft_pins_.begin(), soft_pins_.end(),
                           [&](const SoftPinRecord& r) { return r.deepest == deepest; });
  if (same != soft_pins_.end()) {
    soft_pins_.splice(soft_pins_.end(), soft_pins_, same);  // renewed: now the youngest
    same->expires = expires;
  } else {
    Pin(deepest, /*soft=*/true);
    soft_pins_.push_back(SoftPinRecord{deepest, expires});
  }
  const bool fits = EnforceSoftPinCap(deepest);
  assert(fits && "a prefix under the cap always fits once older soft pins yield");
  (void)fits;
  spdlog::debug("prefix cache: soft pin {} tokens", deepest->end);
  Settle();
  return deepest->end;
}

Status PrefixCache::SoftUnpin(std::span<const TokenId> tokens, TenantSalt salt) {
  const DiskResetSync sync(this);
  ReleaseExpiredSoftPins();
  const PathMatch m = Walk(tokens, salt);
  if (m.full.empty()) return Status::NotFound("no cached prefix");
  auto it = std::find_if(soft_pins_.begin(), soft_pins_.end(),
                         [&](const SoftPinRecord& r) { return r.deepest == m.full.back(); });
  if (it == soft_pins_.end() || m.partial != nullptr) return Status::NotFound("prefix is not soft-pinned");
  ReleaseSoftPin(it);
  Settle();
  return Status::Ok();
}

size_t PrefixCache::ReleaseExpiredSoftPins() {
  const DiskResetSync sync(this);
  const auto now = config_.clock();
  size_t expired = 0;
  for (auto it = soft_pins_.begin(); it != soft_pins_.end();) {
    auto next = std::next(it);
    if (it->expires <= now) {
      ReleaseSoftPin(it);
      ++expired;
    }
    it = next;
  }
  counters_.soft_pins_expired += expired;
  if (expired > 0) Settle();
  return expired;
}

void PrefixCache::ReleaseSoftPin(std::list<SoftPinRecord>::iterator it) {
  Unpin(it->deepest, /*soft=*/true);
  soft_pins_.erase(it);
}

uint64_t PrefixCache::SoftPinCap() const {
  return static_cast<uint64_t>(config_.soft_pin_max_share * static_cast<double>(config_.ram_budget_bytes));
}

bool PrefixCache::EnforceSoftPinCap(const Node* keep) {
  while (soft_pinned_ram_ > SoftPinCap()) {
    auto oldest = std::find_if(soft_pins_.begin(), soft_pins_.end(),
                               [&](const SoftPinRecord& r) { return r.deepest != keep; });
    if (oldest == soft_pins_.end()) return false;
    spdlog::debug("prefix cache: soft pin of {} tokens yields to the cap", oldest->deepest->end);
    ReleaseSoftPin(oldest);
    ++counters_.soft_pins_yielded;
  }
  return true;
}

void PrefixCache::Settle() {
  EnforceSoftPinCap(nullptr);
  EvictRamTo(config_.ram_budget_bytes);
}

}  // namespace cedar::cache
