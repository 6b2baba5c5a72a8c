// Reading and validating request bodies: JSON text -> typed requests. Every refusal is an
// ApiError (400) naming the field, e.g. "temperature: expected a number in [0, 2], found "hot"".
// Unknown fields are ignored (clients send many we do not use).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/logprobs.h"
#include "engine/sampling.h"
#include "tools_bridge/lib/chat_template.h"
#include "server/http_message.h"

namespace cedar::server {

// Fields /v1/chat/completions and /v1/completions share.
struct GenerationParams {
  std::string model;                 // echoed back; any name is accepted
  std::string session_id;            // body `session_id` or header X-Session-Id ("" = none)
  std::optional<int> max_tokens;     // max_completion_tokens or max_tokens; unset = default
  SamplingParams sampling;           // temperature, top_p, seed
  bool seeded = false;               // the body gave `seed`; else the Api draws one per turn
  std::vector<std::string> stop;     // `stop`: up to kMaxStopStrings non-empty strings
  bool stream = false;
  bool include_usage = false;        // stream_options.include_usage
  bool ignore_eos = false;           // `ignore_eos` (as vLLM): only max_tokens ends the turn
  int priority = 0;                  // `priority` (as vLLM): lower values are scheduled first
  // Issue 19. `logit_bias` ({"id": bias in [-100, 100]}), `presence_penalty` and
  // `frequency_penalty` (in [-2, 2]), OpenAI's semantics (engine/logprobs.h). Ids are checked
  // against the vocabulary by the Api.
  LogitAdjustments adjust;
  // Chat: `logprobs: true` and `top_logprobs` (0..20); completions: `logprobs` (0..20 = the
  // alternatives per token). -1 = no logprobs.
  int top_logprobs = -1;
  bool return_token_ids = false;     // completions: `return_token_ids` (vLLM)
};

// Fields accepted and ignored (OpenAI's bookkeeping, with nothing to do here). Documented in
// docs/SERVER.md "Request fields"; every other field OpenAI defines that Cedar does not
// implement is refused with 400 naming it (never silently ignored).
inline constexpr const char* kNoOpFields[] = {"user", "metadata", "store", "service_tier", "safety_identifier",
                                              "prompt_cache_key"};

inline constexpr size_t kMaxStopStrings = 16;
// Most alternatives per token `top_logprobs` / completions' `logprobs` may ask for (OpenAI's 20).
inline constexpr int kMaxTopLogprobs = 20;
// Longest stop string: the matcher and the stream holdback compare a tail that long per token.
inline constexpr size_t kMaxStopStringBytes = 256;
// Longest `model`: it is echoed in every response and every stream chunk.
inline constexpr size_t kMaxModelNameBytes = 256;

struct ChatRequest {
  GenerationParams params;
  std::vector<bridge::Message> messages;
  nlohmann::json tools;              // null or the `tools` array
  nlohmann::json tool_choice;        // null, "none", "auto", "required" or a named function
};

struct CompletionRequest {
  GenerationParams params;
  std::optional<std::string> prompt_text;  // `prompt` as a string
  std::vector<int32_t> prompt_ids;         // `prompt` as token ids
};

// Parses the body as a JSON object, nesting at most bridge::kMaxJsonDepth deep (checked while
// parsing, before a tree is built). 400 otherwise, naming the top-level field at fault:
// code invalid_json (syntax, bad UTF-8), json_too_deep, number_out_of_range (1e400).
nlohmann::json ParseJsonBody(const std::string& body);

ChatRequest ParseChatRequest(const nlohmann::json& body, const HttpRequest& request);
CompletionRequest ParseCompletionRequest(const nlohmann::json& body, const HttpRequest& request);

// The session id a request names: body `session_id`, or the X-Session-Id header. Both given
// and different, or either outside session_ids.h's alphabet: 400 (param session_id).
std::string SessionIdOf(const nlohmann::json& body, const HttpRequest& request);

}  // namespace cedar::server
