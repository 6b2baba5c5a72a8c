// What a finished or running turn looks like on the wire: OpenAI's chat.completion and
// text_completion objects, their streamed chunks (Server-Sent Events), `usage` with
// prompt_tokens_details.cached_tokens, and Cedar's own `cedar` accounting object.
//
// Streamed and whole responses are built from the same pieces, so for the same tokens they
// carry the same text, tool calls and finish_reason (tests hold them to it).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "session/session_manager.h"
#include "tools_bridge/lib/tool_calls.h"
#include "server/http_message.h"
#include "server/live_turn.h"

namespace cedar::server {

// The identity of one response.
struct TurnMeta {
  std::string id;          // "chatcmpl-..." or "cmpl-..."
  int64_t created = 0;     // unix seconds
  std::string model;
  std::string session_id;  // "" = none
  bool ignore_eos = false;
  bool include_usage = false;  // streaming: send a usage chunk before [DONE]
  std::vector<int32_t> stop_ids;  // ids that end the turn (not shown as text)
  bridge::ToolCallIds call_ids;   // ids for the tool calls of this turn
  // The model's chat format is deepseek_v41: the output is text in the released format, read
  // by dsml::StreamParser / ParseOutput (else Cedar's own ids, read by ToolCallStreamParser).
  bool dsml = false;
  bool thinking = false;  // deepseek_v41: the prompt ended with "<think>" (output starts with reasoning)
  // Issue 19: -1 = no logprobs; else chunks and responses carry each shown token's logprob and
  // this many alternatives (chat: logprobs.content; completions: the legacy logprobs object).
  int top_logprobs = -1;
  // Completions' return_token_ids (vLLM): choices carry `token_ids` (every generated id, stop
  // ids included) and `prompt_token_ids` (these; filled only when the flag is set).
  bool return_token_ids = false;
  std::vector<int32_t> prompt_ids;
};

nlohmann::json UsageJson(const session::TurnAccounting& a, int64_t completion_tokens);
// The turn's accounting, with the turn's LiveTurn::manager_ms (for server-overhead numbers) and
// LiveTurn::seed.
nlohmann::json CedarJson(const session::TurnAccounting& a, const std::string& session_id, const LiveTurn& turn);

// finish_reason: "tool_calls" when the message has calls, "stop" for a stop string or stop
// id, else the manager's reason ("length", "cancelled").
std::string FinishReasonOf(bool has_tool_calls, const std::string& matched_stop, const std::string& manager_reason);

// A chat turn's message as the client sees it: tool calls parsed, the stop string removed.
bridge::AssistantOutput ChatOutputOf(const bridge::Tokenizer& tokenizer, const std::vector<int32_t>& tokens,
                                     const TurnMeta& meta, const std::string& matched_stop);
nlohmann::json ChatCompletionJson(const TurnMeta& meta, const bridge::AssistantOutput& output, const LiveTurn& turn);

// A completion turn's text: ids decoded (specials by name), stop ids left out, the stop
// string removed.
std::string CompletionTextOf(const bridge::Tokenizer& tokenizer, const std::vector<int32_t>& tokens,
                             const TurnMeta& meta, const std::string& matched_stop);
nlohmann::json CompletionJson(const TurnMeta& meta, const std::string& text, const LiveTurn& turn);

// "data: <json>\n\n"
std::string SseEvent(const nlohmann::json& event);
inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";

// The streamed body of a chat (chat = true) or completion turn: chunks as the tokens arrive,
// then the finish chunk (with `cedar`), the usage chunk if asked for, and [DONE]. A turn that
// fails after the headers went out ends with an error event in OpenAI's error shape.
std::shared_ptr<BodySource> MakeTurnStream(std::shared_ptr<LiveTurn> turn, const bridge::Tokenizer& tokenizer,
                                           TurnMeta meta, bool chat, std::vector<std::string> stop);

}  // namespace cedar::server
