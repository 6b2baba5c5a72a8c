// The server's own counters (requests, statuses, latencies, tokens it returned) and the
// Prometheus text of /metrics, which adds the session manager's engine and cache counters.
//
// Thread contract: every method locks; use from any thread.
#pragma once
#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "session/session_manager.h"

namespace cedar::server {

// A Prometheus histogram with fixed upper bounds (seconds).
class Histogram {
 public:
  static constexpr std::array<double, 16> kBounds = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                                     0.25,   0.5,   1,      2.5,   5,    10,    30,    60};
  void Observe(double seconds);
  // Appends `name{labels,le="..."}` bucket lines, _sum and _count.
  void Render(const std::string& name, const std::string& labels, std::string& out) const;

 private:
  std::array<uint64_t, kBounds.size() + 1> counts_{};  // the last is +Inf
  double sum_ = 0;
  uint64_t count_ = 0;
};

class ServerMetrics {
 public:
  // One finished request: its route ("/v1/sessions/{id}", "other"), status and duration.
  void Request(const std::string& route, int status, double seconds);
  // One finished turn as the client saw it.
  void Turn(const session::TurnAccounting& a, int64_t completion_tokens, const std::string& finish_reason);
  void Connection(int delta);  // +1 opened, -1 closed
  // The gaps between one turn's consecutive tokens (LiveTurn::token_gaps).
  void InterTokenGaps(const std::vector<float>& seconds);
  // One chat request's assistant messages: `exact` rendered as the ids the model sampled (a
  // remembered generation), `canonical` re-rendered from content and tool calls (the fallback).
  void Replays(int exact, int canonical);

  // Prometheus text format 0.0.4.
  std::string Render(const session::EngineMetrics& engine) const;

  struct Totals {
    int64_t requests = 0, turns = 0, prompt_tokens = 0, cached_tokens = 0, completion_tokens = 0;
    int64_t connections_open = 0, connections_total = 0;
    int64_t replay_exact = 0, replay_canonical = 0;  // assistant messages, summed over requests
  };
  Totals totals() const;

 private:
  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, uint64_t> requests_;
  std::map<std::string, Histogram> durations_;
  std::map<std::string, uint64_t> finish_reasons_;
  Histogram ttft_, turn_total_, inter_token_;
  Totals totals_;
};

}  // namespace cedar::server
