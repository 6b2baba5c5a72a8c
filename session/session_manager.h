// Sessions and the engine loop. One thread (the engine thread, owned by SessionManager) owns
// the model's per-sequence states, the prefix cache and every session; other threads call the
// methods below, which post work to that thread and wait (or return a future).
//
// The engine calls go through a Backend (engine/backend.h): sessions' live states are backend
// Sequences (device-resident on CUDA). The cache stays host logic: a restore builds a host
// SequenceState from pages and a snapshot and uploads it; the two points that feed the cache
// (the snapshot at the prompt's end, the insert when a turn finishes) download the state.
//
// A turn: the whole context (prompt tokens) of a conversation. If the session's live state is
// a prefix of it, only the new tokens run (encoder; decoder exactly from the live windows for
// <= W new tokens, else per the decoder policy); otherwise the longest cached prefix is
// restored from the prefix cache (snapshot, or Encoder SWA Bounded Replay when the snapshot is
// missing), the suffix is encoded, the decoder replays, and the loop decodes. The prompt and
// the output then go into the cache with snapshots, so the next turn and other sessions hit.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "cache/cache_types.h"
#include "cache/remote_config.h"
#include "engine/backend.h"
#include "engine/logprobs.h"
#include "engine/model.h"
#include "engine/sampling.h"
#include "engine/speculative.h"
#include "session/chunk_plan.h"

namespace cedar::session {

enum class DecoderPolicy {
  kExact,    // staircase / live windows: equals computing the whole context from scratch
  kBounded,  // Decoder SWA Bounded Replay of the last W rows when the live windows do not reach
  kAuto,     // exact when the live decoder windows cover the turn, bounded otherwise
};
// What to do with a cached prefix that has no snapshot at its end (its windows were dropped).
enum class RestorePolicy {
  kStaircase,  // ExactEncoderRestore: the encoder reruns the last E(W-1) + ~2W rows, exact, so
               // everything the turn computes is cached again (the default)
  kReplay,     // Encoder SWA Bounded Replay of the last W rows: cheapest, approximate, and the
               // turn then caches nothing past the replayed prefix
  kRecompute,  // restore at the deepest snapshot (or nothing) and encode the rest (exact, costly)
};

// Who a session belongs to: the server's tenant (a hash of the client's API key; see
// server/tenant.h), kLocalOwner for the machine's owner on the Unix socket. Each owner has its
// own namespace of session ids: another owner's session behaves exactly as one that does not
// exist (get, list, turn, delete; and creating the same id there succeeds).
using SessionOwner = uint64_t;
inline constexpr SessionOwner kLocalOwner = 0;

// Why a request was refused; the server maps these to HTTP statuses.
// kQueueFull: --max-queued-turns turns wait already (the server answers 429 with Retry-After).
enum class ErrorKind { kNone, kInvalidRequest, kSessionNotFound, kSessionBusy, kPromptTooLong, kShuttingDown, kInternal, kQueueFull };

struct TurnRequest {
  std::string session_id;             // "" = no session (the prefix cache is still used)
  std::vector<int32_t> prompt;        // the whole context; non-empty, ids < vocab_size
  int max_tokens = 256;               // >= 0; 0 = prefill only
  SamplingParams sampling;
  std::vector<int32_t> stop_tokens;   // generation ends after emitting one of these
  DecoderPolicy decoder = DecoderPolicy::kAuto;
  RestorePolicy restore = RestorePolicy::kStaircase;
  cache::TenantSalt tenant = cache::kNoTenant;  // the cache partition (tenant and cache_salt)
  SessionOwner owner = kLocalOwner;              // whose `session_id` this is
  // Called on the engine thread for each generated token, in order. Keep it cheap (hand the
  // token to your own thread). Returning false cancels the turn (finish_reason "cancelled").
  std::function<bool(int32_t token)> on_token;
  bool return_prompt_logits = false;  // fill TurnResult::prompt_logits (tests, debugging)
  // Grammar-constrained decoding (tool_choice, response_format): called before each sample to
  // mask the logits and after it with the token; null = unconstrained. When it allows no
  // token the turn ends with finish_reason "stop".
  std::shared_ptr<LogitsProcessor> logits_processor;
  // logit_bias and presence/frequency penalties (engine/logprobs.h), applied to the logits the
  // sampler draws from (before the logits processor); counts are over this turn's output.
  LogitAdjustments adjust;
  // -1: no logprobs. Else TurnResult::logprobs gets, per generated token, its log-probability
  // under the model's logits at temperature 1 (before adjustments and masks) and this many
  // most likely alternatives (0..20); on_logprobs hears each one before on_token.
  int top_logprobs = -1;
  std::function<void(const TokenLogprobs&)> on_logprobs;
  // Scheduling (issue 14). Lower values are served first, as in vLLM's `priority` (default 0,
  // negative allowed); equal priorities are first come first served. A priority orders the
  // queue of turns not yet admitted and the prefill chunks of a step; it never preempts.
  int priority = 0;
  // Set by another thread (the server, when the client disconnects): the turn ends as
  // "cancelled" at the next step, queued, prefilling or decoding, and frees its slot. nullptr = never.
  std::shared_ptr<std::atomic<bool>> cancelled;
};

// Where the prompt's tokens came from and what the turn cost, in layer-token units.
struct TurnAccounting {
  int64_t prompt_tokens = 0;
  int64_t matched_live = 0;          // served by the session's live state
  int64_t matched_ram = 0;           // restored from the cache's RAM tier
  int64_t matched_disk = 0;          // restored from the cache's disk tier
  int64_t matched_remote = 0;        // restored from the shared remote tier (Redis): pages RAM and
                                     // disk missed, brought by this turn
  int64_t tokens_encoded = 0;        // prompt tokens that ran through the encoder
  int64_t encoder_replay_rows = 0;   // Encoder SWA Bounded Replay rows (snapshot missing)
  int64_t exact_restore_rows = 0;    // ExactEncoderRestore rows (snapshot missing, staircase policy)
  int64_t decoder_rows = 0;          // rows that passed the last decoder layer during prefill
  int64_t layer_token_units = 0;     // prefill + decode
  int64_t prefill_units = 0;
  int64_t decoder_only_cached_units = 0;  // a decoder-only model with an exact prefix cache
  int64_t no_cache_units = 0;             // the same model with no cache (N·L)
  bool snapshot_hit = false;
  bool tail_hit = false;             // resumed from a snapshot's decoder tail at the prompt's end
                                     // (an exact repeat): no prompt row was computed
  double queue_ms = 0;               // submit -> admission by the scheduler
  int64_t admission = -1;            // the order the scheduler admitted turns in (0 first)
  int64_t spec_passes = 0;           // speculative verify passes (--spec-tokens)
  int64_t spec_drafted = 0;          // draft tokens they verified
  int64_t spec_accepted = 0;         // of which accepted (part of the output)
  double ttft_ms = 0;                // submit -> first token (or end of prefill)
  double total_ms = 0;
  int64_t cached_tokens() const { return matched_live + matched_ram + matched_disk + matched_remote; }
};

struct TurnResult {
  std::vector<int32_t> output;       // generated tokens (a stop token included)
  std::string finish_reason;         // "stop", "length", "cancelled" or "error"
  ErrorKind error_kind = ErrorKind::kNone;
  std::string error;                 // when error_kind != kNone
  TurnAccounting accounting;
  std::vector<float> prompt_logits;  // [V] after the prompt, when asked for
  std::vector<TokenLogprobs> logprobs; // one per output token when TurnRequest::top_logprobs >= 0
  uint64_t logits_hash = 0;          // FNV-1a of the bytes of the turn's last logits [V] (0: none);
                                     // equal hashes across runs = the same final state, bit for bit
};

struct SessionInfo {
  std::string id;
  int64_t tokens = 0;                // length of the live context
  bool live = false;                 // holds a live exact state
  int64_t turns = 0;
  int64_t pinned_tokens = 0;         // soft-pinned prefix (0 = none)
  double idle_seconds = 0;
};

// Cumulative counters (the server's /metrics).
struct EngineMetrics {
  int64_t turns = 0, turns_cancelled = 0, turns_failed = 0;
  int64_t prompt_tokens = 0, generated_tokens = 0;
  int64_t hit_tokens_live = 0, hit_tokens_ram = 0, hit_tokens_disk = 0, hit_tokens_remote = 0;
  int64_t encoder_replays = 0, encoder_replay_rows = 0, decoder_replays = 0;
  int64_t exact_restores = 0, exact_restore_rows = 0;  // staircase restores (snapshot missing)
  int64_t layer_token_units = 0;
  int64_t decode_batches = 0, decode_batch_rows = 0;  // batched decode steps and their rows
  // Speculative decoding (--spec-tokens): verify passes, drafts verified, drafts accepted.
  int64_t spec_passes = 0, spec_drafted = 0, spec_accepted = 0;
  // The scheduler (issue 14):
  int64_t queued_turns = 0;           // turns submitted and not yet admitted (now)
  int64_t prefilling_turns = 0;       // admitted turns with prompt rows still to run (now)
  int64_t decoding_turns = 0;         // turns generating tokens (now)
  int64_t prefilling_turns_max = 0;   // the most turns prefilling at once so far
  int64_t turns_admitted = 0;         // turns that left the queue (summed below)
  double queue_wait_ms_total = 0;     // submit -> admission, summed over admitted turns
  double queue_wait_ms_max = 0;       // the longest such wait so far
  int64_t turns_queue_full = 0;       // turns refused with kQueueFull (429)
  int64_t memory_waits = 0;           // turns whose admission waited for session memory
  int64_t steps = 0;                  // mixed-scheduler steps that ran something
  int64_t step_prefill_rows = 0;      // prompt rows those steps encoded
  int64_t step_decode_rows = 0;       // decode rows those steps ran
  int64_t step_decode_rows_max = 0;   // the most decode rows in one step
  int64_t prefill_batches = 0;        // batched prefill passes (--batch-prefill): encode or finish
  int64_t prefill_batch_turns_max = 0;  // the most turns' chunks in one such pass
  int64_t decode_rows_in_prefill = 0;   // decode rows that rode in a batched prefill pass
  int64_t decoder_phase_pauses = 0;     // steps that ended with a decoder phase between two layers (in parts)
  int64_t sessions = 0;
  // Session memory (--session-ram): live states plus the cache RAM their pins hold.
  uint64_t live_state_bytes = 0;      // live states: idle sessions' and in-flight turns'
  uint64_t session_pinned_bytes = 0;  // prefix-cache RAM pinned by sessions (also in ram_bytes)
  uint64_t session_ram_budget = 0;    // live_state_bytes + session_pinned_bytes stay under it
  int64_t live_sessions = 0;          // sessions holding a live state
  int64_t max_sessions = 0;           // --max-sessions: sessions at most, live or not
  int64_t sessions_demoted = 0;       // live states (and pins) released into the cache for the budget
  int64_t cache_inserts_partial = 0;  // cache inserts that stored less than offered (RAM held by pins)
  int64_t cache_insert_refused_tokens = 0;  // tokens those inserts refused
  // From the prefix cache:
  uint64_t ram_bytes = 0, disk_bytes = 0, ram_budget = 0, disk_budget = 0;
  int64_t page_tokens = 0;  // the cache's page size
  uint64_t snapshots_dropped = 0, pages_spilled = 0, disk_entries_deleted = 0, corrupt_entries = 0;
  // The shared remote tier (--cache-remote): `remote_enabled` false = none, counters all zero.
  bool remote_enabled = false;
  cache::RemoteStats remote;
};

// How the engine thread orders work (issue 14, docs/SERVER.md "Scheduling").
enum class SchedulerKind {
  kSerial,  // one turn's whole prefill at a time, then a batched decode step (the old loop)
  kMixed,   // steps: every decoding turn's row plus prefill chunks of several turns up to a budget
};
struct SchedulerOptions {
  SchedulerKind kind = SchedulerKind::kMixed;  // --scheduler serial|mixed (mixed needs a backend
                                               // with chunked prefill: the CPU; else serial)
  int step_tokens = 160;         // --step-tokens: rows per mixed step (decode rows + prefill chunks);
                                 // a step always runs its decode rows and at least one item
  double step_ms = 560;          // --step-ms: a mixed step adds no prefill item (after its first)
                                 // once its predicted length (decode rows plus items, at the rates
                                 // the last steps measured: session/step_cost.h) would pass this
                                 // many ms; 0 = rows only (--step-tokens). Bounds the slow steps of
                                 // a long prompt's end, where a row attends to a longer prefix.
                                 // 560: chosen on `small` when a 2-chunk step took ~450 ms; with
                                 // the faster kernels of session 10 such steps take ~150-180 ms
                                 // and it binds only on a machine ~3x slower or loaded (docs/SERVER.md
                                 // "Scheduling"); it never binds where steps are shorter (a GPU)
  int max_prefill_chunk = 64;    // --max-prefill-chunk: a turn's prompt runs in chunks of this
                                 // size from where its state starts (boundaries fixed per turn,
                                 // so its result does not depend on the other turns). Defaults
                                 // chosen by bench_scheduler 16K on `small` (docs/SERVER.md
                                 // "Scheduling"): two chunks per step while up to 32 turns decode,
                                 // a step ~150-180 ms here (160 / 64: ITL ratio 1.46-1.54x, TTFT
                                 // 1.01-1.10x; 224 / 96 gave 2.08-3.07x and 1.13-1.26x)
  bool batch_prefill = true;     // --batch-prefill on|off: a step's prefill chunks of different
                                 // turns run as one engine pass (engine/batch_prefill.h), as do
                                 // their decoder phases, and its decode rows ride in the first
                                 // (decode_in_prefill_pass). Exact either way: each turn's rows keep
                                 // products of their own (engine/row_groups.h) unless
                                 // kernels::RowInvariantMatmul() lets them share one. On by default:
                                 // riding saves most of the decode rows' encoder half, measured
                                 // on `small` 16K (docs/SERVER.md "Scheduling"); ignored by the
                                 // serial scheduler and on a backend without batched prefill
  bool decode_in_prefill_pass = true;  // with batch_prefill: the step's decode rows ride in its first
                                       // prefill pass (through the encoder layers beside the chunks,
                                       // engine/batch_prefill.h EncodeDecodeBatch: the layer's weights
                                       // come from cache for them) instead of a decode pass of their
                                       // own; same bits either way
  bool decoder_phase_in_parts = false;  // --decoder-phase-in-parts on|off: a turn's decoder phase (the
                                       // bounded replay or exact staircase after its last chunk) runs
                                       // as many layers a step as the budget holds
                                       // (engine/batch_prefill.h PrefillFinishLayers), instead of
                                       // whole in one step (at 16K on `small` ~140-170 ms, twice a
                                       // step). Same bits either way; needs a backend with it (the
                                       // CPU). Off by default: on `small` it did not lower the
                                       // benchmark's p99 (its layers are priced alike, but the first,
                                       // which scores the whole prefix, took 53 of the phase's 139 ms
                                       // at 16K) and it raised the undisturbed p99 (docs/SERVER.md)
  PrefillOrder prefill_order = PrefillOrder::kFcfs;  // --prefill-order: how a step's budget is
                                 // shared among prefilling turns (session/chunk_plan.h); fcfs by
                                 // default (issue 14), round-robin for short turns beside long ones
  int max_prefilling_turns = 4;  // --max-prefilling-turns: turns admitted with prompt rows left
  int max_queued_turns = 256;    // --max-queued-turns: turns waiting for admission; past it
                                 // Submit refuses with kQueueFull (0 = no limit)
};
const char* SchedulerName(SchedulerKind k);                 // "serial" or "mixed"
bool ParseScheduler(const std::string& s, SchedulerKind* out);

struct ManagerOptions {
  uint64_t cache_ram_bytes = 1ull << 30;  // --cache-ram
  uint64_t cache_disk_bytes = 8ull << 30; // --cache-disk
  std::string cache_dir;                  // --cache-dir; "" = RAM only
  cache::RemoteTierConfig cache_remote;   // --cache-remote, --cache-remote-ttl, --cache-remote-timeout
                                          // (url "" = no shared tier)
  size_t page_tokens = 16;                // power of two, even
  // Budget of session memory: live states (backend Sequences) plus the prefix-cache RAM that
  // sessions' pins hold (those bytes are inside cache_ram_bytes). Past it the least recently
  // used sessions are demoted: their state goes into the cache and their live state and pin are
  // released (the next turn restores from the cache, exactly). 0 = cache_ram_bytes / 2: the
  // cache keeps at least half its RAM for unpinned prefixes, and a live state (one turn's
  // windows and pools) lives about as long as its prefix stays hot in the cache anyway.
  uint64_t session_ram_bytes = 0;         // --session-ram
  int max_sessions = 1024;                // sessions at most, live or demoted (CreateSession beyond
                                          // throws SessionLimitError)
  bool snapshot_decoder_windows = true;   // snapshots also hold decoder windows (exact restore)
  BackendOptions backend;                 // --device (default cpu: the engine of engine/engine.h), F32 device weights
  SchedulerOptions scheduler;             // --scheduler, --step-tokens, --max-prefill-chunk, ...
  // --spec-tokens: speculative decoding with the model's DSpark drafter (engine/speculative.h),
  // K drafts verified per pass of a decoding turn (0 = off, at most 15). Start refuses it for a
  // model without DSpark layers and on a backend other than the CPU. Turns with a logits
  // processor (grammar), logit_bias, penalties or logprobs decode without it.
  int spec_tokens = 0;
  // The drafter each speculating turn gets (tests: a drafter whose proposals are known); null =
  // the model's DSpark drafter (engine/dspark.h). With one, the model needs no DSpark layers.
  std::function<std::unique_ptr<Drafter>(const Model&)> make_drafter;
};

// CreateSession when max_sessions sessions exist (the server answers 429).
class SessionLimitError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// One page of ListSessions, in id order.
struct SessionPage {
  std::vector<SessionInfo> data;
  bool has_more = false;  // sessions after the last one returned
};

class SessionManager {
 public:
  // Starts the engine thread. Throws std::runtime_error if the cache cannot be opened or the
  // backend cannot start (options.backend.device "cuda" without a device), and
  // std::invalid_argument on an unknown device name.
  static std::unique_ptr<SessionManager> Start(std::shared_ptr<const Model> model, ManagerOptions options);
  ~SessionManager();  // Shutdown(true)
  SessionManager(const SessionManager&) = delete;
  SessionManager& operator=(const SessionManager&) = delete;

  // Queues a turn. A second turn on a session that has one in flight fails at once with
  // kSessionBusy (the server answers 409). Unknown session id: kSessionNotFound.
  std::future<TurnResult> Submit(TurnRequest request);

  // Creates a session of `owner` (id "" = a generated one: "sess_" + 128 random bits from the
  // kernel's CSPRNG, so ids cannot be guessed). `pin_prefix` (optional) is prefilled into the
  // cache partition `salt` and soft-pinned for `pin_ttl_s` seconds. Returns the id, or throws
  // std::invalid_argument (duplicate id, bad tokens) or SessionLimitError (max_sessions exist).
  // Another owner's sessions behave exactly like missing ones (their ids can be reused).
  std::string CreateSession(const std::string& id, const std::vector<int32_t>& pin_prefix, double pin_ttl_s,
                            SessionOwner owner = kLocalOwner, cache::TenantSalt salt = cache::kNoTenant);
  std::optional<SessionInfo> GetSession(const std::string& id, SessionOwner owner = kLocalOwner);
  enum class DeleteOutcome { kDeleted, kNotFound, kBusy };  // kBusy: a turn is queued or in flight
  DeleteOutcome DeleteSession(const std::string& id, SessionOwner owner = kLocalOwner);
  std::vector<SessionInfo> ListSessions(SessionOwner owner = kLocalOwner);  // `owner`'s, in id order
  // At most `limit` of `owner`'s sessions whose ids sort after `after` ("" = from the first), in id order.
  SessionPage ListSessions(size_t limit, const std::string& after, SessionOwner owner = kLocalOwner);

  // The counters as the engine thread last published them (after each step, each finished
  // turn and each session call): never waits for the engine thread, so /metrics and /v1/cache
  // answer while a long prefill runs.
  EngineMetrics Metrics();
  // PrefixCache::CheckIntegrity() on the engine thread (tests, debugging): Ok or the first
  // violated invariant as text.
  std::string CheckCacheIntegrity();
  // Waits (on the engine thread) until the shared remote tier's writer has sent everything
  // queued so far (tests; a no-op without --cache-remote).
  void DrainRemoteWrites();
  // Drops the prefix cache's unpinned entries of partition `salt` (one tenant's; see
  // PrefixCache::DropPartition); sessions' live states and pinned prefixes stay. Returns the
  // tokens dropped.
  size_t FlushCachePartition(cache::TenantSalt salt);
  const Model& model() const { return *model_; }
  const std::string& device() const { return device_; }              // "cpu" or "cuda": the backend in use
  const std::string& device_detail() const { return device_detail_; }  // Backend::Describe()
  SchedulerKind scheduler() const { return scheduler_; }  // the one in use (mixed falls back to serial
                                                          // on a backend without chunked prefill)

  // Stops accepting work; in-flight and queued turns finish (cancel = false) or end as
  // "cancelled" (cancel = true); flushes the cache's disk tier; joins the engine thread.
  void Shutdown(bool cancel);

 private:
  struct Impl;
  SessionManager(std::shared_ptr<const Model> model, std::unique_ptr<Impl> impl);
  std::shared_ptr<const Model> model_;
  std::string device_, device_detail_;  // fixed at Start (the backend itself is the engine thread's)
  SchedulerKind scheduler_ = SchedulerKind::kSerial;
  std::unique_ptr<Impl> impl_;
};

}  // namespace cedar::session
