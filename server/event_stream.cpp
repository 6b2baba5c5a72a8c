#include "server/event_stream.h"

#include "server/delta_stream.h"

namespace cedar::server {
namespace {

using nlohmann::json;

class EventStream final : public BodySource {
 public:
  EventStream(std::shared_ptr<LiveTurn> turn, const bridge::Tokenizer& tokenizer, const TurnMeta& meta,
              std::vector<std::string> stop, std::unique_ptr<EventFormatter> format)
      : turn_(std::move(turn)), deltas_(tokenizer, meta, std::move(stop)), format_(std::move(format)) {}

  void SetWaker(std::function<void()> wake) override { turn_->SetWaker(std::move(wake)); }
  void Cancel() override { turn_->Cancel(); }

  bool Pull(std::string* out) override {
    if (done_) return false;
    if (!started_) {
      started_ = true;
      *out += format_->Start();
    }
    bool finished = false;
    for (int32_t id : turn_->Take(&finished)) {
      *out += format_->Deltas(deltas_.Push(id));
      output_tokens_++;
    }
    if (!finished) return true;
    done_ = true;
    const session::TurnResult& r = turn_->result();
    if (r.error_kind != session::ErrorKind::kNone) {
      *out += format_->Error(r);
    } else {
      *out += format_->Deltas(deltas_.Finish(turn_->matched_stop()));
      *out += format_->Finish(*turn_, output_tokens_, deltas_.tool_call_count() > 0);
    }
    return false;
  }

 private:
  std::shared_ptr<LiveTurn> turn_;
  DeltaStream deltas_;
  std::unique_ptr<EventFormatter> format_;
  bool started_ = false, done_ = false;
  int64_t output_tokens_ = 0;
};

}  // namespace

std::string NamedSseEvent(const std::string& name, const json& data) {
  return "event: " + name + "\ndata: " + data.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
}

std::shared_ptr<BodySource> MakeEventStream(std::shared_ptr<LiveTurn> turn, const bridge::Tokenizer& tokenizer,
                                            const TurnMeta& meta, std::vector<std::string> stop,
                                            std::unique_ptr<EventFormatter> format) {
  return std::make_shared<EventStream>(std::move(turn), tokenizer, meta, std::move(stop), std::move(format));
}

}  // namespace cedar::server
