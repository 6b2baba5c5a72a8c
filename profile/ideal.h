// The ideal of a trace: what a cache that never evicts would serve, with the same page rounding
// and match rules as the simulated designs, computed without the cache (a set of page-prefix
// digests), so that it checks the simulation and bounds it. It also measures the working set:
// the bytes such a cache would end up holding, from which `--sweep-ram auto` picks its budgets.
//
// Per request, in arrival order (after the request, its prompt and output are "cached"):
//   cedar         the longest page-aligned prefix of the prompt's first n - 1 tokens that an
//                 earlier request's prompt + output began with (the last token always runs), or
//                 all n tokens for an exact repeat: a page-aligned prompt with a snapshot at its
//                 end whose decoder tail the decoder policy accepts (the rules of
//                 CacheSim::TryRepeat and InsertTurn, profile/simulator.cpp)
//   decoder-only  the longest block-aligned prefix of the whole prompt that was cached
// This is Cedar's hit under an unbounded budget when everything is cached after a request (the
// staircase and optimistic restore policies); under `replay` Cedar caches less and under
// `recompute` it counts hits only up to a snapshot.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "profile/simulator.h"

namespace cedar::profile {

class IdealDriver : public ReplayDriver {
 public:
  IdealDriver(const SimConfig& config);
  void Submit(const ReplayRequest& r) override;

  const std::vector<int64_t>& cedar_hits() const { return cedar_hits_; }      // per request
  const std::vector<int64_t>& decoder_only_hits() const { return dec_hits_; } // per request
  // Bytes a cache that never evicts holds at the end: Cedar's distinct pages and snapshots,
  // the decoder-only baseline's distinct blocks (payload sizes of SimConfig's precision).
  uint64_t cedar_bytes() const;
  uint64_t decoder_only_bytes() const;

 private:
  const SimConfig config_;
  const StateBytes bytes_;
  std::unordered_set<uint64_t> pages_, blocks_;             // digests of cached page / block prefixes
  std::unordered_map<uint64_t, std::pair<int64_t, SimTail>> snapshots_;  // prefix digest -> (position, tail)
  std::vector<int64_t> cedar_hits_, dec_hits_;
  std::vector<uint64_t> chain_;                              // scratch: page-prefix digests
};

}  // namespace cedar::profile
