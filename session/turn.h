// One turn in flight on the engine thread (internal to session/).
#pragma once
#include <chrono>
#include <future>
#include <memory>
#include <optional>
#include <random>
#include <unordered_map>
#include <vector>

#include "cache/cache_types.h"
#include "cache/prefix_cache.h"
#include "cache/state_codec.h"
#include "engine/backend.h"
#include "engine/sampling.h"
#include "engine/speculative.h"
#include "session/session_manager.h"

namespace cedar::session {

struct Session {
  std::string id;                     // as its owner named it
  SessionOwner owner = kLocalOwner;
  cache::TenantSalt pin_salt = cache::kNoTenant;  // the cache partition of `pinned_prefix`
  std::unique_ptr<Sequence> live;     // exact state after the last turn (prompt + output[:-1]), on the backend
  int64_t turns = 0;
  std::vector<int32_t> pinned_prefix;
  cache::PrefixHandle prefix;         // pins the cached prefix of the last turn while the session lives
  std::chrono::steady_clock::time_point last_used = std::chrono::steady_clock::now();
  cache::TenantSalt live_salt = cache::kNoTenant;  // salt the live state's turn cached under
                                                   // (a demotion inserts the state there)
  bool insert_refusal_logged = false;  // a partial cache insert was logged (once per session)
};

struct ActiveTurn {
  TurnRequest request;
  std::promise<TurnResult> promise;
  std::chrono::steady_clock::time_point submitted;
  std::unique_ptr<Sequence> state;         // on the backend
  std::optional<Sampler> sampler;
  std::vector<float> logits;               // [V] predicting the next token
  std::vector<float> masked_logits;        // [V] logits after the request's adjustments and logits_processor
  std::unordered_map<int32_t, int> counts; // generated tokens so far, by id (presence/frequency penalties)
  std::vector<cache::SnapshotInput> snapshots;  // taken at the end of the prompt
  cache::DecoderTail tail_kind = cache::DecoderTail::kNone;  // what the decoder windows equal:
                                           // exact, a bounded replay (until the first decode step), or neither
  TurnResult result;
  bool first_token_seen = false;
  bool done = false;
  // The scheduler (session/scheduler.cpp):
  enum class Phase { kQueued, kPrefilling, kDecoding };
  Phase phase = Phase::kQueued;            // queued: no state yet; prefilling: chunks to go
  int64_t seq = 0;                         // arrival order: first come first served among equal priorities
  PrefillMode mode = PrefillMode::kBounded;  // the decoder phase of this turn's prefill
  int64_t encode_next = 0;                 // the next prompt position to encode (mixed scheduler)
  int finish_layers_done = 0;              // decoder layers of its phase run in earlier steps (in parts)
  double finish_ms_per_row = 0;            // its phase's ms per estimated row, measured on its parts so far
  bool waited_for_memory = false;          // admission was deferred for session memory (counted once)
  // Speculative decoding (--spec-tokens, session/speculation.cpp), decided when the turn begins:
  bool spec_decided = false;               // Speculates() has looked at the request
  bool speculating = false;                // the turn decodes by verify passes
  std::unique_ptr<Drafter> drafter;        // its own drafter: the prompt rows its prefill ran, then its passes
  HiddenCapture spec_capture;              // the prefill's rows of the drafter's layers (PrefillCaptureFor),
                                           // handed to the drafter when the prefill ends (ObservePrefill)
  std::mt19937_64 spec_rng;                // the one generator of its sampled speculation (seeded
                                           // with sampling.seed, as `cedar generate --spec-tokens`)
  int32_t spec_next = -1;                  // a rejection's correction token, produced at the next step
  // True once the client is gone (TurnRequest::cancelled set).
  bool CancelRequested() const { return request.cancelled && request.cancelled->load(std::memory_order_relaxed); }
};

}  // namespace cedar::session
