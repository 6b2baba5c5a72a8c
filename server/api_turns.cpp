// Api: the turn endpoints, /v1/chat/completions and /v1/completions.
//
// A turn: parse and validate the body; (chat) reattach the generated ids of assistant messages
// this server produced (generation_memory.h) and render the generation prompt; check the
// length; submit to the session manager through a LiveTurn; then either wait and answer with
// one JSON object, or answer at once with an SSE stream the transport pulls from while a
// worker waits for the turn's end (HttpResponse::complete).
#include <spdlog/spdlog.h>

#include "server/api.h"
#include "server/api_error.h"
#include "server/request_parse.h"
#include "server/tenant.h"

namespace cedar::server {

using nlohmann::json;

Api::TurnPlan Api::PlanTurn(const GenerationParams& params, std::vector<int32_t> prompt, bool chat,
                            const HttpRequest& request, const json& body) {
  const ModelConfig& c = manager_.model().config();
  if (int64_t(prompt.size()) >= c.max_seq_len) {
    throw FromErrorKind(session::ErrorKind::kPromptTooLong,
                        "the prompt is " + std::to_string(prompt.size()) + " tokens; the model's limit (max_seq_len) is " +
                            std::to_string(c.max_seq_len) + " positions, prompt and output together",
                        chat ? "messages" : "prompt");
  }
  const std::string cache_salt = ParseCacheSalt(body);
  TurnPlan plan;
  plan.chat = chat;
  plan.stream = params.stream;
  plan.stop = params.stop;
  session::TurnRequest& r = plan.request;
  r.session_id = params.session_id;
  r.prompt = std::move(prompt);
  r.max_tokens = params.max_tokens.value_or(options_.default_max_tokens);
  r.sampling = params.sampling;
  r.decoder = options_.decoder_policy;
  r.restore = options_.restore_policy;
  r.owner = request.tenant;  // its session is looked up among the tenant's own
  r.tenant = CachePartition(request.tenant, cache_salt);
  if (!params.ignore_eos) {
    const auto ids = template_.stop_ids();
    r.stop_tokens.assign(ids.begin(), ids.end());
  }
  TurnMeta& m = plan.meta;
  m.id = NewId(chat ? "chatcmpl-" : "cmpl-");
  m.created = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  m.model = options_.model_name;
  m.session_id = params.session_id;
  m.ignore_eos = params.ignore_eos;
  m.include_usage = params.include_usage;
  m.stop_ids = r.stop_tokens;
  // Call ids unique across the conversation: the response id's random part names the turn.
  m.call_ids.prefix = "call_" + m.id.substr(m.id.find('-') + 1, 12) + "_";
  return plan;
}

HttpResponse Api::ChatCompletions(const HttpRequest& request, std::chrono::steady_clock::time_point start) {
  RequireNotDraining();
  const json body = ParseJsonBody(request.body);
  ChatRequest chat = ParseChatRequest(body, request);
  std::vector<int32_t> prompt;
  try {
    memory_.Reattach(Scope(request.tenant, chat.params.session_id), template_, chat.messages, chat.tools);
    prompt = template_.RenderGenerationPrompt(chat.messages, chat.tools);
  } catch (const bridge::ChatTemplateError& e) {
    throw InvalidRequest(e.what(), e.param());
  }
  return RunTurn(PlanTurn(chat.params, std::move(prompt), true, request, body), request, "/v1/chat/completions", start);
}

HttpResponse Api::Completions(const HttpRequest& request, std::chrono::steady_clock::time_point start) {
  RequireNotDraining();
  const json body = ParseJsonBody(request.body);
  CompletionRequest cr = ParseCompletionRequest(body, request);
  std::vector<int32_t> prompt = cr.prompt_text ? tokenizer_.Encode(*cr.prompt_text) : std::move(cr.prompt_ids);
  for (int32_t id : prompt) {
    if (!tokenizer_.InVocab(id)) {
      throw InvalidRequest("prompt: token id " + std::to_string(id) + " is outside the vocabulary (size " +
                               std::to_string(tokenizer_.vocab_size()) + ")",
                           "prompt");
    }
  }
  return RunTurn(PlanTurn(cr.params, std::move(prompt), false, request, body), request, "/v1/completions", start);
}

HttpResponse Api::RunTurn(TurnPlan plan, const HttpRequest& request, const std::string& route,
                          std::chrono::steady_clock::time_point start) {
  std::shared_ptr<LiveTurn> turn = WithManager([&](session::SessionManager& m) {
    return LiveTurn::Submit(m, plan.request, tokenizer_, plan.stop, request.cancelled);
  });
  const std::string prompt_param = plan.chat ? "messages" : "prompt";
  if (auto refused = turn->RefusedAtOnce(); refused && refused->error_kind != session::ErrorKind::kNone) {
    throw FromErrorKind(refused->error_kind, refused->error, prompt_param);
  }
  if (!plan.stream) {
    const session::TurnResult& r = turn->Wait();
    if (r.error_kind != session::ErrorKind::kNone) throw FromErrorKind(r.error_kind, r.error, prompt_param);
    Finished(plan, *turn);
    if (plan.chat) {
      const bridge::AssistantOutput out = ChatOutputOf(tokenizer_, r.output, plan.meta, turn->matched_stop());
      return JsonResponse(200, ChatCompletionJson(plan.meta, out, *turn));
    }
    return JsonResponse(
        200, CompletionJson(plan.meta, CompletionTextOf(tokenizer_, r.output, plan.meta, turn->matched_stop()), *turn));
  }
  HttpResponse response;
  response.content_type = "text/event-stream";
  response.headers = {{"Cache-Control", "no-cache"}, {"X-Accel-Buffering", "no"}};
  response.stream = MakeTurnStream(turn, tokenizer_, plan.meta, plan.chat, plan.stop);
  auto shared_plan = std::make_shared<TurnPlan>(std::move(plan));
  response.complete = [this, turn, shared_plan, route, start] {
    const session::TurnResult& r = turn->Wait();
    if (r.error_kind == session::ErrorKind::kNone) Finished(*shared_plan, *turn);
    metrics_.Request(route, 200, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    turn->Publish();  // only now the stream's last events go out
  };
  return response;
}

// A turn that ended without error: remember what it generated (chat) and count what the
// client was told, unless the client went away.
void Api::Finished(const TurnPlan& plan, LiveTurn& turn) {
  const session::TurnResult& r = turn.result();
  if (turn.cancelled()) return;
  std::string finish;
  if (plan.chat) {
    const bridge::AssistantOutput out = ChatOutputOf(tokenizer_, r.output, plan.meta, turn.matched_stop());
    memory_.Remember(Scope(plan.request.owner, plan.request.session_id), plan.request.prompt, bridge::ToMessage(out), r.output);
    finish = FinishReasonOf(!out.tool_calls.empty(), turn.matched_stop(), r.finish_reason);
  } else {
    finish = FinishReasonOf(false, turn.matched_stop(), r.finish_reason);
  }
  metrics_.Turn(r.accounting, int64_t(r.output.size()), finish);
}

}  // namespace cedar::server
