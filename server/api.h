// The HTTP API as a function from request to response, without sockets (the transport is
// http_server.h). Endpoints (OpenAI's shapes where OpenAI has them):
//
//   POST   /v1/chat/completions   messages, tools, tool_choice, stream, max_tokens, ... (+ session_id)
//   POST   /v1/completions        prompt as text or token ids
//   POST   /v1/responses          OpenAI's Responses API (store, previous_response_id)
//   GET    /v1/responses/{id}     a stored response object; DELETE forgets it
//   POST   /v1/messages           Anthropic's Messages API (+ /v1/messages/count_tokens)
//   POST   /v1/sessions           create a session, optionally pinning its first messages
//   GET    /v1/sessions           list sessions (paged: limit, after; OpenAI list shape)
//   GET    /v1/sessions/{id}      one session
//   DELETE /v1/sessions/{id}      delete a session
//   GET    /v1/models             the served model
//   GET    /v1/cache              the prefix cache's state (JSON)
//   GET    /metrics               Prometheus text
//   GET    /health                liveness ("ok", or 503 while draining)
//   POST   /tokenize, /detokenize, /apply-template   llama.cpp's utilities (server/admin.cpp)
//   POST   /v1/cache/flush        drop the caller's tenant's unpinned cache entries
//   GET    /version               version and git describe
//
// Errors use OpenAI's shape ({"error": {message, type, param, code}}) with the status that
// fits: 400 (bad JSON, wrong types, a tool message answering no call, prompt too long), 404
// (unknown session or route), 405, 409 (a turn already in flight on the session), 503
// (draining), 500.
//
// Thread contract: Handle may be called from many threads at once; it blocks while a
// non-streamed turn runs (the transport calls it on a worker thread, never an I/O thread).
#pragma once
#include <atomic>
#include <chrono>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <shared_mutex>
#include <span>
#include <string>

#include "session/session_manager.h"
#include "tools_bridge/lib/chat_format.h"
#include "tools_bridge/lib/chat_template.h"
#include "tools_bridge/lib/tokenizer.h"
#include "server/api_error.h"
#include "server/dsml_replay.h"
#include "server/generation_memory.h"
#include "server/http_message.h"
#include "server/output_constraint.h"
#include "server/request_parse.h"
#include "server/response_store.h"
#include "server/server_metrics.h"
#include "server/turn_format.h"

namespace cedar::server {

struct ApiOptions {
  std::string model_name = "cedar";       // the `model` /v1/models lists and responses echo
  // The model's tokenizer (tools_bridge/lib/model_tokenizer.h); null: the ByteTokenizer sized
  // to the model's vocabulary.
  std::shared_ptr<const bridge::Tokenizer> tokenizer;
  int default_max_tokens = 256;           // when a request names no max_tokens
  double default_pin_ttl_s = 600;         // POST /v1/sessions with messages and no pin_ttl_s
  size_t remembered_turns_per_session = 256;  // GenerationMemory per scope
  // deepseek_v41: where the replay memory persists (server/dsml_replay.h, a 0600 JSON-lines
  // file, e.g. in --cache-dir); "" = RAM only.
  std::string replay_memory_path;
  // Every turn's policies (session/session_manager.h). `cedar profile --live` reads them from
  // /v1/cache to simulate the same; restore=recompute makes every cached prefix exact.
  session::DecoderPolicy decoder_policy = session::DecoderPolicy::kAuto;
  session::RestorePolicy restore_policy = session::RestorePolicy::kStaircase;
  // /v1/responses `store: true`: how many response ids previous_response_id can name (oldest
  // forgotten first), and how many sessions their chains hold at most (the least recently used
  // chain's session is deleted; continuing it then restores from the prefix cache).
  size_t responses_max_stored = 4096;
  size_t responses_max_sessions = 64;
  // One info-level line per request (method, route, status, ms, prompt/cached/generated tokens,
  // session); --no-access-log turns it off.
  bool access_log = true;
  // --seed: seeds the generator of the seeds drawn for turns that give no `seed`, so a server
  // started with it answers the same requests in the same order with the same samples (as
  // vLLM's and llama.cpp's --seed). Unset: std::random_device.
  std::optional<uint64_t> seed;
};

// "auto", "exact", "bounded" / "replay", "recompute"; Parse* return false for other names.
const char* DecoderPolicyName(session::DecoderPolicy p);
const char* RestorePolicyName(session::RestorePolicy p);
bool ParseDecoderPolicy(const std::string& s, session::DecoderPolicy* out);
bool ParseRestorePolicy(const std::string& s, session::RestorePolicy* out);

class Api {
 public:
  // REQUIRES: `manager` outlives the Api. The tokenizer is options.tokenizer, or the
  // ByteTokenizer sized to the model's vocabulary.
  Api(session::SessionManager& manager, ApiOptions options);

  HttpResponse Handle(const HttpRequest& request);

  // From now on new turns and sessions are refused with 503 and /health says "draining".
  void StartDraining() { draining_.store(true); }
  // Call before SessionManager::Shutdown: from now on no request calls the manager (each
  // answers 503 instead); returns once the calls in progress have returned.
  void DetachManager();
  ServerMetrics& metrics() { return metrics_; }
  // Cedar's template; null for a model in the released deepseek_v41 format (whose vocabulary
  // has no room for Cedar's chat specials).
  const bridge::ChatTemplate* chat_template() const { return template_.get(); }
  bridge::ChatFormat chat_format() const { return format_; }
  DsmlPrompter* dsml() { return dsml_.get(); }  // null unless deepseek_v41
  // The prompt ids a /v1/chat/completions body renders to now (remembered generations
  // reattached), without running a turn or counting anything. For tests and benches.
  std::vector<int32_t> ChatPromptIds(const std::string& body);
  // The key of `tenant`'s session `id` (or of its requests without a session, id ""): in the
  // generation memory, so no tenant sees another's.
  static std::string Scope(uint64_t tenant, const std::string& id);
  const bridge::Tokenizer& tokenizer() const { return tokenizer_; }
  const GenerationMemory& memory() const { return memory_; }

  // The route label of a path ("/v1/sessions/{id}"; "other" for unknown paths).
  static std::string RouteOf(const std::string& path);

 private:
  // A validated turn, ready to submit.
  struct TurnPlan {
    bool chat = true;
    bool stream = false;
    session::TurnRequest request;
    std::vector<std::string> stop;
    TurnMeta meta;
    std::optional<DsmlPrompt> dsml;  // deepseek_v41 chat: the prompt's key for exact replay
  };
  // A chat request's prompt (either format). `count`: add the replay counts to /metrics.
  struct ChatPrompt {
    std::vector<int32_t> ids;
    std::optional<DsmlPrompt> dsml;
  };
  // `scope`: Scope(tenant, session id), the key of the remembered generations it may replay.
  ChatPrompt RenderChat(const nlohmann::json& body, const std::string& raw_body, ChatRequest& chat,
                        const std::string& scope, bool count);
  // The same with the request's `tools` given in the client's key order (deepseek_v41 renders
  // them as sent); for bodies converted from another API.
  ChatPrompt RenderChat(const nlohmann::json& body, const nlohmann::ordered_json& ordered_tools, ChatRequest& chat,
                        const std::string& scope, bool count);

  // The Responses and Messages APIs (api_responses.cpp, api_messages.cpp): each request becomes
  // a chat-completions body (tools_bridge/lib/responses_json.h, anthropic_json.h) planned and
  // run as a chat turn (api_converted.cpp), then answered in the API's own shapes.
  HttpResponse Responses(const HttpRequest& request, std::chrono::steady_clock::time_point start);
  HttpResponse Messages(const HttpRequest& request, std::chrono::steady_clock::time_point start);
  HttpResponse MessagesTurn(const HttpRequest& request, std::chrono::steady_clock::time_point start);
  HttpResponse CountTokens(const HttpRequest& request);
  // GET / DELETE /v1/responses/{id} (`path`): the stored response object, or forgets it.
  HttpResponse StoredResponse(const HttpRequest& request, const std::string& path);
  // A converted chat body -> a chat turn with its grammar. `id_prefix` names the response
  // ("resp_", "msg_"), `call_prefix` its tool calls ("call_", "toolu_").
  TurnPlan PlanChatBody(const nlohmann::ordered_json& chat_body, const HttpRequest& request, const char* id_prefix,
                        const char* call_prefix);
  // Submits the plan's turn; throws ApiError when the manager refuses it at once.
  std::shared_ptr<LiveTurn> SubmitTurn(const TurnPlan& plan, const HttpRequest& request);
  // A session for a stored response chain (`store: true`): a new one of the request's tenant,
  // one of at most options_.responses_max_sessions (the least recently used is deleted). ""
  // when the session limit leaves no room (the turn then runs on the prefix cache alone).
  std::string ChainSession(const HttpRequest& request, const std::string& cache_salt);
  void TouchChainSession(const std::string& id, uint64_t tenant);
  // Replaces the `input` items {"type":"item_reference","id"} with the stored items (404 naming
  // the item when unknown).
  void ResolveItemReferences(nlohmann::ordered_json& body, uint64_t tenant) const;

  HttpResponse Route(const HttpRequest& request, const std::string& path);
  HttpResponse ChatCompletions(const HttpRequest& request, std::chrono::steady_clock::time_point start);
  HttpResponse Completions(const HttpRequest& request, std::chrono::steady_clock::time_point start);
  HttpResponse RunTurn(TurnPlan plan, const HttpRequest& request, const std::string& route,
                       std::chrono::steady_clock::time_point start);
  void Finished(const TurnPlan& plan, LiveTurn& turn);
  // `body`: the request's JSON, for its `cache_salt` (server/tenant.h).
  TurnPlan PlanTurn(const GenerationParams& params, std::vector<int32_t> prompt, bool chat, const HttpRequest& request,
                    const nlohmann::json& body);

  HttpResponse CreateSession(const HttpRequest& request);
  HttpResponse GetSession(const HttpRequest& request, const std::string& id);
  HttpResponse DeleteSession(const HttpRequest& request, const std::string& id);
  HttpResponse ListSessions(const HttpRequest& request);  // paged: ?limit=N&after=ID
  HttpResponse Models() const;
  HttpResponse Health() const;
  HttpResponse Metrics();
  HttpResponse Cache();
  // server/admin.cpp: /tokenize, /detokenize, /apply-template, /v1/cache/flush, /version.
  HttpResponse Admin(const HttpRequest& request, const std::string& path);
  // The access log line of one answered request (`turn`: its result when it ran a turn).
  void AccessLog(const HttpRequest& request, const std::string& route, int status, double seconds,
                 const session::TurnResult* turn, const std::string& session_id) const;

  // Runs f(manager_) unless the manager is detached (then 503). Not for waiting on turns.
  template <class F>
  auto WithManager(F f) -> decltype(f(std::declval<session::SessionManager&>()));
  void RequireNotDraining() const;
  // The tokenizer's vocabulary for grammar-constrained decoding (server/output_constraint.h),
  // built on first use (sorting 129K tokens takes tens of ms) and shared by every turn.
  std::shared_ptr<const grammar::TokenVocab> GrammarVocab();
  std::string NewId(const char* prefix);
  // The 12 hex digits that name a turn's tool calls ("call_" + stem + "_0"): a hash of the
  // prompt's ids under the sampling seed, so the same request with the same seed answers with
  // the same call ids, and a conversation that sends its replies back (formats that render the
  // ids into the prompt) stays reproducible turn after turn. Unique within a conversation:
  // every turn's prompt extends the last.
  static std::string CallIdStem(std::span<const int32_t> prompt, uint64_t seed);

  session::SessionManager& manager_;
  ApiOptions options_;
  std::shared_ptr<const bridge::Tokenizer> tokenizer_owner_;  // options_.tokenizer or a ByteTokenizer
  const bridge::Tokenizer& tokenizer_;                         // *tokenizer_owner_
  bridge::ChatFormat format_;                       // the model config's chat_format
  std::unique_ptr<bridge::ChatTemplate> template_;  // kCedar only
  std::unique_ptr<DsmlPrompter> dsml_;              // kDeepseekV41 only
  GenerationMemory memory_;                         // kCedar's exact replay
  ServerMetrics metrics_;
  std::atomic<bool> draining_{false};
  std::shared_mutex gate_;       // shared: a call into the manager; unique: DetachManager
  bool manager_detached_ = false;  // guarded by gate_
  int64_t created_ = 0;  // unix seconds at start (the model's `created`)
  ResponseStore responses_;  // /v1/responses with store: true
  std::mutex chain_mu_;      // guards chain_sessions_
  std::deque<std::pair<std::string, uint64_t>> chain_sessions_;  // ChainSession's (id, tenant), LRU first
  std::once_flag grammar_vocab_once_;
  // The tokenizer's special tokens that stand for an image (their names contain "image": the
  // released <｜deepseek_image｜> = image_token_id 129264, <｜rl_image_pad｜>, <｜rl_image_start｜>),
  // ascending. Vision is out of scope: PlanTurn answers a prompt holding one with a 400.
  std::vector<int32_t> image_ids_;
  std::shared_ptr<const grammar::TokenVocab> grammar_vocab_;  // GrammarVocab()

  // Session existence is the SessionManager's alone (one source of truth keeps create, delete
  // and turns on one id linearizable); the Api keeps no set of its own.
  std::mutex mu_;  // guards rng_ and seed_rng_
  std::mt19937_64 rng_;  // response ids (chatcmpl-...), which name nothing a client can reach
  std::mt19937_64 seed_rng_;  // the seeds of turns without one (ApiOptions::seed)
};

template <class F>
auto Api::WithManager(F f) -> decltype(f(std::declval<session::SessionManager&>())) {
  std::shared_lock<std::shared_mutex> lk(gate_);
  if (manager_detached_) {
    throw ApiError(503, "server_error", "shutting_down", "the server is shutting down");
  }
  return f(manager_);
}

}  // namespace cedar::server
