// Configuration of the shared remote tier (Redis), without the client library: the session and
// CLI layers include this; only cache/remote_store.cpp links hiredis.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "cache/status.h"

namespace cedar::cache {

// Where the remote tier's Redis listens, parsed from a URL by ParseRemoteUrl.
struct RemoteEndpoint {
  bool unix_socket = false;  // true: `path`; false: `host`:`port`
  std::string host;          // redis://HOST:PORT
  int port = 6379;           // redis default when the URL names none
  std::string path;          // unix:///path/redis.sock
  int db = 0;                // redis://HOST:PORT/DB or unix:///path?db=DB (SELECT)
  std::string Describe() const;  // the URL, normalised (for logs)
};

// Parses "redis://HOST[:PORT][/DB]" or "unix:///absolute/path.sock[?db=DB]". InvalidArgument
// naming what was expected and what was found.
Result<RemoteEndpoint> ParseRemoteUrl(const std::string& url);

// Parses a duration with a unit: "72h", "30m", "90s", "50ms". InvalidArgument otherwise.
Result<std::chrono::milliseconds> ParseDuration(const std::string& text);

struct RemoteTierConfig {
  std::string url;                                 // --cache-remote; "" = no remote tier
  std::chrono::milliseconds ttl{std::chrono::hours(72)};  // --cache-remote-ttl: Redis EX of every
                                                   // entry written or found again (DeepSeek keeps
                                                   // its global KV about as long)
  std::chrono::milliseconds timeout{50};           // --cache-remote-timeout: the most a turn waits
                                                   // on one remote read (connect included);
                                                   // past it the read is a miss
  uint64_t max_queued_bytes = 256ull << 20;        // writes waiting for the writer thread; past it
                                                   // new writes are dropped (counted)
  std::chrono::milliseconds backoff_min{100};      // first wait before reconnecting after a fault
  std::chrono::milliseconds backoff_max{5000};     // the wait doubles up to this
  bool enabled() const { return !url.empty(); }
};

// Cumulative counters of the remote tier (the server's /metrics).
struct RemoteStats {
  uint64_t reads = 0;                // Fetch calls that asked Redis (a round trip or more)
  uint64_t page_hits = 0;            // pages returned (verified)
  uint64_t page_misses = 0;          // Fetch calls whose first wanted page was absent (or evicted)
  uint64_t snapshot_hits = 0;        // snapshots returned (verified)
  uint64_t corrupt = 0;              // values that failed verification (a miss)
  uint64_t timeouts = 0;             // reads that passed the deadline (a miss)
  uint64_t errors = 0;               // connection failures and error replies (a miss)
  uint64_t skipped = 0;              // reads not tried: an outage's backoff was running (a miss)
  uint64_t outages = 0;              // faults after a working connection (each logged once)
  uint64_t reconnects = 0;           // connections made after an outage
  uint64_t pages_written = 0;        // SETs of page entries Redis accepted
  uint64_t snapshots_written = 0;    // SETs of snapshot entries Redis accepted
  uint64_t refreshed = 0;            // entries found again by EXPIRE (TTL renewed, not resent)
  uint64_t write_failures = 0;       // SETs refused (e.g. OOM under maxmemory noeviction) or lost
  uint64_t writes_dropped = 0;       // entries not sent: queue full, or Redis down
  uint64_t queued_bytes = 0;         // now: bytes waiting for the writer thread
  bool connected = false;            // now: the last attempt on the read connection worked
};

}  // namespace cedar::cache
