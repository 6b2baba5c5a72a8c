// `cedar profile`: prefix-cache hit rates and prefill compute of Cedar against its baselines on
// real agent traces. Simulation mode (the default) drives the real cache/ code with payload
// sizes from a model config and counts layer-token units; see profile/simulator.h for the
// designs and docs/PROFILE.md for how to read the report.
//
// Live mode (--live) sends the same requests to a running `cedar serve` through a LiveDriver
// (profile/live.h) while the simulation runs, configured like the server, and reports both.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "profile/live.h"
#include "profile/report.h"
#include "profile/trace.h"

namespace cedar::profile {

struct ProfileOptions {
  std::vector<std::string> traces;   // --trace (files or directories), at least one
  TraceFormat format = TraceFormat::kAuto;
  bool strict = false;               // stop at the first malformed entry
  std::string model_dir;             // --model DIR: DIR/config.json (weights only for --calibrate)
  std::string preset = "flash";      // --preset, when no --model
  uint64_t cache_ram = 16ull << 30;  // --cache-ram
  uint64_t cache_disk = 0;           // --cache-disk, 0 = no disk tier
  std::string cache_dir;             // --cache-dir: parent of the simulated disk tiers ("" = a temp dir)
  std::vector<uint64_t> sweep_ram;   // --sweep-ram
  bool sweep_auto = false;           // --sweep-ram auto: powers of two up to where Cedar reaches the ideal
  std::string arrival = "recorded";  // --arrival: recorded | poisson:R | concurrency:N (profile/arrival.h)
  std::string kv_dtype = "auto";     // --kv-dtype: Cedar's stored precision; auto = released for the
                                     // flash preset or a model whose kv_dtype is "released", else f32
  std::string baseline_kv_dtype = "auto";  // --baseline-kv-dtype: the decoder-only baseline's; auto =
                                           // fp8 (vLLM's --kv-cache-dtype fp8) unless Cedar's is f32
  int64_t max_output_tokens = -1;    // cap on every request's output tokens (--live-max-tokens), -1 = none
  size_t page_tokens = 16;           // Cedar's page
  size_t block_tokens = 16;          // the decoder-only baseline's block
  bool calibrate = false;            // --calibrate
  double calibrate_seconds = 2.0;
  double units_per_s = 0;            // --units-per-s (0 = not given)
  double disk_gbs = 2.0;             // --disk-gbs: disk-tier read rate for TTFT
  uint64_t seed = 0;                 // token synthesis and --arrival poisson seed
  uint64_t payload_scale = 1;        // --payload-scale: payloads and budgets / K (see SimConfig)
  int threads = 0;                   // --threads: workers for the simulated caches (0 = per core)
  std::string out = "out/profile";   // --out: the report folder
  bool plots = true;
  int progress = -1;                 // -1: when stderr is a TTY; 0 off; 1 on
  RestorePolicy restore = RestorePolicy::kStaircase;  // --restore-policy (Cedar's, simulated)
  size_t limit = 0;                  // --limit: stop reading after N requests, in file order (0 = all)
  int servers = 0;                   // --servers N: also simulate N servers over a shared tier (0 = no)
  std::string routing = "session";   // --routing session|random (with --servers)
  uint64_t cache_remote_ram = 0;     // --cache-remote-ram: the shared tier's bytes (0 = none)
  bool live = false;                 // --live: also replay against a running `cedar serve`
  LiveDriverFactory live_driver;     // how to reach it (set by the cedar binary); REQUIRED with live
  std::string command_line;
};

struct ProfileResult {
  nlohmann::json report;
  ReportFiles files;
  double simulate_s = 0;
};

// Runs a profile and writes the report folder. Messages (trace issues, progress, where the
// report went) go to `log`. Throws std::invalid_argument for bad options and
// std::runtime_error for failures (unreadable trace, --strict on a malformed entry, a live
// server that cannot be reached or serves a different model).
ProfileResult RunProfile(const ProfileOptions& options, std::ostream& log);

// The options' own checks, made before any trace is read (RunProfile makes them first too):
// std::invalid_argument naming the flag and the value for a bad value or a combination that
// does not go together (`cedar profile` reports it as a usage error, exit 2).
void CheckOptions(const ProfileOptions& options);

// The precisions the simulation stores: `kv_dtype` and `baseline_kv_dtype` with "auto" resolved
// for `model` (named `model_name`, "preset flash" for the preset). Throws std::invalid_argument
// naming an unknown value.
KvPrecision ResolveKvPrecision(const ProfileOptions& o, const ModelConfig& model, const std::string& model_name);

// The budgets of --sweep-ram auto for a working set of `ideal_bytes` (what a cache that never
// evicts holds at the end): the power of two at or above it and the seven below, ascending.
std::vector<uint64_t> AutoSweepBudgets(uint64_t ideal_bytes);

// "16G", "512M", "1.5T", "64K", "0", "4096" (bytes); binary multiples; throws std::invalid_argument.
uint64_t ParseBytes(const std::string& s);
std::vector<uint64_t> ParseBytesList(const std::string& s);  // "1G,4G,16G"
std::string FormatBytes(uint64_t bytes);                     // "16G", "1.5G", "512M"

}  // namespace cedar::profile
