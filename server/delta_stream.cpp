#include "server/delta_stream.h"

namespace cedar::server {
namespace {

bridge::StreamDelta Content(std::string text) {
  bridge::StreamDelta d;
  d.text = std::move(text);
  return d;
}

}  // namespace

DeltaStream::DeltaStream(const bridge::Tokenizer& tokenizer, const TurnMeta& meta, std::vector<std::string> stop)
    : holdback_(std::move(stop)) {
  if (meta.dsml) {
    decoder_.emplace(tokenizer, bridge::SpecialText::kName);
    dsml_.emplace(meta.thinking, meta.call_ids);
  } else {
    parser_.emplace(tokenizer, meta.call_ids);
  }
}

std::vector<bridge::StreamDelta> DeltaStream::Push(int32_t id) {
  return Held(parser_ ? parser_->Push(id) : dsml_->Push(decoder_->Push(id)));
}

std::vector<bridge::StreamDelta> DeltaStream::Finish(const std::string& matched_stop) {
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

int DeltaStream::tool_call_count() const { return parser_ ? parser_->tool_call_count() : dsml_->tool_call_count(); }

std::vector<bridge::StreamDelta> DeltaStream::Held(std::vector<bridge::StreamDelta> deltas) {
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

}  // namespace cedar::server
