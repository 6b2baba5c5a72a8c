#include "profile/cluster.h"

#include <algorithm>
#include <filesystem>
#include <stdexcept>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <xxhash.h>

namespace cedar::profile {

namespace fs = std::filesystem;

namespace {

// Points per server on the hash ring: enough that N servers split the sessions about evenly
// (HAProxy weights each server with several points too).
constexpr int kRingPoints = 64;
// Snapshot entries share the key space of pages; this tag keeps the two apart.
constexpr uint64_t kSnapshotTag = 0x9e3779b97f4a7c15ull;

uint64_t SplitMix64(uint64_t* s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace

const char* RoutingName(Routing r) { return r == Routing::kSession ? "session" : "random"; }

bool ParseRouting(const std::string& s, Routing* out) {
  if (s == "session") *out = Routing::kSession;
  else if (s == "random") *out = Routing::kRandom;
  else return false;
  return true;
}

bool SharedTierSim::Get(uint64_t key) {
  auto it = index_.find(key);
  if (it == index_.end()) return false;
  lru_.splice(lru_.begin(), lru_, it->second);
  return true;
}

void SharedTierSim::Put(uint64_t key, uint64_t bytes) {
  if (auto it = index_.find(key); it != index_.end()) {
    lru_.splice(lru_.begin(), lru_, it->second);
    return;
  }
  if (bytes > budget_) return;  // Redis refuses a value larger than maxmemory can hold
  lru_.emplace_front(key, bytes);
  index_[key] = lru_.begin();
  used_ += bytes;
  while (used_ > budget_) {
    const auto& [k, b] = lru_.back();
    used_ -= b;
    index_.erase(k);
    lru_.pop_back();
    ++evictions_;
  }
}

ClusterSim::ClusterSim(const SimConfig& sim, const ClusterConfig& cluster)
    : sim_(sim),
      cluster_(cluster),
      bytes_(ComputeStateBytes(sim.model, sim.page_tokens, sim.block_tokens, sim.kv)),
      rng_(cluster.seed) {
  if (cluster.servers < 1) throw std::invalid_argument(fmt::format("--servers: expected >= 1, found {}", cluster.servers));
  for (int i = 0; i < cluster.servers; ++i) {
    SimConfig c = sim;
    // Each server has its own disk tier, beside (not in) the single-server designs' folders.
    if (c.disk_budget > 0) c.disk_dir = (fs::path(sim.disk_dir) / fmt::format("cluster-server-{}", i)).string();
    servers_.push_back(std::make_unique<CacheSim>(Design::kCedar, c, sim.ram_budget));
    for (int v = 0; v < kRingPoints; ++v) {
      const std::string name = fmt::format("server-{}#{}", i, v);
      ring_.emplace_back(XXH3_64bits(name.data(), name.size()), i);
    }
  }
  std::sort(ring_.begin(), ring_.end());
  if (cluster.shared_ram > 0) shared_ = std::make_unique<SharedTierSim>(cluster.shared_ram);
  totals_.server_requests.assign(size_t(cluster.servers), 0);
}

ClusterSim::~ClusterSim() = default;

int ClusterSim::Route(const TraceRequest& t) {
  if (servers_.size() == 1) return 0;
  if (cluster_.routing == Routing::kRandom) return int(SplitMix64(&rng_) % servers_.size());
  const uint64_t h = XXH3_64bits(t.session.data(), t.session.size());
  auto it = std::lower_bound(ring_.begin(), ring_.end(), std::pair<uint64_t, int>{h, -1});
  return it == ring_.end() ? ring_.front().second : it->second;
}

void ClusterSim::Submit(const ReplayRequest& r) {
  const size_t P = sim_.page_tokens;
  const size_t n = r.prompt.size();
  ClusterOutcome co;
  co.server = Route(*r.trace);
  co.prompt_tokens = int64_t(n);
  const Outcome local = servers_[size_t(co.server)]->Run(r);  // also caches the turn locally
  co.hit_ram = local.hit_ram;
  co.hit_disk = local.hit_disk;
  if (shared_) {
    full_.assign(r.prompt.begin(), r.prompt.end());
    full_.insert(full_.end(), r.output.begin(), r.output.end());
    chain_.clear();
    uint64_t h = 0;
    for (size_t end = P; end <= full_.size(); end += P) {
      h = XXH3_64bits_withSeed(full_.data() + end - P, P * sizeof(int32_t), h);
      chain_.push_back(h);
    }
    // The local match ends on a page boundary (pages are the cache's unit); the shared tier is
    // read past it, within the n - 1 tokens the server may restore.
    const size_t local_hit = size_t(local.hit()) / P * P;
    const size_t limit_pages = n > 0 ? (n - 1) / P : 0;
    size_t pages = local_hit / P;
    while (pages < limit_pages && shared_->Get(chain_[pages])) ++pages;
    co.hit_shared = int64_t(pages * P) - int64_t(std::min(local_hit, pages * P));
    if (co.hit_shared > 0) {
      spdlog::debug("cluster request {}: server {} local {} + shared {} of {}", r.index, co.server, local.hit(),
                    co.hit_shared, n);
    }
    // The server's writes (docs/SERVER.md, "Shared cache tier"): the pages and snapshots the
    // turn adds are SET, the prefix it extends is refreshed (PEXPIRE touches the key, so Redis's
    // LRU sees it) or resent when Redis lost it: every page of prompt + output is put, then the
    // snapshots InsertTurn cuts at the prompt's and the output's last page boundary.
    for (size_t k = 0; k < chain_.size(); ++k) shared_->Put(chain_[k], bytes_.cedar_page);
    size_t last = 0;
    for (size_t end : {n, full_.size()}) {
      const size_t p = end / P * P;
      if (p == 0 || p == last) continue;
      last = p;
      shared_->Put(chain_[p / P - 1] ^ kSnapshotTag, bytes_.Snapshot(sim_.model, int64_t(p)));
    }
    totals_.shared_peak_bytes = std::max(totals_.shared_peak_bytes, shared_->used());
    totals_.shared_evictions = shared_->evictions();
  }
  ++totals_.requests;
  totals_.prompt_tokens += co.prompt_tokens;
  totals_.hit_ram += co.hit_ram;
  totals_.hit_disk += co.hit_disk;
  totals_.hit_shared += co.hit_shared;
  ++totals_.server_requests[size_t(co.server)];
  outcomes_.push_back(co);
}

}  // namespace cedar::profile
