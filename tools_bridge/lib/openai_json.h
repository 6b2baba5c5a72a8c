// OpenAI chat-completions JSON <-> the bridge's types: request `messages` in, assistant
// messages and streaming deltas out. Only the fields the chat template uses are read.
#pragma once
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "tools_bridge/lib/chat_template.h"
#include "tools_bridge/lib/tool_calls.h"

namespace cedar::bridge {

// Reads a request's `messages` array. Roles: system ("developer" is read as system), user,
// assistant, tool. content: a string, null, or an array of {"type":"text","text":...} parts
// (joined). assistant tool_calls: [{"id", "type":"function", "function":{"name","arguments"}}]
// with arguments a JSON string. tool: "tool_call_id". Throws ChatTemplateError naming the
// field (e.g. messages[2].role: unknown role "function"). The semantic checks (arguments are
// JSON, tool_call_id answers a call) are ChatTemplate::Validate's.
std::vector<Message> MessagesFromJson(const nlohmann::json& messages);

// The response's choices[0].message: {"role":"assistant","content":..., "tool_calls":[...]}.
// content is null when empty and there are tool calls; tool_calls is absent when empty.
nlohmann::json AssistantMessageJson(const AssistantOutput& output);

// A streaming chunk's choices[0].delta for one StreamDelta.
nlohmann::json DeltaJson(const StreamDelta& delta);

// choices[0].finish_reason: "tool_calls" if any call, else "stop" if stopped, else "length".
std::string_view FinishReason(const AssistantOutput& output);

}  // namespace cedar::bridge
