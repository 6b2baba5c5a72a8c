// Api: Anthropic's Messages API, POST /v1/messages and /v1/messages/count_tokens
// (docs/SERVER.md, "Anthropic Messages").
//
// The body becomes a chat-completions body (tools_bridge/lib/anthropic_json.h) and runs as a
// chat turn: the same template, replay memory (tool_use ids are the call ids the replay memory
// keys on), grammar (tool_choice any/tool/none) and sessions (session_id or X-Session-Id) as
// /v1/chat/completions. Errors come in Anthropic's shape.
#include <spdlog/spdlog.h>

#include "tools_bridge/lib/anthropic_json.h"
#include "tools_bridge/lib/json_limits.h"
#include "server/api.h"
#include "server/api_error.h"
#include "server/event_stream.h"
#include "server/request_parse.h"

namespace cedar::server {
namespace {

using nlohmann::json;
using ojson = nlohmann::ordered_json;

// Anthropic counts input_tokens apart from the tokens read from the cache: the prompt is
// input_tokens + cache_read_input_tokens (+ cache_creation_input_tokens, always 0 here: Cedar
// caches every prompt without being asked).
json AnthropicUsage(const session::TurnAccounting& a, int64_t output_tokens) {
  return {{"input_tokens", a.prompt_tokens - a.cached_tokens()},
          {"cache_creation_input_tokens", 0},
          {"cache_read_input_tokens", a.cached_tokens()},
          {"output_tokens", output_tokens}};
}

struct MessageEcho {
  std::string id, model, session_id;
};

class MessagesEvents final : public EventFormatter {
 public:
  MessagesEvents(MessageEcho echo, int64_t prompt_tokens) : echo_(std::move(echo)), prompt_tokens_(prompt_tokens) {}

  std::string Start() override {
    json message = {{"id", echo_.id},
                    {"type", "message"},
                    {"role", "assistant"},
                    {"model", echo_.model},
                    {"content", json::array()},
                    {"stop_reason", nullptr},
                    {"stop_sequence", nullptr},
                    // Where the prompt came from is known at the turn's end (message_delta).
                    {"usage", {{"input_tokens", prompt_tokens_}, {"cache_creation_input_tokens", 0},
                               {"cache_read_input_tokens", 0}, {"output_tokens", 0}}}};
    return NamedSseEvent("message_start", {{"type", "message_start"}, {"message", std::move(message)}}) +
           NamedSseEvent("ping", {{"type", "ping"}});
  }

  std::string Deltas(const std::vector<bridge::StreamDelta>& deltas) override {
    std::string out;
    for (const bridge::StreamDelta& d : deltas) {
      switch (d.kind) {
        case bridge::StreamDelta::Kind::kContent:
          if (open_ != "text") {
            out += Close();  // (separate statements: the operands of + are unsequenced)
            out += OpenBlock("text", {{"type", "text"}, {"text", ""}});
          }
          out += Delta({{"type", "text_delta"}, {"text", d.text}});
          break;
        case bridge::StreamDelta::Kind::kReasoning:
          if (open_ != "thinking") {
            out += Close();
            out += OpenBlock("thinking", {{"type", "thinking"}, {"thinking", ""}, {"signature", ""}});
          }
          out += Delta({{"type", "thinking_delta"}, {"thinking", d.text}});
          break;
        case bridge::StreamDelta::Kind::kToolCallStart:
          out += Close();
          out += OpenBlock("tool_use", {{"type", "tool_use"}, {"id", d.id}, {"name", d.name}, {"input", json::object()}});
          break;
        case bridge::StreamDelta::Kind::kToolCallArguments:
          out += Delta({{"type", "input_json_delta"}, {"partial_json", d.text}});
          break;
      }
    }
    return out;
  }

  std::string Finish(const LiveTurn& turn, int64_t output_tokens, bool has_tool_calls) override {
    std::string out = Close();
    if (!answered_) {  // as the whole response: an (empty) text block when no text or call came
      out += OpenBlock("text", {{"type", "text"}, {"text", ""}});
      out += Close();
    }
    const session::TurnResult& r = turn.result();
    const std::string& matched = turn.matched_stop();
    json delta = {{"stop_reason", bridge::AnthropicStopReason(has_tool_calls, matched, r.finish_reason)},
                  {"stop_sequence", matched.empty() ? json(nullptr) : json(matched)}};
    out += NamedSseEvent("message_delta", {{"type", "message_delta"},
                                           {"delta", std::move(delta)},
                                           {"usage", AnthropicUsage(r.accounting, output_tokens)},
                                           {"cedar", CedarJson(r.accounting, echo_.session_id, turn)}});
    return out + NamedSseEvent("message_stop", {{"type", "message_stop"}});
  }

  std::string Error(const session::TurnResult& r) override {
    const ApiError e = FromErrorKind(r.error_kind, r.error);
    return NamedSseEvent("error", AnthropicErrorJson(e.status, r.error));
  }

 private:
  std::string OpenBlock(const char* kind, json block) {
    open_ = kind;
    if (open_ != "thinking") answered_ = true;
    return NamedSseEvent("content_block_start",
                         {{"type", "content_block_start"}, {"index", blocks_}, {"content_block", std::move(block)}});
  }
  std::string Delta(json delta) {
    return NamedSseEvent("content_block_delta", {{"type", "content_block_delta"}, {"index", blocks_}, {"delta", std::move(delta)}});
  }
  std::string Close() {
    if (open_.empty()) return {};
    open_.clear();
    return NamedSseEvent("content_block_stop", {{"type", "content_block_stop"}, {"index", blocks_++}});
  }

  MessageEcho echo_;
  int64_t prompt_tokens_;
  std::string open_;  // the open block's type ("" = none)
  int blocks_ = 0;    // the open block's index; blocks closed so far
  bool answered_ = false;  // a text or tool_use block was opened
};

ApiError MethodNotAllowed(const HttpRequest& request) {
  return ApiError(405, "invalid_request_error", "method_not_allowed", request.method + " is not supported here (allowed: POST)");
}

ojson ConvertedBody(const std::string& raw, bool for_count) {
  ParseJsonBody(raw);  // the bounded parse: depth, numbers, syntax (400 naming the field)
  try {
    return bridge::AnthropicToChatBody(ojson::parse(raw), for_count);
  } catch (const bridge::AnthropicError& e) {
    throw InvalidRequest(e.what(), e.param());
  }
}

}  // namespace

json AnthropicErrorJson(int status, const std::string& message) {
  const char* type = status == 400 || status == 405 || status == 409 ? "invalid_request_error"
                     : status == 401                                ? "authentication_error"
                     : status == 403                                ? "permission_error"
                     : status == 404                                ? "not_found_error"
                     : status == 413                                ? "request_too_large"
                     : status == 429                                ? "rate_limit_error"
                     : status == 503                                ? "overloaded_error"
                                                                    : "api_error";
  return {{"type", "error"}, {"error", {{"type", type}, {"message", message}}}};
}

HttpResponse AnthropicErrorResponse(const ApiError& error) {
  HttpResponse r = JsonResponse(error.status, AnthropicErrorJson(error.status, error.what()));
  if (error.retry_after_s > 0) r.headers.emplace_back("Retry-After", std::to_string(error.retry_after_s));
  // 409 session_busy: a retry would meet the same turn in flight.
  if (error.status == 409) r.headers.emplace_back("x-should-retry", "false");
  return r;
}

HttpResponse Api::Messages(const HttpRequest& request, std::chrono::steady_clock::time_point start) {
  try {
    if (request.method != "POST") throw MethodNotAllowed(request);
    if (request.target.substr(0, request.target.find('?')) == "/v1/messages/count_tokens") return CountTokens(request);
    return MessagesTurn(request, start);
  } catch (const ApiError& e) {
    return AnthropicErrorResponse(e);
  } catch (const std::exception& e) {
    return AnthropicErrorResponse(InternalError(std::string("/v1/messages: ") + e.what()));
  }
}

HttpResponse Api::CountTokens(const HttpRequest& request) {
  const ojson chat = ConvertedBody(request.body, true);
  const json body = json::parse(chat.dump());
  ChatRequest parsed = ParseChatRequest(body, request);
  const auto tools_it = chat.find("tools");
  const ojson tools = tools_it == chat.end() ? ojson() : *tools_it;
  // count = false: a count is no turn, so no replay is counted in /metrics.
  const ChatPrompt prompt = RenderChat(body, tools, parsed, Scope(request.tenant, parsed.params.session_id), false);
  return JsonResponse(200, {{"input_tokens", prompt.ids.size()}});
}

HttpResponse Api::MessagesTurn(const HttpRequest& request, std::chrono::steady_clock::time_point start) {
  RequireNotDraining();
  const ojson chat = ConvertedBody(request.body, false);
  TurnPlan plan = PlanChatBody(chat, request, "msg_", "toolu_");
  MessageEcho echo{plan.meta.id, plan.meta.model, plan.meta.session_id};
  if (auto it = chat.find("model"); it != chat.end() && it->is_string()) echo.model = it->get<std::string>();
  std::shared_ptr<LiveTurn> turn = SubmitTurn(plan, request);
  if (!plan.stream) {
    const session::TurnResult& r = turn->Wait();
    if (r.error_kind != session::ErrorKind::kNone) throw FromErrorKind(r.error_kind, r.error, "messages");
    Finished(plan, *turn);
    const bridge::AssistantOutput out = ChatOutputOf(tokenizer_, r.output, plan.meta, turn->matched_stop());
    const std::string& matched = turn->matched_stop();
    return JsonResponse(200, {{"id", echo.id},
                              {"type", "message"},
                              {"role", "assistant"},
                              {"model", echo.model},
                              {"content", bridge::AnthropicContentJson(out)},
                              {"stop_reason", bridge::AnthropicStopReason(!out.tool_calls.empty(), matched, r.finish_reason)},
                              {"stop_sequence", matched.empty() ? json(nullptr) : json(matched)},
                              {"usage", AnthropicUsage(r.accounting, int64_t(r.output.size()))},
                              {"cedar", CedarJson(r.accounting, echo.session_id, *turn)}});
  }
  HttpResponse response;
  response.content_type = "text/event-stream";
  response.headers = {{"Cache-Control", "no-cache"}, {"X-Accel-Buffering", "no"}};
  response.stream = MakeEventStream(turn, tokenizer_, plan.meta, plan.stop,
                                    std::make_unique<MessagesEvents>(echo, int64_t(plan.request.prompt.size())));
  auto shared_plan = std::make_shared<TurnPlan>(std::move(plan));
  response.complete = [this, turn, shared_plan, start] {
    const session::TurnResult& r = turn->Wait();
    if (r.error_kind == session::ErrorKind::kNone) Finished(*shared_plan, *turn);
    metrics_.Request("/v1/messages", 200, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    turn->Publish();
  };
  return response;
}

}  // namespace cedar::server
