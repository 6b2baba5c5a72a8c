// Api: OpenAI's Responses API, POST /v1/responses (docs/SERVER.md, "Responses").
//
// The body becomes a chat-completions body (tools_bridge/lib/responses_json.h) and runs as a
// chat turn. `store` (default true) keeps the response's conversation under its id
// (response_store.h) and runs the chain on a session of its own, so a request that names it in
// `previous_response_id` and sends only its new items continues that session's live state:
// the cached tokens cover the whole previous context. GET /v1/responses/{id} answers the stored
// response object again; DELETE forgets it (and its items).
#include <spdlog/spdlog.h>

#include "tools_bridge/lib/json_limits.h"
#include "tools_bridge/lib/responses_json.h"
#include "server/api.h"
#include "server/api_error.h"
#include "server/event_stream.h"
#include "server/request_parse.h"
#include "server/session_ids.h"
#include "server/tenant.h"

namespace cedar::server {
namespace {

using nlohmann::json;
using ojson = nlohmann::ordered_json;

json ResponsesUsage(const session::TurnAccounting& a, int64_t output_tokens) {
  return {{"input_tokens", a.prompt_tokens},
          {"input_tokens_details", {{"cached_tokens", a.cached_tokens()}}},
          {"output_tokens", output_tokens},
          {"output_tokens_details", {{"reasoning_tokens", 0}}},
          {"total_tokens", a.prompt_tokens + output_tokens}};
}

// What the request asked for, echoed in every response object.
struct Echo {
  std::string id, model, previous_response_id;
  int64_t created = 0;
  bool store = true;
  json instructions, tools, tool_choice, text, max_output_tokens, temperature, top_p, parallel_tool_calls, metadata;
};

json ResponseObject(const Echo& e, const std::string& status, json output) {
  json r = {{"id", e.id},
            {"object", "response"},
            {"created_at", e.created},
            {"status", status},
            {"error", nullptr},
            {"incomplete_details", nullptr},
            {"instructions", e.instructions},
            {"max_output_tokens", e.max_output_tokens},
            {"model", e.model},
            {"output", std::move(output)},
            {"parallel_tool_calls", e.parallel_tool_calls.is_null() ? json(true) : e.parallel_tool_calls},
            {"previous_response_id", e.previous_response_id.empty() ? json(nullptr) : json(e.previous_response_id)},
            {"reasoning", {{"effort", nullptr}, {"summary", nullptr}}},
            {"store", e.store},
            {"temperature", e.temperature.is_null() ? json(1.0) : e.temperature},
            {"text", e.text.is_null() ? json{{"format", {{"type", "text"}}}} : e.text},
            {"tool_choice", e.tool_choice.is_null() ? json("auto") : e.tool_choice},
            {"tools", e.tools.is_null() ? json::array() : e.tools},
            {"top_p", e.top_p.is_null() ? json(1.0) : e.top_p},
            {"truncation", "disabled"},
            {"usage", nullptr},
            {"metadata", e.metadata.is_null() ? json::object() : e.metadata}};
  return r;
}

// The finished response: status, output, usage, incomplete_details, cedar.
json FinishedResponse(const Echo& e, json output, const LiveTurn& turn, int64_t output_tokens, const std::string& session_id) {
  const session::TurnResult& r = turn.result();
  const bool cut = r.finish_reason == "length" || r.finish_reason == "cancelled";
  json j = ResponseObject(e, cut ? "incomplete" : "completed", std::move(output));
  if (cut) j["incomplete_details"] = {{"reason", r.finish_reason == "length" ? "max_output_tokens" : "cancelled"}};
  j["usage"] = ResponsesUsage(r.accounting, output_tokens);
  j["cedar"] = CedarJson(r.accounting, session_id, turn);
  return j;
}

// The Responses event sequence for one streamed turn.
class ResponsesEvents final : public EventFormatter {
 public:
  ResponsesEvents(Echo echo, std::string session_id) : echo_(std::move(echo)), session_id_(std::move(session_id)) {
    item_id_ = echo_.id.substr(5);  // the random part of resp_...
  }

  std::string Start() override {
    std::string out = Event("response.created", {{"response", ResponseObject(echo_, "in_progress", json::array())}});
    return out + Event("response.in_progress", {{"response", ResponseObject(echo_, "in_progress", json::array())}});
  }

  std::string Deltas(const std::vector<bridge::StreamDelta>& deltas) override {
    std::string out;
    for (const bridge::StreamDelta& d : deltas) {
      switch (d.kind) {
        case bridge::StreamDelta::Kind::kContent:
          if (open_ != Open::kMessage) {
            out += Close();  // (separate statements: the operands of + are unsequenced)
            out += OpenMessage();
          }
          text_ += d.text;
          out += Event("response.output_text.delta", {{"item_id", item_["id"]},
                                                      {"output_index", index_},
                                                      {"content_index", 0},
                                                      {"delta", d.text},
                                                      {"logprobs", json::array()}});
          break;
        case bridge::StreamDelta::Kind::kReasoning:
          if (open_ != Open::kReasoning) {
            out += Close();
            out += OpenReasoning();
          }
          text_ += d.text;
          out += Event("response.reasoning_summary_text.delta",
                       {{"item_id", item_["id"]}, {"output_index", index_}, {"summary_index", 0}, {"delta", d.text}});
          break;
        case bridge::StreamDelta::Kind::kToolCallStart:
          out += Close();
          open_ = Open::kCall;
          answered_ = true;
          item_ = {{"type", "function_call"},
                   {"id", "fc_" + item_id_ + "_" + std::to_string(d.index)},
                   {"call_id", d.id},
                   {"name", d.name},
                   {"arguments", ""},
                   {"status", "in_progress"}};
          text_.clear();
          out += Event("response.output_item.added", {{"output_index", index_}, {"item", item_}});
          break;
        case bridge::StreamDelta::Kind::kToolCallArguments:
          text_ += d.text;
          out += Event("response.function_call_arguments.delta",
                       {{"item_id", item_["id"]}, {"output_index", index_}, {"delta", d.text}});
          break;
      }
    }
    return out;
  }

  std::string Finish(const LiveTurn& turn, int64_t output_tokens, bool) override {
    std::string out = Close();
    if (!answered_) {  // as the whole response: an (empty) message when no text or call came
      out += OpenMessage();
      out += Close();
    }
    return out + Event(turn.result().finish_reason == "length" ? "response.incomplete" : "response.completed",
                       {{"response", FinishedResponse(echo_, output_, turn, output_tokens, session_id_)}});
  }

  std::string Error(const session::TurnResult& r) override {
    json resp = ResponseObject(echo_, "failed", output_);
    const ApiError e = FromErrorKind(r.error_kind, r.error);
    resp["error"] = {{"code", e.code.empty() ? e.type : e.code}, {"message", r.error}};
    return Event("response.failed", {{"response", std::move(resp)}});
  }

 private:
  enum class Open { kNone, kMessage, kReasoning, kCall };

  std::string Event(const std::string& type, json data) {
    data["type"] = type;
    data["sequence_number"] = seq_++;
    return NamedSseEvent(type, data);
  }

  std::string OpenMessage() {
    open_ = Open::kMessage;
    answered_ = true;
    const int n = messages_++;
    item_ = {{"id", "msg_" + item_id_ + (n ? "_" + std::to_string(n) : "")},
             {"type", "message"},
             {"status", "in_progress"},
             {"role", "assistant"},
             {"content", json::array()}};
    text_.clear();
    std::string out = Event("response.output_item.added", {{"output_index", index_}, {"item", item_}});
    return out + Event("response.content_part.added",
                       {{"item_id", item_["id"]},
                        {"output_index", index_},
                        {"content_index", 0},
                        {"part", {{"type", "output_text"}, {"text", ""}, {"annotations", json::array()}}}});
  }

  std::string OpenReasoning() {
    open_ = Open::kReasoning;
    item_ = {{"id", "rs_" + item_id_}, {"type", "reasoning"}, {"summary", json::array()}};
    text_.clear();
    std::string out = Event("response.output_item.added", {{"output_index", index_}, {"item", item_}});
    return out + Event("response.reasoning_summary_part.added",
                       {{"item_id", item_["id"]}, {"output_index", index_}, {"summary_index", 0},
                        {"part", {{"type", "summary_text"}, {"text", ""}}}});
  }

  // Ends the open item: its .done events, then output_item.done with the whole item.
  std::string Close() {
    std::string out;
    switch (open_) {
      case Open::kNone: return out;
      case Open::kMessage: {
        const json part = {{"type", "output_text"}, {"text", text_}, {"annotations", json::array()}};
        out += Event("response.output_text.done",
                     {{"item_id", item_["id"]}, {"output_index", index_}, {"content_index", 0}, {"text", text_},
                      {"logprobs", json::array()}});
        out += Event("response.content_part.done",
                     {{"item_id", item_["id"]}, {"output_index", index_}, {"content_index", 0}, {"part", part}});
        item_["content"] = json::array({part});
        item_["status"] = "completed";
        break;
      }
      case Open::kReasoning: {
        const json part = {{"type", "summary_text"}, {"text", text_}};
        out += Event("response.reasoning_summary_text.done",
                     {{"item_id", item_["id"]}, {"output_index", index_}, {"summary_index", 0}, {"text", text_}});
        out += Event("response.reasoning_summary_part.done",
                     {{"item_id", item_["id"]}, {"output_index", index_}, {"summary_index", 0}, {"part", part}});
        item_["summary"] = json::array({part});
        break;
      }
      case Open::kCall:
        out += Event("response.function_call_arguments.done",
                     {{"item_id", item_["id"]}, {"output_index", index_}, {"arguments", text_}});
        item_["arguments"] = text_;
        item_["status"] = "completed";
        break;
    }
    out += Event("response.output_item.done", {{"output_index", index_}, {"item", item_}});
    output_.push_back(item_);
    index_++;
    open_ = Open::kNone;
    return out;
  }

  Echo echo_;
  std::string session_id_;
  std::string item_id_;
  int64_t seq_ = 0;
  Open open_ = Open::kNone;
  json item_;          // the open item
  std::string text_;   // its text (output_text, summary or arguments) so far
  int index_ = 0;      // its output_index
  int messages_ = 0;   // message items so far
  bool answered_ = false;  // a message or function_call item was opened
  json output_ = json::array();  // closed items
};

ApiError FromResponsesError(const bridge::ResponsesError& e) { return InvalidRequest(e.what(), e.param()); }

}  // namespace

void Api::ResolveItemReferences(nlohmann::ordered_json& body, uint64_t tenant) const {
  auto input = body.find("input");
  if (input == body.end() || !input->is_array()) return;
  for (size_t i = 0; i < input->size(); ++i) {
    ojson& item = (*input)[i];
    if (!item.is_object() || item.value("type", ojson()) != "item_reference") continue;
    const std::string at = "input[" + std::to_string(i) + "].id";
    auto id = item.find("id");
    if (id == item.end() || !id->is_string()) throw InvalidRequest(at + ": expected a string", at);
    std::optional<json> stored = responses_.Item(id->get<std::string>(), tenant);
    if (!stored) {
      throw ApiError(404, "invalid_request_error", "item_not_found",
                     at + ": no stored item '" + bridge::Clip(id->get<std::string>(), 80) + "'", at);
    }
    item = ojson::parse(stored->dump());
  }
}

HttpResponse Api::Responses(const HttpRequest& request, std::chrono::steady_clock::time_point start) {
  RequireNotDraining();
  ParseJsonBody(request.body);  // the bounded parse: depth, numbers, syntax (400 naming the field)
  const ojson body = ojson::parse(request.body);
  Echo echo;
  if (auto it = body.find("store"); it != body.end() && !it->is_null()) {
    if (!it->is_boolean()) throw InvalidRequest("store: expected a boolean, found " + bridge::JsonPreview(json::parse(it->dump())), "store");
    echo.store = it->get<bool>();
  }
  std::shared_ptr<const ResponseStore::Entry> previous;
  if (auto it = body.find("previous_response_id"); it != body.end() && !it->is_null()) {
    if (!it->is_string()) throw InvalidRequest("previous_response_id: expected a string", "previous_response_id");
    echo.previous_response_id = it->get<std::string>();
    previous = responses_.Get(echo.previous_response_id, request.tenant);
    if (!previous) {
      throw ApiError(404, "invalid_request_error", "previous_response_not_found",
                     "previous_response_id: no stored response '" + bridge::Clip(echo.previous_response_id, 80) +
                         "' (unknown, forgotten, created with store: false, or another tenant's)",
                     "previous_response_id");
    }
  }
  ojson body_resolved = body;
  ResolveItemReferences(body_resolved, request.tenant);
  ojson chat;
  const ojson prior = previous ? ResponseStore::Conversation(*previous) : ojson::array();
  try {
    chat = bridge::ResponsesToChatBody(body_resolved, prior);
  } catch (const bridge::ResponsesError& e) {
    throw FromResponsesError(e);
  }
  const size_t first_new = (body.contains("instructions") && !body["instructions"].is_null() ? 1 : 0) + prior.size();

  // The session: the header's, else the chain's (store), else none.
  std::string session_id;
  if (const std::string* h = request.Header("x-session-id"); h && !h->empty()) {
    session_id = *h;
  } else if (echo.store) {
    const std::string salt = ParseCacheSalt(json::parse(chat.dump()));
    if (previous && !previous->session_id.empty() &&
        WithManager([&](session::SessionManager& m) { return m.GetSession(previous->session_id, request.tenant).has_value(); })) {
      session_id = previous->session_id;
      TouchChainSession(session_id, request.tenant);
    } else {
      session_id = ChainSession(request, salt);
    }
    if (!session_id.empty()) chat["session_id"] = session_id;
  }

  TurnPlan plan = PlanChatBody(chat, request, "resp_", "call_");
  echo.id = plan.meta.id;
  echo.model = plan.meta.model;
  echo.created = plan.meta.created;
  auto copy = [&](const char* key, json& to) {
    if (auto it = body.find(key); it != body.end()) to = json::parse(it->dump());
  };
  copy("instructions", echo.instructions);
  copy("tools", echo.tools);
  copy("tool_choice", echo.tool_choice);
  copy("text", echo.text);
  copy("max_output_tokens", echo.max_output_tokens);
  copy("temperature", echo.temperature);
  copy("top_p", echo.top_p);
  copy("parallel_tool_calls", echo.parallel_tool_calls);
  copy("metadata", echo.metadata);
  if (auto it = body.find("model"); it != body.end() && it->is_string()) echo.model = it->get<std::string>();

  // After a turn: remember its output (replay) and, with store, its conversation under its id.
  auto finish = [this, chat, first_new, previous, echo, session_id, tenant = request.tenant](const TurnPlan& p,
                                                                                             LiveTurn& turn) {
    Finished(p, turn);
    if (!echo.store || turn.cancelled()) return;
    const bridge::AssistantOutput out = ChatOutputOf(tokenizer_, turn.result().output, p.meta, turn.matched_stop());
    auto entry = std::make_shared<ResponseStore::Entry>();
    entry->parent = previous;
    entry->messages = ojson::array();
    for (size_t i = first_new; i < chat["messages"].size(); ++i) entry->messages.push_back(chat["messages"][i]);
    entry->messages.push_back(bridge::ChatAssistantMessage(out));
    entry->tenant = tenant;
    entry->session_id = session_id;
    const json output = bridge::ResponsesOutputJson(out, echo.id.substr(5));
    entry->response = FinishedResponse(echo, output, turn, int64_t(turn.result().output.size()), session_id);
    for (const json& item : output) entry->item_ids.push_back(item["id"].get<std::string>());
    responses_.Put(echo.id, std::move(entry));
    for (const json& item : output) responses_.PutItem(item["id"].get<std::string>(), item, tenant);
  };

  std::shared_ptr<LiveTurn> turn = SubmitTurn(plan, request);
  if (!plan.stream) {
    const session::TurnResult& r = turn->Wait();
    if (r.error_kind != session::ErrorKind::kNone) throw FromErrorKind(r.error_kind, r.error, "input");
    finish(plan, *turn);
    const bridge::AssistantOutput out = ChatOutputOf(tokenizer_, r.output, plan.meta, turn->matched_stop());
    return JsonResponse(200, FinishedResponse(echo, bridge::ResponsesOutputJson(out, echo.id.substr(5)), *turn,
                                              int64_t(r.output.size()), session_id));
  }
  HttpResponse response;
  response.content_type = "text/event-stream";
  response.headers = {{"Cache-Control", "no-cache"}, {"X-Accel-Buffering", "no"}};
  response.stream = MakeEventStream(turn, tokenizer_, plan.meta, plan.stop, std::make_unique<ResponsesEvents>(echo, session_id));
  auto shared_plan = std::make_shared<TurnPlan>(std::move(plan));
  response.complete = [this, turn, shared_plan, finish, start] {
    const session::TurnResult& r = turn->Wait();
    if (r.error_kind == session::ErrorKind::kNone) finish(*shared_plan, *turn);
    metrics_.Request("/v1/responses", 200, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    turn->Publish();  // the stored response exists before the client reads response.completed
  };
  return response;
}

HttpResponse Api::StoredResponse(const HttpRequest& request, const std::string& path) {
  const std::string& m = request.method;  // GET or DELETE (Route answers 405 to the rest)
  const std::string raw = path.substr(std::string_view("/v1/responses/").size());
  const std::string id = PercentDecode(raw).value_or(raw);
  auto not_found = [&] {
    return ApiError(404, "invalid_request_error", "response_not_found",
                    "no stored response '" + bridge::Clip(id, 80) +
                        "' (unknown, deleted, forgotten, created with store: false, or another tenant's)");
  };
  if (m == "GET") {
    std::shared_ptr<const ResponseStore::Entry> entry = responses_.Get(id, request.tenant);
    if (!entry) throw not_found();
    return JsonResponse(200, entry->response);
  }
  if (!responses_.Delete(id, request.tenant)) throw not_found();
  return JsonResponse(200, {{"id", id}, {"object", "response"}, {"deleted", true}});
}

}  // namespace cedar::server
