#include "server/event_stream.h"

namespace cedar::server {
namespace {

using nlohmann::json;

// ids -> deltas, as ChatChunks in turn_format.cpp does for the chat stream.
class DeltaStream {
 public:
  DeltaStream(const bridge::Tokenizer& tokenizer, const TurnMeta& meta, std::vector<std::string> stop)
      : holdback_(std::move(stop)) {
    if (meta.dsml) {
      decoder_.emplace(tokenizer, bridge::SpecialText::kName);
      dsml_.emplace(meta.thinking, meta.call_ids);
    } else {
      parser_.emplace(tokenizer, meta.call_ids);
    }
  }

  std::vector<bridge::StreamDelta> Push(int32_t id) {
    return Held(parser_ ? parser_->Push(id) : dsml_->Push(decoder_->Push(id)));
  }

  std::vector<bridge::StreamDelta> Finish(const std::string& matched_stop) {
    std::vector<bridge::StreamDelta> out;
    if (parser_) {
      out = Held(parser_->Finish());
    } else {
      out = Held(dsml_->Push(decoder_->Finish()));
      for (auto& d : Held(dsml_->Finish())) out.push_back(std::move(d));
    }
    if (std::string rest = holdback_.Finish(matched_stop); !rest.empty()) out.push_back(Content(rest));
    return out;
  }

  int tool_call_count() const { return parser_ ? parser_->tool_call_count() : dsml_->tool_call_count(); }

 private:
  static bridge::StreamDelta Content(std::string text) {
    bridge::StreamDelta d;
    d.text = std::move(text);
    return d;
  }

  std::vector<bridge::StreamDelta> Held(std::vector<bridge::StreamDelta> deltas) {
    std::vector<bridge::StreamDelta> out;
    for (bridge::StreamDelta& d : deltas) {
      if (d.kind == bridge::StreamDelta::Kind::kReasoning) {
        out.push_back(std::move(d));
      } else if (d.kind == bridge::StreamDelta::Kind::kContent) {
        if (std::string shown = holdback_.Add(d.text); !shown.empty()) out.push_back(Content(std::move(shown)));
      } else {
        if (std::string shown = holdback_.Flush(); !shown.empty()) out.push_back(Content(std::move(shown)));
        out.push_back(std::move(d));
      }
    }
    return out;
  }

  std::optional<bridge::ToolCallStreamParser> parser_;
  std::optional<bridge::StreamDecoder> decoder_;
  std::optional<bridge::dsml::StreamParser> dsml_;
  StopHoldback holdback_;
};

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
