// `cedar profile --live`: the LiveDriver (profile/live.h) that replays a trace against a running
// `cedar serve` over its Unix socket or TCP.
//
// What is sent: each request's synthesized prompt as token ids to POST /v1/completions, with
// max_tokens = the trace's output count (capped by LiveOptions::max_tokens), ignore_eos (so the
// server generates exactly that many tokens and caches as many as the simulation inserts),
// greedy sampling, and no session id: the server serves it from its shared prefix cache, the
// path the simulation models. The server's output tokens differ from the simulation's (both
// are unique to the request, and later prompts contain neither), so they occupy cache space but
// never give hits on either side.
//
// What is read back: usage.prompt_tokens_details.cached_tokens (the hit), the `cedar`
// accounting object (hits by tier, snapshot hit, replay rows, prefill units, and ttft_ms, the
// server's submit-to-first-token time) and the client's own latency.
//
// Timing: request i is sent (t_i - t_0) * time_scale seconds after the start (at once for
// time_scale 0), in arrival order, with at most `concurrency` in flight; Submit blocks until
// then. A request that had to wait for a free slot records how late it went out.
//
// Thread contract: Submit and Finish from one thread (Replay's); `concurrency` worker threads
// send the requests.
#pragma once
#include <iosfwd>
#include <memory>
#include <string>

#include "profile/live.h"

namespace cedar::profile_live {

struct ServerAddress {
  std::string address;  // "unix:/path", a socket path, or "http://host:port"
  std::string api_key;  // TCP only ("" = none)
};

// Connects to the server, reads what it serves (GET /v1/models, /v1/cache) and starts the
// workers. Throws std::runtime_error naming the address when the server cannot be reached or
// does not answer like `cedar serve`.
std::unique_ptr<profile::LiveDriver> ConnectLiveDriver(const ServerAddress& server, const profile::LiveOptions& options,
                                                       std::ostream& log);

}  // namespace cedar::profile_live
