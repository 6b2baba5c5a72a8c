// The cluster topology of `cedar profile --servers N`: N `cedar serve` instances, each with its
// own prefix cache (the --cache-ram / --cache-disk of one server, the real cache/ code through
// CacheSim), over one shared tier (the Redis tier of `cedar serve --cache-remote`, modelled as an
// LRU of content-keyed entries of --cache-remote-ram bytes, as Redis evicts under
// `maxmemory-policy allkeys-lru`), with requests routed by session (a consistent hash of the
// session id, what HAProxy's `balance hdr(X-Session-Id)` + `hash-type consistent` does) or at
// random. It answers how many prompt tokens each tier serves, so that the shared tier can be
// sized before deploying (docs/PROFILE.md, "Several servers").
//
// Per request, on the server routing picks:
//   local   the server's own cache, exactly as the single-server Cedar design (CacheSim::Run:
//           the n - 1 rule, exact repeats, RAM then disk)
//   shared  past the local match, the pages the shared tier holds, page by page, each keyed by
//           the chained digest of its prefix (a missing page ends the match, as a prefix read
//           must); the turn then restores them on that server
//   miss    the rest of the prompt
// Afterwards the server writes the turn to the shared tier as `cedar serve --cache-remote` does:
// the pages it adds and the snapshots at the prompt's and the output's last page boundary, and
// the prefix it extends is refreshed (or resent where the tier lost it); a write or refresh
// makes an entry the most recent.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "profile/simulator.h"

namespace cedar::profile {

enum class Routing {
  kSession,  // consistent hash of the request's session id (a trace's conversation or sub-agent)
  kRandom,   // a server drawn uniformly per request (seeded)
};
const char* RoutingName(Routing r);                   // "session", "random"
bool ParseRouting(const std::string& s, Routing* out);

struct ClusterConfig {
  int servers = 0;              // N servers; 0 = no cluster simulation
  Routing routing = Routing::kSession;
  uint64_t shared_ram = 0;      // bytes of the shared tier (payloads as stored); 0 = none
  uint64_t seed = 0;            // random routing's generator seed
};

// One request on the cluster.
struct ClusterOutcome {
  int server = 0;             // where routing sent it
  int64_t hit_ram = 0;        // from that server's RAM tier
  int64_t hit_disk = 0;       // from that server's disk tier
  int64_t hit_shared = 0;     // from the shared tier, past the local match
  int64_t prompt_tokens = 0;
  int64_t hit() const { return hit_ram + hit_disk + hit_shared; }
};

struct ClusterTotals {
  int64_t requests = 0;
  int64_t prompt_tokens = 0;
  int64_t hit_ram = 0;
  int64_t hit_disk = 0;
  int64_t hit_shared = 0;
  int64_t shared_evictions = 0;      // entries the shared tier's LRU dropped
  uint64_t shared_peak_bytes = 0;    // the most the shared tier held
  std::vector<int64_t> server_requests;  // requests per server
  int64_t miss() const { return prompt_tokens - hit_ram - hit_disk - hit_shared; }
  double Rate(int64_t tokens) const { return prompt_tokens ? double(tokens) / double(prompt_tokens) : 0.0; }
};

// An LRU of content keys with byte sizes under a budget: the shared tier.
class SharedTierSim {
 public:
  explicit SharedTierSim(uint64_t budget) : budget_(budget) {}
  bool Get(uint64_t key);                 // present: refreshes its recency
  void Put(uint64_t key, uint64_t bytes); // inserts or refreshes; evicts the least recent past the budget
  uint64_t used() const { return used_; }
  int64_t evictions() const { return evictions_; }

 private:
  const uint64_t budget_;
  uint64_t used_ = 0;
  int64_t evictions_ = 0;
  std::list<std::pair<uint64_t, uint64_t>> lru_;  // (key, bytes), most recent first
  std::unordered_map<uint64_t, std::list<std::pair<uint64_t, uint64_t>>::iterator> index_;
};

// Runs on the thread that constructs it (the servers' caches live on that thread, as cache/'s
// thread contract asks). Throws std::invalid_argument for a bad configuration and
// std::runtime_error when a cache cannot be opened.
class ClusterSim : public ReplayDriver {
 public:
  ClusterSim(const SimConfig& sim, const ClusterConfig& cluster);
  ~ClusterSim() override;
  void Submit(const ReplayRequest& r) override;

  const ClusterConfig& config() const { return cluster_; }
  const ClusterTotals& totals() const { return totals_; }
  const std::vector<ClusterOutcome>& outcomes() const { return outcomes_; }

 private:
  int Route(const TraceRequest& t);

  const SimConfig sim_;
  const ClusterConfig cluster_;
  const StateBytes bytes_;
  std::vector<std::unique_ptr<CacheSim>> servers_;
  std::unique_ptr<SharedTierSim> shared_;  // null without a shared tier
  std::vector<std::pair<uint64_t, int>> ring_;  // consistent-hash ring: (point, server), sorted
  uint64_t rng_;                                // random routing's state (splitmix64)
  ClusterTotals totals_;
  std::vector<ClusterOutcome> outcomes_;
  std::vector<int32_t> full_;                   // scratch: prompt + output
  std::vector<uint64_t> chain_;                 // scratch: page-prefix digests of full_
};

}  // namespace cedar::profile
