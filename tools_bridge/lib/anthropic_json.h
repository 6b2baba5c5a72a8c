// Anthropic's Messages API (POST /v1/messages) <-> the OpenAI chat-completions shapes the rest
// of the bridge speaks. The server converts a Messages request into a chat-completions body
// (messages, tools, tool_choice, ...) and runs it through the same template, replay memory
// and grammar as /v1/chat/completions; the output (AssistantOutput) comes back as Anthropic
// content blocks. docs/SERVER.md, "Anthropic Messages", lists what is accepted.
//
// Request mapping:
//   system (string or text blocks)          -> a system message first
//   user content: text blocks               -> a user message (adjacent text joined)
//   user content: tool_result blocks        -> tool messages (tool_call_id = tool_use_id),
//                                              in block order, before the text that follows
//   assistant content: text, tool_use       -> one assistant message with tool_calls
//                                              (arguments = the input object as JSON text)
//   assistant content: thinking             -> reasoning (deepseek_v41 renders it)
//   tools [{name, description, input_schema}] -> [{type:"function", function:{name, description,
//                                              parameters: input_schema}}]
//   tool_choice auto/any/tool/none          -> "auto"/"required"/{function:{name}}/"none";
//                                              disable_parallel_tool_use -> parallel_tool_calls
//   max_tokens (required), stop_sequences, temperature, top_p, stream, thinking, metadata
//   (no-op), and Cedar's session_id, cache_salt, seed.
// Any other top-level field, block type or tool type is refused (AnthropicError names it).
#pragma once
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "tools_bridge/lib/request_fields.h"
#include "tools_bridge/lib/tool_calls.h"

namespace cedar::bridge {

// A Messages request the bridge refuses; param() is the field at fault (e.g. "messages[2].content[0].type").
// One type with the other API converters' errors (request_fields.h).
using AnthropicError = RequestFieldError;

// The chat-completions body equivalent to a Messages request body. `tools` keeps the client's
// key order (the deepseek_v41 encoding renders the schemas as sent). `for_count`: the body of
// /v1/messages/count_tokens (max_tokens not required).
nlohmann::ordered_json AnthropicToChatBody(const nlohmann::ordered_json& body, bool for_count = false);

// The response's `content`: [thinking] text blocks and tool_use blocks ({id, name, input}).
nlohmann::json AnthropicContentJson(const AssistantOutput& output);

// stop_reason: "tool_use" with calls, "stop_sequence" for a matched stop string, "end_turn"
// for a stop id, "max_tokens" for the length limit ("end_turn" for cancelled).
std::string AnthropicStopReason(bool has_tool_calls, const std::string& matched_stop,
                                const std::string& finish_reason);

}  // namespace cedar::bridge
