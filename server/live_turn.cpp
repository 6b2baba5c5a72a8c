#include "server/live_turn.h"

#include <chrono>

namespace cedar::server {

LiveTurn::LiveTurn(const bridge::Tokenizer& tokenizer, std::vector<std::string> stop,
                   std::shared_ptr<std::atomic<bool>> cancelled)
    : tokenizer_(tokenizer), matcher_(std::move(stop)), cancelled_(std::move(cancelled)) {}

std::shared_ptr<LiveTurn> LiveTurn::Submit(session::SessionManager& manager, session::TurnRequest request,
                                           const bridge::Tokenizer& tokenizer, std::vector<std::string> stop,
                                           std::shared_ptr<std::atomic<bool>> cancelled) {
  if (!cancelled) cancelled = std::make_shared<std::atomic<bool>>(false);
  std::shared_ptr<LiveTurn> turn(new LiveTurn(tokenizer, std::move(stop), std::move(cancelled)));
  // The callback holds the turn alive until the manager drops the request.
  request.on_token = [turn](int32_t id) { return turn->OnToken(id); };
  // Called right before on_token for the same token (engine thread): staged until it arrives.
  if (request.top_logprobs >= 0)
    request.on_logprobs = [turn](const TokenLogprobs& lp) { turn->staged_logprobs_ = lp; };
  request.cancelled = turn->cancelled_;  // the scheduler ends the turn at its next step once set
  turn->submitted_ = std::chrono::steady_clock::now();
  turn->seed_ = request.sampling.seed;
  turn->future_ = manager.Submit(std::move(request));
  return turn;
}

std::shared_ptr<LiveTurn> LiveTurn::Manual(const bridge::Tokenizer& tokenizer, std::vector<std::string> stop) {
  std::shared_ptr<LiveTurn> turn(
      new LiveTurn(tokenizer, std::move(stop), std::make_shared<std::atomic<bool>>(false)));
  turn->submitted_ = std::chrono::steady_clock::now();
  turn->future_ = turn->manual_.get_future();
  return turn;
}

void LiveTurn::Complete(session::TurnResult result) { manual_.set_value(std::move(result)); }

bool LiveTurn::OnToken(int32_t id) {
  const auto now = std::chrono::steady_clock::now();
  if (last_token_ != std::chrono::steady_clock::time_point{})
    gaps_.push_back(std::chrono::duration<float>(now - last_token_).count());
  last_token_ = now;
  int matched = -1;
  if (!matcher_.empty() && tokenizer_.InVocab(id)) {
    matched = matcher_.Push(tokenizer_.TokenBytes(id), tokenizer_.IsSpecial(id));
  }
  std::function<void()> wake;
  {
    std::lock_guard<std::mutex> lk(mu_);
    pending_.push_back(id);
    if (staged_logprobs_) {
      pending_logprobs_.push_back(std::move(*staged_logprobs_));
      staged_logprobs_.reset();
    }
    if (matched >= 0) matched_stop_ = matcher_.stops()[size_t(matched)];
    if (wake_due_ && wake_) {
      wake_due_ = false;
      wake = wake_;
    }
  }
  if (wake) wake();
  return matched < 0 && !cancelled_->load();
}

std::optional<session::TurnResult> LiveTurn::RefusedAtOnce() {
  if (future_.wait_for(std::chrono::seconds(0)) != std::future_status::ready) return std::nullopt;
  return Wait();
}

const session::TurnResult& LiveTurn::Wait() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (finished_) return result_;
  }
  session::TurnResult r = future_.get();
  const auto now = std::chrono::steady_clock::now();
  std::lock_guard<std::mutex> lk(mu_);
  manager_ms_ = std::chrono::duration<double, std::milli>(now - submitted_).count();
  result_ = std::move(r);
  finished_ = true;
  return result_;
}

void LiveTurn::Publish() {
  std::function<void()> wake;
  {
    std::lock_guard<std::mutex> lk(mu_);
    published_ = true;
    wake = wake_;
    wake_due_ = false;
  }
  if (wake) wake();
}

void LiveTurn::SetWaker(std::function<void()> wake) {
  bool now;
  {
    std::lock_guard<std::mutex> lk(mu_);
    wake_ = wake;
    now = !pending_.empty() || published_;
    if (now) wake_due_ = false;
  }
  if (now && wake) wake();
}

std::vector<int32_t> LiveTurn::Take(bool* finished, std::vector<TokenLogprobs>* logprobs) {
  std::lock_guard<std::mutex> lk(mu_);
  std::vector<int32_t> out;
  out.swap(pending_);
  if (logprobs) logprobs->swap(pending_logprobs_);
  pending_logprobs_.clear();
  *finished = published_;
  wake_due_ = !published_;
  return out;
}

}  // namespace cedar::server
