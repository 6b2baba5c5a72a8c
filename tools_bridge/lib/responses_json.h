// OpenAI's Responses API (POST /v1/responses) <-> the chat-completions shapes the rest of the
// bridge speaks. The server turns a Responses request into a chat-completions body and runs it
// through the same template, replay memory and grammar as /v1/chat/completions; the output
// (AssistantOutput) comes back as Responses output items. docs/SERVER.md, "Responses", lists
// what is accepted.
//
// Request mapping:
//   instructions                          -> a system message first
//   input: a string                       -> a user message
//   input items: {role, content}          -> a message (system/developer/user/assistant; content a
//     (type "message" or none)               string or input_text/output_text parts)
//   {type:"function_call", call_id, name, arguments}
//                                         -> a tool call of the assistant message it follows
//                                            (a new assistant message when none is open)
//   {type:"function_call_output", call_id, output}
//                                         -> a tool message
//   {type:"reasoning", summary}           -> reasoning of the next assistant message
//   tools [{type:"function", name, description, parameters}] -> chat-completions function tools
//   tool_choice "none"/"auto"/"required"/{type:"function", name}
//   text.format {type: text|json_object|json_schema, name, schema, strict} -> response_format
//   max_output_tokens, temperature, top_p, stream, parallel_tool_calls, and Cedar's seed,
//   cache_salt. store, previous_response_id, metadata, user, truncation ("disabled"),
//   prompt_cache_key are the server's (api_responses.cpp) or no-ops.
// Any other field, item type or tool type is refused (ResponsesError names it).
#pragma once
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "tools_bridge/lib/request_fields.h"
#include "tools_bridge/lib/tool_calls.h"

namespace cedar::bridge {

// A Responses request the bridge refuses; param() is the field at fault (e.g. "input[2].content[0].type").
// One type with the other API converters' errors (request_fields.h).
using ResponsesError = RequestFieldError;

// The `input` as chat messages (no instructions), appended to `messages`.
void ResponsesInputToMessages(const nlohmann::ordered_json& input, nlohmann::ordered_json& messages);

// The chat-completions body of a Responses request: messages = [instructions] + `prior` (the
// stored conversation a previous_response_id names, chat messages) + the input.
nlohmann::ordered_json ResponsesToChatBody(const nlohmann::ordered_json& body, const nlohmann::ordered_json& prior);

// The response's `output` items. `item_id`: a unique suffix for the items' ids (msg_, fc_, rs_).
nlohmann::json ResponsesOutputJson(const AssistantOutput& output, const std::string& item_id);

// The assistant turn as a chat message (for the stored conversation).
nlohmann::ordered_json ChatAssistantMessage(const AssistantOutput& output);

}  // namespace cedar::bridge
