// Simulation mode of `cedar profile`: replays a trace through the REAL prefix cache (cache/)
// with payloads of the sizes the model's state would have, without computing tensors, and
// counts what each design would spend on prefill.
//
// Designs, all fed the same requests in the same order:
//   cedar                  the CED model with Cedar's prefix cache (real policies: pages of the
//                          pools' entries, a boundary snapshot at the end of every prompt and of
//                          every output, snapshots evicted first, RAM/LMDB tiers)
//   decoder-only-lru       a decoder-only model of the same size with an LRU block prefix cache
//                          of every layer's K/V (what vLLM/SGLang hold): the same PrefixCache with
//                          16-token blocks, no snapshots, and nodes (the unit eviction removes)
//                          of about the bytes of one of Cedar's nodes: a few blocks
//   ced-no-cache           the CED model, no cache: n·E + min(W, n)·(L - E)
//   decoder-only-no-cache  the decoder-only model, no cache: n·L
// The two cache designs run at the main RAM budget (with per-request records) and at every
// budget of the sweep (totals only). Requests are served one at a time in arrival order: a
// request acquires (pins) its prefix, is costed, inserts its prompt and output (Cedar: as far as
// its RestorePolicy lets it), then releases.
//
// Live mode (profile/live.h) implements ReplayDriver too and runs beside a Simulation.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <unordered_set>
#include <vector>

#include "cache/prefix_cache.h"
#include "engine/config.h"
#include "profile/cost.h"
#include "profile/synth.h"
#include "profile/trace.h"

namespace cedar::profile {

// One request as a driver receives it: the trace entry (arrival time trace->t, in seconds) and
// its synthesized tokens. The spans are valid during the call only.
struct ReplayRequest {
  size_t index = 0;  // arrival order, from 0
  const TraceRequest* trace = nullptr;
  std::span<const int32_t> prompt;
  std::span<const int32_t> output;
};

// Receives the requests of a trace in arrival order. The simulation implements it; a live driver
// would send each request to a running server at its arrival time and record what it measured.
class ReplayDriver {
 public:
  virtual ~ReplayDriver() = default;
  virtual void Submit(const ReplayRequest& r) = 0;
  virtual void Finish() {}
};

// Builds every request's tokens and submits them in order; `progress(done)` after each.
void Replay(const Trace& trace, const TokenSynth& synth, ReplayDriver& driver,
            const std::function<void(size_t done)>& progress = {});

enum class Design { kCedar, kDecoderOnlyLru, kCedNoCache, kDecoderOnlyNoCache };
inline constexpr Design kAllDesigns[] = {Design::kCedar, Design::kDecoderOnlyLru, Design::kCedNoCache,
                                         Design::kDecoderOnlyNoCache};
const char* DesignName(Design d);   // "cedar", "decoder-only-lru", ...
const char* DesignLabel(Design d);  // a phrase for tables and plots
bool HasCache(Design d);

// Why a Cedar request ran Encoder SWA Bounded Replay.
enum class ReplayKind {
  kNone,
  kSnapshotEvicted,   // a snapshot was stored at the prefix end and has been evicted since
  kNoSnapshotStored,  // the matched prefix ends where no snapshot was ever stored (the match
                      // stops inside an earlier prompt, e.g. at a 64-token trace block boundary)
};
const char* ReplayKindName(ReplayKind k);

// What Cedar does with a cached prefix that has no snapshot at its end, and what it caches
// afterwards. `staircase` (the default), `replay` and `recompute` are the server's RestorePolicy
// (session/session_manager.h) as it runs them; `optimistic` is a what-if (see docs/PROFILE.md).
enum class RestorePolicy {
  kStaircase,   // ExactEncoderRestore: ExactRestoreRows(...)·E units, exact, everything cached
  kOptimistic,  // Encoder SWA Bounded Replay, and the whole prompt and output are then cached as
                // if they were exact (the server refuses that: it caches only exact state)
  kReplay,      // Encoder SWA Bounded Replay; the request then caches nothing past the replayed
                // prefix and no snapshot (session/turns.cpp, InsertIntoCache)
  kRecompute,   // restore at the deepest snapshot of the prefix and encode the rest; every
                // restored token is exact, so everything is cached
};
const char* RestorePolicyName(RestorePolicy p);  // "staircase", "optimistic", "replay", "recompute"
bool ParseRestorePolicy(const std::string& s, RestorePolicy* out);

// The server's decoder policy (session/session_manager.h, DecoderPolicy). It decides which
// decoder tail a prompt-end snapshot carries and which tails an exact repeat may resume from
// (session/turns.cpp, StartTurn and RestoreRepeat).
enum class SimDecoder { kAuto, kExact, kBounded };
bool ParseSimDecoder(const std::string& s, SimDecoder* out);  // "auto", "exact", "bounded"
const char* SimDecoderName(SimDecoder d);

// The decoder tail a simulated snapshot carries (cache/state_codec.h, DecoderTail): the same
// values, so the kind is what the server would have written.
enum class SimTail : uint8_t { kNone = 0, kExact = 1, kBounded = 2 };

// One request under one design.
struct Outcome {
  int64_t matched = 0;            // Match(): longest cached prefix when the request arrived
                                  // (Cedar: of the prompt's first n - 1 tokens, as the server)
  int64_t hit_ram = 0;            // restored from the RAM tier (recompute: up to the snapshot)
  int64_t hit_disk = 0;           // restored by loading from the disk tier
  int64_t snapshot_position = 0;  // deepest snapshot of the acquired prefix (0 = none)
  bool tail_hit = false;          // Cedar: an exact repeat resumed from the decoder tail of the
                                  // snapshot at the prompt's end: the whole prompt hits, 0 units
  ReplayKind replay = ReplayKind::kNone;
  int64_t encoder_units = 0;      // Cedar split; other designs put everything in `units`
  int64_t decoder_units = 0;
  int64_t replay_units = 0;
  int64_t units = 0;              // prefill layer-token units
  double ttft_s = 0;              // estimated time to first token (0 without a cost model)
  uint64_t ram_bytes = 0;         // cache tiers after the request
  uint64_t disk_bytes = 0;
  int64_t hit() const { return hit_ram + hit_disk; }
};

// Sums over requests.
struct Totals {
  int64_t requests = 0;
  int64_t prompt_tokens = 0;
  int64_t matched_tokens = 0;
  int64_t hit_ram = 0;
  int64_t hit_disk = 0;
  int64_t units = 0;
  int64_t encoder_units = 0;
  int64_t decoder_units = 0;
  int64_t replay_units = 0;
  int64_t replays_snapshot_evicted = 0;
  int64_t replays_no_snapshot_stored = 0;
  int64_t tail_hits = 0;          // Cedar: exact repeats served from a decoder tail
  double ttft_s = 0;
  uint64_t peak_ram_bytes = 0;
  uint64_t peak_disk_bytes = 0;
  void Add(const Outcome& o, int64_t prompt_tokens);
  double hit_rate() const { return prompt_tokens ? double(hit_ram + hit_disk) / double(prompt_tokens) : 0.0; }
};

struct SimConfig {
  ModelConfig model;
  size_t page_tokens = 16;           // Cedar's pages
  size_t block_tokens = 16;          // the decoder-only baseline's blocks
  size_t block_node_blocks = 0;      // the baseline's largest node (its eviction unit) in blocks;
                                     // 0 = as many bytes as one of Cedar's nodes (64 pages)
  uint64_t ram_budget = 16ull << 30;
  uint64_t disk_budget = 0;          // 0 = no disk tier
  std::string disk_dir;              // parent of one folder per cache (REQUIRED when disk_budget > 0)
  std::vector<uint64_t> sweep_ram;   // extra RAM budgets (the main one is always a point)
  CostModel cost;
  KvPrecision kv;                    // stored precision of each design's payloads (F32 by default)
  RestorePolicy restore = RestorePolicy::kStaircase;  // Cedar's
  SimDecoder decoder = SimDecoder::kAuto;             // Cedar's decoder policy (decoder tails)
  // Payloads and both budgets are divided by this (>= 1), so that a disk tier writes 1/K of the
  // bytes; RAM decisions are unchanged (RAM holds payloads only) and reported bytes are scaled
  // back. Disk entries carry fixed headers (tokens, checksums) that do not scale, so with K > 1
  // the disk tier holds somewhat fewer pages than its budget implies.
  uint64_t payload_scale = 1;
  int threads = 0;                   // worker threads for the caches; 0 = one per core
};

// One cache design (cedar or decoder-only-lru) on its own PrefixCache.
class CacheSim {
 public:
  // Throws std::runtime_error when the cache cannot be opened.
  static size_t DecoderOnlyNodeBlocks(const SimConfig& config);  // resolves block_node_blocks = 0
  CacheSim(Design design, const SimConfig& config, uint64_t ram_budget);
  ~CacheSim();
  CacheSim(const CacheSim&) = delete;
  CacheSim& operator=(const CacheSim&) = delete;
  Outcome Run(const ReplayRequest& r);
  Design design() const { return design_; }
  uint64_t ram_budget() const { return ram_budget_; }
  cache::CacheCounters counters() const { return cache_->Counters(); }
  cache::CacheSizes sizes() const { return cache_->Sizes(); }  // in scaled bytes
  uint64_t scale() const { return std::max<uint64_t>(1, config_.payload_scale); }
  const cache::PrefixCache& cache() const { return *cache_; }

 private:
  // A payload of the snapshot's size whose first byte is the tail kind (the rest is zeros): the
  // real cache keeps it, spills it to disk and loads it back, so an exact repeat reads the tail
  // of the snapshot that is actually cached at the prompt's end.
  cache::Payload SnapshotPayload(int64_t position, SimTail tail);
  // The tail a prompt of n tokens computed fresh leaves on its end snapshot (StartTurn).
  SimTail PromptTail(int64_t n) const;
  // Whether an exact repeat of n tokens may resume from `tail` (RestoreRepeat).
  bool TailUsable(SimTail tail, int64_t n) const;
  // Inserts the prompt and output; `exact_until` < the prompt's length (after a replay under
  // kReplay) inserts only that prefix and no snapshot, as the server does. `repeat_tail` is the
  // tail an exact repeat resumed from (kNone otherwise): its prompt-end snapshot is cached
  // already and is not cut again (session/turns.cpp, Finish).
  void InsertTurn(const ReplayRequest& r, size_t exact_until, SimTail repeat_tail);
  // An exact repeat (RestoreRepeat): the whole prompt is cached with a snapshot at its end whose
  // tail the decoder policy accepts. Fills `o` and returns the tail, else kNone.
  SimTail TryRepeat(const ReplayRequest& r, Outcome* o);
  uint64_t Scaled(uint64_t bytes) const { return std::max<uint64_t>(1, bytes / scale()); }

  const Design design_;
  const SimConfig config_;
  const uint64_t ram_budget_;
  const StateBytes bytes_;
  std::string dir_;                          // this cache's disk folder, removed at destruction
  std::unique_ptr<cache::PrefixCache> cache_;
  cache::Payload page_;                      // one shared buffer: every page has this size
  std::vector<std::pair<std::pair<uint64_t, SimTail>, cache::Payload>> snapshots_;  // by size and tail
  std::unordered_set<uint64_t> snapshot_keys_;  // digests of prefixes given a snapshot
  std::vector<int32_t> full_;                // prompt + output
};

// Per design at the main budget: every request's outcome, totals and the cache's counters.
struct DesignRun {
  Design design = Design::kCedar;
  std::vector<Outcome> outcomes;
  Totals totals;
  cache::CacheCounters counters;  // zero for designs without a cache
  cache::CacheSizes final_sizes;
};

struct SweepPoint {
  uint64_t ram_budget = 0;
  Totals cedar, decoder_only;
  cache::CacheCounters cedar_counters, decoder_only_counters;
};

// Runs every design. The caches are independent, so each lives on one worker thread (created,
// used and destroyed there, as the cache's thread contract asks) and receives the requests in
// order through a bounded queue; results do not depend on the number of threads.
class Simulation : public ReplayDriver {
 public:
  explicit Simulation(const SimConfig& config);  // starts the workers and opens every cache; throws
  ~Simulation() override;
  Simulation(const Simulation&) = delete;
  Simulation& operator=(const Simulation&) = delete;
  void Submit(const ReplayRequest& r) override;
  // Waits for every cache to finish; then runs() and sweep() are complete. Rethrows the first
  // error a worker met. REQUIRES: called once, after the last Submit.
  void Finish() override;

  const SimConfig& config() const { return config_; }
  const std::vector<DesignRun>& runs() const { return runs_; }     // in kAllDesigns order
  const std::vector<SweepPoint>& sweep() const { return sweep_; }  // ascending budgets
  const std::vector<int64_t>& prompt_tokens() const { return prompt_tokens_; }

 private:
  struct Workers;
  SimConfig config_;
  std::vector<DesignRun> runs_;
  std::vector<SweepPoint> sweep_;
  std::vector<int64_t> prompt_tokens_;
  std::unique_ptr<Workers> workers_;
};

}  // namespace cedar::profile
