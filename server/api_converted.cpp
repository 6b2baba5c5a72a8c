// Api: running a chat-completions body converted from another API (/v1/responses,
// /v1/messages) as a chat turn: the same parsing, template, replay memory, grammar and turn
// accounting as /v1/chat/completions, so the three APIs cache, replay and constrain alike.
#include <spdlog/spdlog.h>

#include <algorithm>

#include "server/api.h"
#include "server/api_error.h"
#include "server/request_parse.h"
#include "server/tenant.h"

namespace cedar::server {

Api::TurnPlan Api::PlanChatBody(const nlohmann::ordered_json& chat_body, const HttpRequest& request,
                                const char* id_prefix, const char* call_prefix) {
  const nlohmann::json body = nlohmann::json::parse(chat_body.dump());
  ChatRequest chat = ParseChatRequest(body, request);
  OutputRequest output;
  output.response_format = ParseResponseFormat(body);
  output.parallel_tool_calls = ParseParallelToolCalls(body);
  const auto tools_it = chat_body.find("tools");
  const nlohmann::ordered_json ordered_tools = tools_it == chat_body.end() ? nlohmann::ordered_json() : *tools_it;
  ChatPrompt prompt = RenderChat(body, ordered_tools, chat, Scope(request.tenant, chat.params.session_id), true);
  TurnPlan plan = PlanTurn(chat.params, std::move(prompt.ids), true, request, body);
  if (prompt.dsml) {
    plan.meta.dsml = true;
    plan.meta.thinking = prompt.dsml->thinking;
    prompt.dsml->ids.clear();
    plan.dsml = std::move(prompt.dsml);
  }
  // The response's own id shape; its calls' ids take the API's prefix (call_, toolu_) on the
  // stem PlanTurn chose.
  plan.meta.id = id_prefix + plan.meta.id.substr(plan.meta.id.find('-') + 1);
  plan.meta.call_ids.prefix = std::string(call_prefix) + CallIdStem(plan.request.prompt, plan.request.sampling.seed) + "_";
  output.format = format_;
  output.thinking = plan.meta.thinking;
  output.tools = chat.tools;
  output.tool_choice = chat.tool_choice;
  plan.request.logits_processor = MakeOutputProcessor(output, GrammarVocab(), plan.request.stop_tokens);
  return plan;
}

std::shared_ptr<LiveTurn> Api::SubmitTurn(const TurnPlan& plan, const HttpRequest& request) {
  std::shared_ptr<LiveTurn> turn = WithManager([&](session::SessionManager& m) {
    return LiveTurn::Submit(m, plan.request, tokenizer_, plan.stop, request.cancelled);
  });
  if (auto refused = turn->RefusedAtOnce(); refused && refused->error_kind != session::ErrorKind::kNone) {
    ApiError e = FromErrorKind(refused->error_kind, refused->error, "messages");
    if (refused->error_kind == session::ErrorKind::kQueueFull)
      e.retry_after_s = WithManager([](session::SessionManager& m) { return RetryAfterSeconds(m.Metrics()); });
    throw e;
  }
  return turn;
}

std::string Api::ChainSession(const HttpRequest& request, const std::string& cache_salt) {
  const cache::TenantSalt partition = CachePartition(request.tenant, cache_salt);
  std::string id;
  try {
    id = WithManager([&](session::SessionManager& m) { return m.CreateSession("", {}, 0, request.tenant, partition); });
  } catch (const session::SessionLimitError& e) {
    spdlog::debug("responses: no session for a stored chain ({}); the turn runs on the prefix cache", e.what());
    return "";
  }
  std::vector<std::pair<std::string, uint64_t>> drop;
  {
    std::lock_guard<std::mutex> lk(chain_mu_);
    chain_sessions_.emplace_back(id, request.tenant);
    while (chain_sessions_.size() > options_.responses_max_sessions) {
      drop.push_back(chain_sessions_.front());
      chain_sessions_.pop_front();
    }
  }
  for (const auto& [sid, tenant] : drop) {
    // A chain's session holds its live state; past the bound the least recently used goes (its
    // next turn, if any, restores from the prefix cache). A busy one is left to the manager's
    // own demotion.
    const auto outcome = WithManager([&](session::SessionManager& m) { return m.DeleteSession(sid, tenant); });
    if (outcome == session::SessionManager::DeleteOutcome::kDeleted) memory_.Forget(Scope(tenant, sid));
    if (outcome == session::SessionManager::DeleteOutcome::kDeleted && dsml_) dsml_->memory().Forget(Scope(tenant, sid));
    spdlog::debug("responses: chain session {} released", sid);
  }
  return id;
}

void Api::TouchChainSession(const std::string& id, uint64_t tenant) {
  std::lock_guard<std::mutex> lk(chain_mu_);
  auto it = std::find(chain_sessions_.begin(), chain_sessions_.end(), std::make_pair(id, tenant));
  if (it == chain_sessions_.end()) return;
  auto entry = *it;
  chain_sessions_.erase(it);
  chain_sessions_.push_back(std::move(entry));
}

}  // namespace cedar::server
