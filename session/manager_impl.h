// SessionManager's private state (internal to session/).
#pragma once
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <list>
#include <mutex>
#include <set>
#include <thread>
#include <unordered_map>

#include "cache/prefix_cache.h"
#include "session/session_manager.h"
#include "session/step_cost.h"
#include "session/turn.h"

namespace cedar::session {

// Everything below `engine thread only` is touched by the engine thread alone; callers post
// closures through `tasks` and wait on futures.
struct SessionManager::Impl {
  std::shared_ptr<const Model> model;
  std::unique_ptr<Backend> backend;  // after `model`, so it goes first (it refers to the model)
  ManagerOptions opt;
  std::unique_ptr<cache::PrefixCache> cache;
  std::thread engine;

  std::mutex mu;                    // guards the fields up to `busy`
  std::condition_variable cv;
  std::deque<std::function<void()>> tasks;
  bool stopping = false;
  bool cancel_all = false;
  std::set<std::string> busy;       // sessions (Key) with a turn queued or in flight
  // The keys (Key(owner, id)) of `sessions`, changed only by the engine thread (with `mu` held)
  // when it creates or deletes a session. Submit reads it to refuse an unknown id at once, and
  // DeleteSession checks `busy` and erases here under one lock, so create, delete and a turn's
  // admission on one id are linearizable: a session either exists for every call or for none.
  std::set<std::string> ids;
  int64_t queued = 0;               // turns submitted and not yet admitted (Submit's limit)
  int64_t next_seq = 0;             // arrival numbers (ActiveTurn::seq)
  int64_t queue_full_refusals = 0;  // Submit's kQueueFull answers

  std::mutex stats_mu;              // guards `stats`
  EngineMetrics stats;              // the last PublishStats()

  // engine thread only
  std::unordered_map<std::string, Session> sessions;  // by Key(owner, id)
  std::list<ActiveTurn> waiting;     // queued turns, not yet admitted (no state)
  std::list<ActiveTurn> active;      // admitted: prefilling or decoding
  EngineMetrics metrics;
  // State bytes per token of the last turn that finished its prefill: admission projects a
  // prefilling turn's final size with it (scheduler.cpp).
  double state_bytes_per_token = 0;
  StepCostModel step_cost;  // what the mixed steps' parts took (--step-ms planning)
  uint64_t prefill_steps = 0;  // mixed steps that planned prefill items (round-robin's rotation)
  bool sessionless_refusal_logged = false;  // a partial insert of a turn without a session was logged

  void Loop();
  void Post(std::function<void()> f) {
    {
      std::lock_guard<std::mutex> lk(mu);
      tasks.push_back(std::move(f));
    }
    cv.notify_one();
  }
  // Runs f on the engine thread and waits. Throws std::runtime_error once shut down (the
  // engine thread is gone: waiting would never end).
  template <class T>
  T Call(std::function<T()> f) {
    auto p = std::make_shared<std::promise<T>>();
    auto fut = p->get_future();
    {
      std::lock_guard<std::mutex> lk(mu);
      if (stopping) throw std::runtime_error("the session manager is shut down");
    }
    Post([this, p, f = std::move(f)] {
      try {
        T v = f();
        PublishStats();  // a caller that reads Metrics() next sees what its call did
        p->set_value(std::move(v));
      } catch (...) {
        p->set_exception(std::current_exception());
      }
    });
    return fut.get();
  }

  // The map key of `owner`'s session `id`: owners never share a namespace.
  static std::string Key(SessionOwner owner, const std::string& id);
  // Copies the counters and the cache's sizes into `stats` (engine thread).
  void PublishStats();

  // scheduler.cpp: the engine thread's step (one call per loop iteration).
  void Step();
  void StepSerial();                  // admit everything (whole prefills), then one decode step
  void StepMixed();                   // decode rows + prefill chunks up to the step budget
  void CancelRequested();             // ends turns whose client is gone (any phase)
  void Cancel(ActiveTurn& t);         // a turn without a finished prefill: drop it, cache nothing
  bool Admit(bool all);               // waiting -> active by (priority, arrival); false: none left to try
  // One batched decode of their last tokens (a speculating turn: its own verify pass instead).
  void DecodeRows(const std::vector<ActiveTurn*>& going);
  // A turn and the lengths of the chunks it runs in this step (PlanChunks' answer for it).
  struct TurnChunks {
    ActiveTurn* t;
    std::vector<int64_t> lens;  // its chunks, in prompt order
    bool finish = false;        // its decoder phase ends in this step (after its chunks)
    int finish_layers = 0;      // of a phase in parts (PrefillFinishLayers): its layers in this step; 0 = whole
    int64_t finish_rows = 0;    // those layers' (or the whole phase's) cost estimate in encoder rows
  };
  // This step's prefill chunks (PlanChunks over the prefilling turns in priority order), within
  // `budget` rows and `budget_ms` predicted ms; round-robin's rounds start where prefill_steps says.
  std::vector<TurnChunks> PlanStep(const std::vector<ActiveTurn*>& pre, int64_t budget, double budget_ms) const;
  // scheduler.cpp: runs one turn's planned chunks alone, then its decoder phase if planned.
  void PrefillAlone(const TurnChunks& p);
  // batch_prefill.cpp: the planned chunks, each pass batching one chunk of every turn. With
  // decode_in_prefill_pass, the decode rows of `going` ride in the first pass and leave `going`
  // (they are done), except speculating turns'; what is left in `going` goes to DecodeRows.
  void PrefillBatched(const std::vector<TurnChunks>& plan, std::vector<ActiveTurn*>* going);
  // turns.cpp
  bool BeginTurn(ActiveTurn& t);      // validate, restore; false when the turn ended
  void StartTurn(ActiveTurn& t);      // BeginTurn + the whole prefill + EndPrefill (serial)
  void EndPrefill(ActiveTurn& t, std::optional<PrefillResult> pr);
  // The one place a turn's next token is chosen from t.logits (a logits processor, e.g. a
  // grammar mask, belongs right before its sampler call). False when the turn ended.
  bool Sample(ActiveTurn& t);
  // Appends `tok` to the output and reports it (logprobs, on_token, TTFT). The finish reason it
  // ends the turn with ("cancelled", "stop", "length"), or nullptr to go on; Finish is the
  // caller's (a speculative pass rolls its state back first).
  const char* Produce(ActiveTurn& t, int32_t tok);
  // speculation.cpp (--spec-tokens):
  static void CheckSpeculation(const Model& m, const Backend& b, const ManagerOptions& o);  // at Start; throws
  bool Speculates(ActiveTurn& t);     // decides once per turn (no grammar, adjustments, logprobs)
  int32_t SpeculativeToken(ActiveTurn& t);  // the next token of a speculating turn
  void SpeculateRow(ActiveTurn& t);   // one verify pass from its last produced token
  void StepAll();              // one batched decode step for every turn in flight
  void Finish(ActiveTurn& t, const std::string& reason);
  void Fail(ActiveTurn& t, ErrorKind kind, const std::string& message);
  std::unique_ptr<Sequence> Restore(ActiveTurn& t, Session* s);
  std::unique_ptr<Sequence> RestoreRepeat(ActiveTurn& t, const cache::RemotePull& pull);  // the whole prompt from a decoder tail
  // Splits `used` restored tokens among the tiers: those the pull brought are remote, those
  // Match() saw only on disk are disk, the rest RAM.
  static void CountTiers(TurnAccounting& a, int64_t used, const cache::MatchResult& m, const cache::RemotePull& pull);
  // `owner`: the session whose state this is (a partial insert is logged once per session).
  void InsertIntoCache(const SequenceState& st, std::vector<cache::SnapshotInput> snapshots, cache::TenantSalt salt,
                       Session* owner);
  std::optional<cache::SnapshotInput> SnapshotAt(const SequenceState& st, int64_t position,
                                                 const cache::TailInput& tail = {});
  void PrepareState(SequenceState& st) const;
  void PrepareState(Sequence& s) const;  // the same history, on a backend sequence
  // What the cache codec reads: the sequence's own state on the CPU (no copy), else a
  // Download into `copy`. Called only where a turn feeds the cache.
  const SequenceState& HostView(const Sequence& s, std::optional<SequenceState>& copy) const;
  // session_budget.cpp: the live-session budget.
  uint64_t SessionRamBudget() const;     // opt.session_ram_bytes, or cache RAM / 2
  uint64_t LiveBytes() const;            // idle sessions' live states + in-flight turns' states
  uint64_t SessionPinnedBytes() const;   // cache RAM pinned by handles alone (sessions' pins)
  void EnforceSessionBudget();           // demotes least recently used sessions until within
  void Demote(Session& s);               // state into the cache; live state and pin released
};

}  // namespace cedar::session
