#include "server/turn_format.h"

#include <algorithm>
#include <optional>

#include "tools_bridge/lib/dsml_parser.h"
#include "tools_bridge/lib/openai_json.h"
#include "server/api_error.h"
#include "server/delta_stream.h"
#include "server/logprobs_json.h"
#include "server/stop_strings.h"

namespace cedar::server {
namespace {

using nlohmann::json;

bool IsStopId(const TurnMeta& meta, int32_t id) {
  return std::find(meta.stop_ids.begin(), meta.stop_ids.end(), id) != meta.stop_ids.end();
}

json Base(const TurnMeta& meta, const char* object) {
  json j = {{"id", meta.id}, {"object", object}, {"created", meta.created}, {"model", meta.model}};
  if (!meta.session_id.empty()) j["session_id"] = meta.session_id;
  return j;
}

// Formats the streamed chunks of one kind of turn.
class ChunkFormatter {
 public:
  virtual ~ChunkFormatter() = default;
  virtual std::string Start() = 0;
  virtual std::string Push(int32_t id) = 0;
  // After the last token: the rest of the text and the finish chunk.
  virtual std::string Finish(const LiveTurn& turn) = 0;
  // Before Push(id): the token's logprobs (null unless asked for). They ride on the next chunk
  // that goes out, so every shown token's entry appears exactly once, in order.
  void Note(int32_t id, const TokenLogprobs* lp, const TurnMeta& meta) {
    if (meta.return_token_ids) pending_ids_.push_back(id);
    if (lp && !IsStopId(meta, id)) pending_lps_.push_back(*lp);
  }

 protected:
  // The pending logprobs in chat's shape (null when none were asked for).
  json TakeChatLogprobs(const TurnMeta& meta, const bridge::Tokenizer& tokenizer) {
    if (meta.top_logprobs < 0 || pending_lps_.empty()) return nullptr;
    json j = {{"content", ChatLogprobEntries(tokenizer, pending_lps_)}, {"refusal", nullptr}};
    pending_lps_.clear();
    return j;
  }
  // Completions: logprobs (legacy shape) and token_ids of the tokens since the last chunk.
  void TakeCompletionExtras(const TurnMeta& meta, const bridge::Tokenizer& tokenizer, json& choice) {
    if (meta.top_logprobs >= 0) {
      choice["logprobs"] = pending_lps_.empty() && choice["text"] == "" ? json(nullptr)
                                                                        : CompletionLogprobs(tokenizer, pending_lps_, text_offset_);
      for (const TokenLogprobs& lp : pending_lps_) text_offset_ += int64_t(LogprobTokenText(tokenizer, lp.chosen.id).size());
      pending_lps_.clear();
    }
    if (meta.return_token_ids) {
      choice["token_ids"] = pending_ids_;
      pending_ids_.clear();
      if (!prompt_ids_sent_) choice["prompt_token_ids"] = meta.prompt_ids;
      prompt_ids_sent_ = true;
    }
  }

 private:
  std::vector<TokenLogprobs> pending_lps_;
  std::vector<int32_t> pending_ids_;
  int64_t text_offset_ = 0;
  bool prompt_ids_sent_ = false;
};

class ChatChunks final : public ChunkFormatter {
 public:
  ChatChunks(const bridge::Tokenizer& tokenizer, const TurnMeta& meta, std::vector<std::string> stop)
      : tokenizer_(tokenizer), meta_(meta), deltas_(tokenizer, meta, std::move(stop)) {}

  std::string Start() override { return Chunk({{"role", "assistant"}, {"content", ""}}, nullptr); }

  std::string Push(int32_t id) override { return Deltas(deltas_.Push(id)); }

  std::string Finish(const LiveTurn& turn) override {
    const session::TurnResult& result = turn.result();
    const std::string& matched_stop = turn.matched_stop();
    std::string out = Deltas(deltas_.Finish(matched_stop));
    json last = Base(meta_, "chat.completion.chunk");
    last["choices"] = json::array({{{"index", 0},
                                    {"delta", json::object()},
                                    {"logprobs", TakeChatLogprobs(meta_, tokenizer_)},
                                    {"finish_reason", FinishReasonOf(deltas_.tool_call_count() > 0, matched_stop,
                                                                     result.finish_reason)}}});
    last["cedar"] = CedarJson(result.accounting, meta_.session_id, turn);
    out += SseEvent(last);
    return out;
  }

 private:
  std::string Chunk(json delta, json finish_reason) {
    json j = Base(meta_, "chat.completion.chunk");
    j["choices"] = json::array(
        {{{"index", 0}, {"delta", std::move(delta)}, {"logprobs", TakeChatLogprobs(meta_, tokenizer_)}, {"finish_reason", finish_reason}}});
    return SseEvent(j);
  }

  // Held deltas (DeltaStream) -> chunks: content as {"content": text}, reasoning and tool calls
  // as the bridge writes them.
  std::string Deltas(const std::vector<bridge::StreamDelta>& deltas) {
    std::string out;
    for (const bridge::StreamDelta& d : deltas) {
      out += d.kind == bridge::StreamDelta::Kind::kContent ? Chunk({{"content", d.text}}, nullptr)
                                                            : Chunk(bridge::DeltaJson(d), nullptr);
    }
    return out;
  }

  const bridge::Tokenizer& tokenizer_;
  TurnMeta meta_;
  DeltaStream deltas_;
};

class CompletionChunks final : public ChunkFormatter {
 public:
  CompletionChunks(const bridge::Tokenizer& tokenizer, const TurnMeta& meta, std::vector<std::string> stop)
      : tokenizer_(tokenizer), meta_(meta), decoder_(tokenizer), holdback_(std::move(stop)) {}

  std::string Start() override { return {}; }

  std::string Push(int32_t id) override {
    if (IsStopId(meta_, id)) return {};
    return Text(holdback_.Add(decoder_.Push(id)), nullptr);
  }

  std::string Finish(const LiveTurn& turn) override {
    const session::TurnResult& result = turn.result();
    const std::string& matched_stop = turn.matched_stop();
    std::string rest = holdback_.Add(decoder_.Finish());
    rest += holdback_.Finish(matched_stop);
    std::string out = Text(rest, nullptr);
    json last = Base(meta_, "text_completion");
    json choice = {{"index", 0},
                   {"text", ""},
                   {"logprobs", nullptr},
                   {"finish_reason", FinishReasonOf(false, matched_stop, result.finish_reason)}};
    TakeCompletionExtras(meta_, tokenizer_, choice);
    last["choices"] = json::array({std::move(choice)});
    last["cedar"] = CedarJson(result.accounting, meta_.session_id, turn);
    return out + SseEvent(last);
  }

 private:
  std::string Text(const std::string& text, json finish_reason) {
    if (text.empty()) return {};
    json j = Base(meta_, "text_completion");
    json choice = {{"index", 0}, {"text", text}, {"logprobs", nullptr}, {"finish_reason", finish_reason}};
    TakeCompletionExtras(meta_, tokenizer_, choice);
    j["choices"] = json::array({std::move(choice)});
    return SseEvent(j);
  }

  const bridge::Tokenizer& tokenizer_;
  TurnMeta meta_;
  bridge::StreamDecoder decoder_;
  StopHoldback holdback_;
};

class TurnStream final : public BodySource {
 public:
  TurnStream(std::shared_ptr<LiveTurn> turn, std::unique_ptr<ChunkFormatter> format, TurnMeta meta, bool chat)
      : turn_(std::move(turn)), format_(std::move(format)), meta_(std::move(meta)), chat_(chat) {}

  void SetWaker(std::function<void()> wake) override { turn_->SetWaker(std::move(wake)); }
  void Cancel() override { turn_->Cancel(); }

  bool Pull(std::string* out) override {
    if (done_) return false;
    if (!started_) {
      started_ = true;
      *out += format_->Start();
    }
    bool finished = false;
    std::vector<TokenLogprobs> lps;
    const std::vector<int32_t> ids = turn_->Take(&finished, meta_.top_logprobs >= 0 ? &lps : nullptr);
    for (size_t i = 0; i < ids.size(); ++i) {
      const int32_t id = ids[i];
      format_->Note(id, i < lps.size() ? &lps[i] : nullptr, meta_);
      *out += format_->Push(id);
      completion_tokens_++;
    }
    if (!finished) return true;
    done_ = true;
    const session::TurnResult& r = turn_->result();
    if (r.error_kind != session::ErrorKind::kNone) {
      *out += SseEvent(FromErrorKind(r.error_kind, r.error).ToJson());
    } else {
      *out += format_->Finish(*turn_);
      if (meta_.include_usage) {
        json u = Base(meta_, chat_ ? "chat.completion.chunk" : "text_completion");
        u["choices"] = json::array();
        u["usage"] = UsageJson(r.accounting, completion_tokens_);
        u["cedar"] = CedarJson(r.accounting, meta_.session_id, *turn_);
        *out += SseEvent(u);
      }
    }
    *out += kSseDone;
    return false;
  }

 private:
  std::shared_ptr<LiveTurn> turn_;
  std::unique_ptr<ChunkFormatter> format_;
  TurnMeta meta_;
  bool chat_;
  bool started_ = false, done_ = false;
  int64_t completion_tokens_ = 0;
};

}  // namespace

json UsageJson(const session::TurnAccounting& a, int64_t completion_tokens) {
  return {{"prompt_tokens", a.prompt_tokens},
          {"completion_tokens", completion_tokens},
          {"total_tokens", a.prompt_tokens + completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", a.cached_tokens()}}}};
}

json CedarJson(const session::TurnAccounting& a, const std::string& session_id, const LiveTurn& turn) {
  json j = {{"prompt_tokens", a.prompt_tokens},
            {"cached_tokens", a.cached_tokens()},
            {"cached_tokens_by_tier",
             {{"live", a.matched_live}, {"ram", a.matched_ram}, {"disk", a.matched_disk}, {"remote", a.matched_remote}}},
            {"tokens_encoded", a.tokens_encoded},
            {"encoder_replay_rows", a.encoder_replay_rows},
            {"exact_restore_rows", a.exact_restore_rows},
            {"decoder_rows", a.decoder_rows},
            {"snapshot_hit", a.snapshot_hit},
            {"layer_token_units", a.layer_token_units},
            {"prefill_units", a.prefill_units},
            {"baselines",
             {{"decoder_only_cached_units", a.decoder_only_cached_units}, {"no_cache_units", a.no_cache_units}}},
            {"ttft_ms", a.ttft_ms},
            {"total_ms", a.total_ms},
            {"manager_ms", turn.manager_ms()},
            {"seed", turn.seed()}};
  if (!session_id.empty()) j["session_id"] = session_id;
  if (a.spec_passes > 0)  // --spec-tokens: this turn decoded speculatively
    j["speculative"] = {{"passes", a.spec_passes}, {"drafted", a.spec_drafted}, {"accepted", a.spec_accepted}};
  return j;
}

std::string FinishReasonOf(bool has_tool_calls, const std::string& matched_stop, const std::string& manager_reason) {
  if (has_tool_calls) return "tool_calls";
  if (!matched_stop.empty()) return "stop";
  return manager_reason;
}

bridge::AssistantOutput ChatOutputOf(const bridge::Tokenizer& tokenizer, const std::vector<int32_t>& tokens,
                                     const TurnMeta& meta, const std::string& matched_stop) {
  bridge::AssistantOutput out =
      meta.dsml ? bridge::dsml::ParseOutput(tokenizer.Decode(tokens, bridge::SpecialText::kName), meta.thinking, meta.call_ids)
                : bridge::ParseAssistantOutput(tokenizer, tokens, meta.call_ids);
  out.content = StripStop(std::move(out.content), matched_stop);
  return out;
}

json ChatCompletionJson(const TurnMeta& meta, const bridge::AssistantOutput& output, const LiveTurn& turn) {
  const session::TurnResult& result = turn.result();
  const std::string& matched_stop = turn.matched_stop();
  json j = Base(meta, "chat.completion");
  j["choices"] = json::array(
      {{{"index", 0},
        {"message", bridge::AssistantMessageJson(output)},
        {"logprobs", nullptr},
        {"finish_reason", FinishReasonOf(!output.tool_calls.empty(), matched_stop, result.finish_reason)}}});
  j["usage"] = UsageJson(result.accounting, int64_t(result.output.size()));
  j["cedar"] = CedarJson(result.accounting, meta.session_id, turn);
  return j;
}

std::string CompletionTextOf(const bridge::Tokenizer& tokenizer, const std::vector<int32_t>& tokens,
                             const TurnMeta& meta, const std::string& matched_stop) {
  std::vector<int32_t> shown;
  for (int32_t id : tokens)
    if (!IsStopId(meta, id)) shown.push_back(id);
  return StripStop(tokenizer.Decode(shown, bridge::SpecialText::kName), matched_stop);
}

json CompletionJson(const TurnMeta& meta, const std::string& text, const LiveTurn& turn) {
  const session::TurnResult& result = turn.result();
  const std::string& matched_stop = turn.matched_stop();
  json j = Base(meta, "text_completion");
  j["choices"] = json::array({{{"index", 0},
                               {"text", text},
                               {"logprobs", nullptr},
                               {"finish_reason", FinishReasonOf(false, matched_stop, result.finish_reason)}}});
  j["usage"] = UsageJson(result.accounting, int64_t(result.output.size()));
  j["cedar"] = CedarJson(result.accounting, meta.session_id, turn);
  return j;
}

std::string SseEvent(const json& event) {
  return "data: " + event.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
}

std::shared_ptr<BodySource> MakeTurnStream(std::shared_ptr<LiveTurn> turn, const bridge::Tokenizer& tokenizer,
                                           TurnMeta meta, bool chat, std::vector<std::string> stop) {
  std::unique_ptr<ChunkFormatter> format;
  if (chat) format = std::make_unique<ChatChunks>(tokenizer, meta, std::move(stop));
  else format = std::make_unique<CompletionChunks>(tokenizer, meta, std::move(stop));
  return std::make_shared<TurnStream>(std::move(turn), std::move(format), std::move(meta), chat);
}

}  // namespace cedar::server
