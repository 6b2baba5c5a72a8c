// One turn submitted to the SessionManager, seen from the server: the engine thread feeds it
// tokens (on_token), a worker thread waits for the result, and a consumer (a streamed
// response, or the waiting worker itself) takes the tokens. The engine thread only appends a
// token, checks the stop strings and returns; all formatting happens on the consumer's thread.
//
// Thread contract: OnToken runs on the engine thread; Wait on one worker thread; Take, tokens
// and the accessors on any thread (they lock); the waker is called on the engine or worker
// thread, without the lock held.
#pragma once
#include <atomic>
#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "session/session_manager.h"
#include "tools_bridge/lib/tokenizer.h"
#include "server/stop_strings.h"

namespace cedar::server {

class LiveTurn {
 public:
  // Submits `request` (its on_token is replaced). `cancelled` (shared with the HTTP request)
  // ends the turn at its next token once set. REQUIRES: `tokenizer` outlives the turn.
  static std::shared_ptr<LiveTurn> Submit(session::SessionManager& manager, session::TurnRequest request,
                                          const bridge::Tokenizer& tokenizer, std::vector<std::string> stop,
                                          std::shared_ptr<std::atomic<bool>> cancelled);

  // A turn no manager runs: the caller feeds it with Push and ends it with Complete (tests of
  // the response formats; replaying recorded turns).
  static std::shared_ptr<LiveTurn> Manual(const bridge::Tokenizer& tokenizer, std::vector<std::string> stop);
  bool Push(int32_t id) { return OnToken(id); }  // as on_token: false = the turn should end
  void Complete(session::TurnResult result);     // REQUIRES: a Manual turn, called once

  // The result if the manager refused the turn at once (e.g. kSessionBusy), else nullopt.
  std::optional<session::TurnResult> RefusedAtOnce();
  // Blocks until the turn ends; returns its result. Call from one thread.
  const session::TurnResult& Wait();
  // Lets Take report the end (after the caller's bookkeeping, so a client that has read the
  // whole stream sees that turn in /metrics). Wait first.
  void Publish();

  // Called whenever Take may return something new; called at once if something is pending.
  void SetWaker(std::function<void()> wake);
  // Moves out the tokens generated since the last call; *finished = the result is in and
  // published (then every token has been taken and result() is valid).
  // `logprobs` (optional): the same tokens' log-probabilities, when the request asked for them.
  std::vector<int32_t> Take(bool* finished, std::vector<TokenLogprobs>* logprobs = nullptr);
  void Cancel() { cancelled_->store(true); }

  // Valid once finished.
  const session::TurnResult& result() const { return result_; }
  // The stop string that ended the turn ("" = none). Valid once finished.
  const std::string& matched_stop() const { return matched_stop_; }
  bool cancelled() const { return cancelled_->load(); }
  // Submit -> result, as the server saw it: the session manager's whole time for the turn
  // (queueing, compute, and its bookkeeping after TurnAccounting::total_ms). Valid once finished.
  double manager_ms() const { return manager_ms_; }
  // The sampling seed the turn ran with (the request's, or the one the Api drew): `cedar.seed`.
  uint64_t seed() const { return seed_; }
  // Seconds between consecutive tokens as on_token received them (n - 1 gaps). Valid once finished.
  const std::vector<float>& token_gaps() const { return gaps_; }

 private:
  LiveTurn(const bridge::Tokenizer& tokenizer, std::vector<std::string> stop,
           std::shared_ptr<std::atomic<bool>> cancelled);
  bool OnToken(int32_t id);  // engine thread

  const bridge::Tokenizer& tokenizer_;
  StopMatcher matcher_;  // engine thread only
  std::optional<TokenLogprobs> staged_logprobs_;  // engine thread only: the next OnToken's logprobs
  std::vector<float> gaps_;                        // engine thread until finished (token_gaps)
  std::chrono::steady_clock::time_point last_token_{};  // engine thread only
  std::shared_ptr<std::atomic<bool>> cancelled_;
  std::future<session::TurnResult> future_;
  std::promise<session::TurnResult> manual_;  // Manual turns only

  std::mutex mu_;  // guards the fields below
  std::vector<int32_t> pending_;
  std::vector<TokenLogprobs> pending_logprobs_;  // aligned with pending_ when the turn reports logprobs
  std::function<void()> wake_;
  bool wake_due_ = true;  // the consumer has taken everything since the last wake
  bool finished_ = false;   // Wait has the result
  bool published_ = false;  // Publish was called
  session::TurnResult result_;
  std::string matched_stop_;
  std::chrono::steady_clock::time_point submitted_;
  double manager_ms_ = 0;
  uint64_t seed_ = 0;
};

}  // namespace cedar::server
