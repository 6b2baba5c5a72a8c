// Api: the turn endpoints, /v1/chat/completions and /v1/completions.
//
// A turn: parse and validate the body; (chat) reattach the generated ids of assistant messages
// this server produced (generation_memory.h) and render the generation prompt; check the
// length; submit to the session manager through a LiveTurn; then either wait and answer with
// one JSON object, or answer at once with an SSE stream the transport pulls from while a
// worker waits for the turn's end (HttpResponse::complete).
#include <spdlog/spdlog.h>

#include <xxhash.h>

#include <algorithm>
#include <cstdio>

#include "tools_bridge/lib/json_limits.h"
#include "tools_bridge/lib/openai_json.h"
#include "tools_bridge/lib/tool_call_grammar.h"

#include "server/api.h"
#include "server/api_error.h"
#include "server/logprobs_json.h"
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
  for (int32_t id : prompt) {
    if (std::binary_search(image_ids_.begin(), image_ids_.end(), id)) {
      throw InvalidRequest(std::string(chat ? "messages" : "prompt") + ": the prompt holds the image token " +
                               std::string(*tokenizer_.SpecialName(id)) + " (id " + std::to_string(id) +
                               "); image input is not supported (Cedar serves the text model: vision is out of scope)",
                           chat ? "messages" : "prompt");
    }
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
  // Without `seed` every turn samples afresh, as OpenAI, vLLM and llama.cpp do (a client that
  // retries a sampled request expects another answer); `cedar.seed` names the one drawn, below
  // 2^53 so that a JavaScript client reads it back exactly (ApiOptions::seed: reproducible).
  if (!params.seeded) {
    std::lock_guard<std::mutex> lk(mu_);
    r.sampling.seed = seed_rng_() >> 11;
  }
  for (const auto& [id, bias] : params.adjust.bias)
    if (!tokenizer_.InVocab(id))
      throw InvalidRequest("logit_bias: token id " + std::to_string(id) + " is outside the vocabulary (size " +
                               std::to_string(tokenizer_.vocab_size()) + ")",
                           "logit_bias");
  r.adjust = params.adjust;
  r.top_logprobs = params.top_logprobs;
  r.priority = params.priority;
  r.decoder = options_.decoder_policy;
  r.restore = options_.restore_policy;
  r.owner = request.tenant;  // its session is looked up among the tenant's own
  r.tenant = CachePartition(request.tenant, cache_salt);
  if (!params.ignore_eos) {
    if (dsml_) {
      r.stop_tokens = {dsml_->eos_id()};  // the released format ends a turn with <｜end▁of▁sentence｜>
    } else {
      const auto ids = template_->stop_ids();
      r.stop_tokens.assign(ids.begin(), ids.end());
    }
  }
  TurnMeta& m = plan.meta;
  m.id = NewId(chat ? "chatcmpl-" : "cmpl-");
  m.created = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  m.model = options_.model_name;
  m.session_id = params.session_id;
  m.ignore_eos = params.ignore_eos;
  m.include_usage = params.include_usage;
  m.stop_ids = r.stop_tokens;
  m.top_logprobs = params.top_logprobs;
  m.return_token_ids = params.return_token_ids;
  if (m.return_token_ids) m.prompt_ids = r.prompt;
  m.call_ids.prefix = "call_" + CallIdStem(r.prompt, r.sampling.seed) + "_";
  return plan;
}

std::string Api::CallIdStem(std::span<const int32_t> prompt, uint64_t seed) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", (unsigned long long)XXH3_64bits_withSeed(prompt.data(), prompt.size_bytes(), seed));
  return std::string(buf, 12);
}

namespace {

// The request's `tools` with the client's key order (part of the prompt bytes in the released
// encoding), parsed again from the body text keeping only that field. The body already parsed
// once (depth-checked), so this cannot fail.
nlohmann::ordered_json OrderedTools(const std::string& raw_body) {
  using ojson = nlohmann::ordered_json;
  const ojson::parser_callback_t keep_tools = [](int depth, ojson::parse_event_t event, ojson& parsed) {
    return !(depth == 1 && event == ojson::parse_event_t::key && parsed != "tools");
  };
  const ojson body = ojson::parse(raw_body, keep_tools, false);
  if (!body.is_object()) return nullptr;
  auto it = body.find("tools");
  return it == body.end() ? ojson(nullptr) : *it;
}

// deepseek_v41 encoder settings from the request: `thinking` (true/false, or DeepSeek's
// {"type": "enabled"|"disabled"}) or chat_template_kwargs.thinking (vLLM, SGLang);
// `reasoning_effort` ("low", "high", "max" or "1".."100") at the top level or in
// chat_template_kwargs.
bridge::dsml::Options DsmlOptionsOf(const nlohmann::json& body) {
  bridge::dsml::Options o;
  auto thinking = [&](const nlohmann::json& v, const std::string& field) {
    if (v.is_boolean()) return v.get<bool>();
    if (v.is_object() && v.contains("type") && v["type"].is_string()) {
      const std::string t = v["type"].get<std::string>();
      if (t == "enabled" || t == "disabled") return t == "enabled";
    }
    throw InvalidRequest(field + ": expected true, false or {\"type\": \"enabled\"|\"disabled\"}, found " +
                             bridge::JsonPreview(v),
                         field);
  };
  auto effort = [&](const nlohmann::json& v, const std::string& field) {
    if (v.is_null()) return;
    std::string text = v.is_string() ? v.get<std::string>() : v.is_number_integer() ? v.dump() : "";
    if (text.empty()) throw InvalidRequest(field + ": expected \"low\", \"high\", \"max\" or 1..100", field);
    try {
      o.reasoning_effort = bridge::dsml::ParseReasoningEffort(text);
    } catch (const bridge::ChatTemplateError& e) {
      throw InvalidRequest(field + ": " + e.what(), field);
    }
  };
  if (auto it = body.find("chat_template_kwargs"); it != body.end() && it->is_object()) {
    if (auto t = it->find("thinking"); t != it->end()) o.thinking = thinking(*t, "chat_template_kwargs.thinking");
    if (auto e = it->find("reasoning_effort"); e != it->end()) effort(*e, "chat_template_kwargs.reasoning_effort");
  }
  if (auto t = body.find("thinking"); t != body.end() && !t->is_null()) o.thinking = thinking(*t, "thinking");
  if (auto e = body.find("reasoning_effort"); e != body.end()) effort(*e, "reasoning_effort");
  return o;
}

}  // namespace

Api::ChatPrompt Api::RenderChat(const nlohmann::json& body, const std::string& raw_body, ChatRequest& chat,
                                const std::string& scope, bool count) {
  return RenderChat(body, dsml_ ? OrderedTools(raw_body) : nlohmann::ordered_json(), chat, scope, count);
}

Api::ChatPrompt Api::RenderChat(const nlohmann::json& body, const nlohmann::ordered_json& ordered_tools,
                                ChatRequest& chat, const std::string& scope, bool count) {
  ChatPrompt out;
  try {
    if (dsml_) {
      DsmlPrompt p = dsml_->Render(scope, chat.messages, ordered_tools, DsmlOptionsOf(body));
      if (count) metrics_.Replays(p.exact, p.canonical);
      out.ids = p.ids;
      out.dsml = std::move(p);
    } else {
      const int assistants = int(std::count_if(chat.messages.begin(), chat.messages.end(), [](const bridge::Message& m) {
        return m.role == bridge::Role::kAssistant;
      }));
      const int exact = memory_.Reattach(scope, *template_, chat.messages, chat.tools);
      if (count) metrics_.Replays(exact, assistants - exact);
      out.ids = template_->RenderGenerationPrompt(chat.messages, chat.tools);
    }
  } catch (const bridge::ChatTemplateError& e) {
    throw InvalidRequest(e.what(), e.param());
  }
  return out;
}

std::vector<int32_t> Api::ChatPromptIds(const std::string& body) {
  HttpRequest request;
  request.method = "POST";
  request.target = "/v1/chat/completions";
  request.body = body;
  const nlohmann::json parsed = ParseJsonBody(body);
  ChatRequest chat = ParseChatRequest(parsed, request);
  return RenderChat(parsed, body, chat, Scope(request.tenant, chat.params.session_id), false).ids;
}

HttpResponse Api::ChatCompletions(const HttpRequest& request, std::chrono::steady_clock::time_point start) {
  RequireNotDraining();
  const nlohmann::json body = ParseJsonBody(request.body);
  ChatRequest chat = ParseChatRequest(body, request);
  OutputRequest output;  // tool_choice, parallel_tool_calls, response_format: enforced by a grammar
  output.response_format = ParseResponseFormat(body);
  output.parallel_tool_calls = ParseParallelToolCalls(body);
  ChatPrompt prompt = RenderChat(body, request.body, chat, Scope(request.tenant, chat.params.session_id), true);
  TurnPlan plan = PlanTurn(chat.params, std::move(prompt.ids), true, request, body);
  if (prompt.dsml) {
    plan.meta.dsml = true;
    plan.meta.thinking = prompt.dsml->thinking;
    prompt.dsml->ids.clear();  // the key is the text; the ids are in plan.request.prompt
    plan.dsml = std::move(prompt.dsml);
  }
  output.format = format_;
  output.thinking = plan.meta.thinking;
  output.tools = chat.tools;
  output.tool_choice = chat.tool_choice;
  plan.request.logits_processor = MakeOutputProcessor(output, GrammarVocab(), plan.request.stop_tokens);
  return RunTurn(std::move(plan), request, "/v1/chat/completions", start);
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
  OutputRequest output;
  output.chat = false;
  output.response_format = ParseResponseFormat(body);
  TurnPlan plan = PlanTurn(cr.params, std::move(prompt), false, request, body);
  plan.request.logits_processor = MakeOutputProcessor(output, GrammarVocab(), plan.request.stop_tokens);
  return RunTurn(std::move(plan), request, "/v1/completions", start);
}

std::shared_ptr<const grammar::TokenVocab> Api::GrammarVocab() {
  std::call_once(grammar_vocab_once_, [&] { grammar_vocab_ = bridge::GrammarVocabOf(tokenizer_); });
  return grammar_vocab_;
}

HttpResponse Api::RunTurn(TurnPlan plan, const HttpRequest& request, const std::string& route,
                          std::chrono::steady_clock::time_point start) {
  std::shared_ptr<LiveTurn> turn = WithManager([&](session::SessionManager& m) {
    return LiveTurn::Submit(m, plan.request, tokenizer_, plan.stop, request.cancelled);
  });
  const std::string prompt_param = plan.chat ? "messages" : "prompt";
  if (auto refused = turn->RefusedAtOnce(); refused && refused->error_kind != session::ErrorKind::kNone) {
    ApiError e = FromErrorKind(refused->error_kind, refused->error, prompt_param);
    if (refused->error_kind == session::ErrorKind::kQueueFull)
      e.retry_after_s = WithManager([](session::SessionManager& m) { return RetryAfterSeconds(m.Metrics()); });
    throw e;
  }
  if (!plan.stream) {
    const session::TurnResult& r = turn->Wait();
    if (r.error_kind != session::ErrorKind::kNone) throw FromErrorKind(r.error_kind, r.error, prompt_param);
    Finished(plan, *turn);
    AccessLog(request, route, 200, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), &r,
              plan.meta.session_id);
    // Issue 19's extras on the one choice: logprobs of the shown tokens, token ids.
    const std::vector<TokenLogprobs> shown =
        plan.meta.top_logprobs >= 0 ? ShownLogprobs(r.output, r.logprobs, plan.meta.stop_ids) : std::vector<TokenLogprobs>{};
    if (plan.chat) {
      const bridge::AssistantOutput out = ChatOutputOf(tokenizer_, r.output, plan.meta, turn->matched_stop());
      json j = ChatCompletionJson(plan.meta, out, *turn);
      if (plan.meta.top_logprobs >= 0)
        j["choices"][0]["logprobs"] = {{"content", ChatLogprobEntries(tokenizer_, shown)}, {"refusal", nullptr}};
      return JsonResponse(200, j);
    }
    json j = CompletionJson(plan.meta, CompletionTextOf(tokenizer_, r.output, plan.meta, turn->matched_stop()), *turn);
    if (plan.meta.top_logprobs >= 0) j["choices"][0]["logprobs"] = CompletionLogprobs(tokenizer_, shown);
    if (plan.meta.return_token_ids) {
      j["choices"][0]["token_ids"] = r.output;
      j["choices"][0]["prompt_token_ids"] = plan.meta.prompt_ids;
    }
    return JsonResponse(200, j);
  }
  HttpResponse response;
  response.content_type = "text/event-stream";
  response.headers = {{"Cache-Control", "no-cache"}, {"X-Accel-Buffering", "no"}};
  response.stream = MakeTurnStream(turn, tokenizer_, plan.meta, plan.chat, plan.stop);
  auto shared_plan = std::make_shared<TurnPlan>(std::move(plan));
  auto log_request = std::make_shared<HttpRequest>();  // what the access log names (no body)
  log_request->method = request.method;
  log_request->target = request.target;
  response.complete = [this, turn, shared_plan, route, start, log_request] {
    const session::TurnResult& r = turn->Wait();
    if (r.error_kind == session::ErrorKind::kNone) Finished(*shared_plan, *turn);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    metrics_.Request(route, 200, seconds);
    AccessLog(*log_request, route, 200, seconds, &r, shared_plan->meta.session_id);
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
    const std::string scope = Scope(plan.request.owner, plan.request.session_id);
    if (plan.dsml) {
      bridge::Message shown = bridge::ToMessage(out);
      shown.reasoning = out.reasoning;
      dsml_->Remember(scope, *plan.dsml, shown, r.output);
    } else {
      memory_.Remember(scope, plan.request.prompt, bridge::ToMessage(out), r.output);
    }
    finish = FinishReasonOf(!out.tool_calls.empty(), turn.matched_stop(), r.finish_reason);
  } else {
    finish = FinishReasonOf(false, turn.matched_stop(), r.finish_reason);
  }
  metrics_.Turn(r.accounting, int64_t(r.output.size()), finish);
  metrics_.InterTokenGaps(turn.token_gaps());
}

}  // namespace cedar::server
