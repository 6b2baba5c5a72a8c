// Live mode of `cedar profile`: the trace is sent to a running `cedar serve` while the same
// requests run through the simulation, and the report puts what the server measured next to
// what the simulation predicted for Cedar.
//
// profile/ knows no HTTP: it defines what a live driver delivers (this header), and the driver
// that speaks to the server lives in server/profile_live/. The `cedar` binary hands
// RunProfile a factory for it (ProfileOptions::live_driver).
#pragma once

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "engine/config.h"
#include "profile/simulator.h"

namespace cedar::profile {

// The server as it describes itself (GET /v1/models and /v1/cache), so the simulation can be
// configured like it.
struct LiveTarget {
  std::string address;          // "unix:/path" or "http://host:port", for messages
  std::string model_name;
  std::string model_dir;        // where the server loaded its model ("" = not reported)
  int vocab_size = 0;
  int64_t max_seq_len = 0;
  int n_layers = 0, n_encoder_layers = 0, window = 0;
  size_t page_tokens = 0;       // 0 = not reported
  uint64_t ram_budget = 0, disk_budget = 0;
  std::string restore_policy;   // the server's RestorePolicy: "staircase" (its default), "replay" or "recompute" ("" = not reported)
  std::string decoder_policy;   // "auto", "exact" or "bounded"
};

struct LiveOptions {
  double time_scale = 0;        // send request i at (t_i - t_0) * time_scale s after the start; 0 = at once
  int concurrency = 1;          // requests in flight at most; 1 = strictly one after another
  int64_t max_tokens = -1;      // cap on each request's output tokens (-1 = the trace's count)
  double request_timeout_s = 600;
};

// What the server answered for one request.
struct LiveOutcome {
  bool ok = false;
  int http_status = 0;          // 0 = no HTTP answer (connection failed, timeout)
  std::string error;            // when !ok: the server's message, or what failed
  int64_t cached_tokens = 0;    // usage.prompt_tokens_details.cached_tokens
  int64_t cached_live = 0, cached_ram = 0, cached_disk = 0;  // cedar.cached_tokens_by_tier
  bool snapshot_hit = false;
  int64_t encoder_replay_rows = 0;
  int64_t prefill_units = 0;    // cedar.prefill_units (replay included)
  int64_t output_tokens = 0;    // usage.completion_tokens
  double ttft_s = 0;            // cedar.ttft_ms: the server's submit -> first token (queueing included)
  double latency_s = 0;         // the client's send -> whole response
  double sent_s = 0;            // when it was sent, seconds from the start of the replay
  double late_s = 0;            // sent_s minus its scheduled time (waiting for a free slot)
};

// A ReplayDriver that sends each request to the server. Submit may block (to keep the trace's
// timing and the concurrency bound); Finish waits for every answer.
class LiveDriver : public ReplayDriver {
 public:
  virtual const LiveTarget& target() const = 0;
  virtual const LiveOptions& options() const = 0;
  // One per submitted request, by index. Complete after Finish.
  virtual const std::vector<LiveOutcome>& outcomes() const = 0;
  virtual double wall_s() const = 0;  // first send -> last answer
};

// Connects to the server (throws std::runtime_error with a clear message when it cannot).
using LiveDriverFactory = std::function<std::unique_ptr<LiveDriver>(std::ostream& log)>;

// Per-request agreement of the live run with the simulated Cedar design.
struct LiveAgreement {
  int64_t compared = 0;         // requests the server answered
  int64_t equal = 0;            // of which with equal hit tokens
  int64_t sim_hit_tokens = 0;   // over the compared requests
  int64_t live_hit_tokens = 0;
  int64_t errors = 0;
  std::vector<size_t> differing;  // indexes of the compared requests that differ
};
LiveAgreement CompareLive(const std::vector<Outcome>& cedar, const std::vector<LiveOutcome>& live);

}  // namespace cedar::profile
