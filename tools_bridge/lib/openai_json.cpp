#include "tools_bridge/lib/openai_json.h"

#include "tools_bridge/lib/json_limits.h"

namespace cedar::bridge {
namespace {

using nlohmann::json;

[[noreturn]] void Fail(const std::string& what) { throw ChatTemplateError(what); }

std::string Field(size_t i, std::string_view name) {
  return "messages[" + std::to_string(i) + "]." + std::string(name);
}

Role ReadRole(const json& m, size_t i) {
  auto it = m.find("role");
  if (it == m.end() || !it->is_string()) Fail(Field(i, "role") + ": missing or not a string");
  const std::string& role = it->get_ref<const std::string&>();
  if (role == "system" || role == "developer") return Role::kSystem;
  if (role == "user") return Role::kUser;
  if (role == "assistant") return Role::kAssistant;
  if (role == "tool") return Role::kTool;
  Fail(Field(i, "role") + ": unknown role \"" + Clip(role) +
       "\" (expected system, developer, user, assistant or tool)");
}

std::string ReadContent(const json& m, size_t i) {
  auto it = m.find("content");
  if (it == m.end() || it->is_null()) return {};
  if (it->is_string()) return it->get<std::string>();
  if (!it->is_array()) Fail(Field(i, "content") + ": expected a string, null or an array");
  std::string text;
  for (size_t p = 0; p < it->size(); ++p) {
    const json& part = (*it)[p];
    const std::string where = Field(i, "content[" + std::to_string(p) + "]");
    const json type = part.is_object() ? part.value("type", json()) : json();
    if (type == "image_url" || type == "image" || type == "input_image") {
      Fail(where + ": an image part (type " + type.dump() +
           "): image input is not supported (Cedar serves the text model: vision is out of scope); expected "
           "{\"type\":\"text\"} parts");
    }
    if (type != "text") Fail(where + ": only {\"type\":\"text\"} parts are supported, found type " + Clip(type.dump()));
    auto t = part.find("text");
    if (t == part.end() || !t->is_string()) Fail(where + ".text: expected a string");
    text += t->get_ref<const std::string&>();
  }
  return text;
}

std::string ReadString(const json& obj, std::string_view key, const std::string& where) {
  auto it = obj.find(key);
  if (it == obj.end() || !it->is_string()) Fail(where + ": expected a string");
  return it->get<std::string>();
}

std::vector<ToolCall> ReadToolCalls(const json& m, size_t i) {
  std::vector<ToolCall> calls;
  auto it = m.find("tool_calls");
  if (it == m.end() || it->is_null()) return calls;
  if (!it->is_array()) Fail(Field(i, "tool_calls") + ": expected an array");
  for (size_t c = 0; c < it->size(); ++c) {
    const json& call = (*it)[c];
    const std::string where = Field(i, "tool_calls[" + std::to_string(c) + "]");
    if (!call.is_object()) Fail(where + ": expected an object");
    if (call.contains("type") && call["type"] != "function") {
      Fail(where + ".type: only \"function\" is supported");
    }
    auto fn = call.find("function");
    if (fn == call.end() || !fn->is_object()) Fail(where + ".function: expected an object");
    calls.push_back({ReadString(call, "id", where + ".id"),
                     ReadString(*fn, "name", where + ".function.name"),
                     ReadString(*fn, "arguments", where + ".function.arguments")});
  }
  return calls;
}

}  // namespace

std::vector<Message> MessagesFromJson(const json& messages) {
  if (!messages.is_array()) Fail("messages: expected an array");
  std::vector<Message> out;
  out.reserve(messages.size());
  for (size_t i = 0; i < messages.size(); ++i) {
    const json& m = messages[i];
    if (!m.is_object()) Fail("messages[" + std::to_string(i) + "]: expected an object");
    Message msg;
    msg.role = ReadRole(m, i);
    msg.content = ReadContent(m, i);
    msg.tool_calls = ReadToolCalls(m, i);
    if (msg.role == Role::kTool) {
      msg.tool_call_id = ReadString(m, "tool_call_id", Field(i, "tool_call_id"));
    }
    // Assistant reasoning sent back by the client (DeepSeek's `reasoning_content`); only the
    // deepseek_v41 encoding renders it.
    if (msg.role == Role::kAssistant) {
      auto rc = m.find("reasoning_content");
      if (rc != m.end() && !rc->is_null()) {
        if (!rc->is_string()) Fail(Field(i, "reasoning_content") + ": expected a string or null");
        msg.reasoning = rc->get<std::string>();
      }
    }
    out.push_back(std::move(msg));
  }
  return out;
}

json AssistantMessageJson(const AssistantOutput& output) {
  json m = {{"role", "assistant"}};
  m["content"] =
      output.content.empty() && !output.tool_calls.empty() ? json(nullptr) : json(output.content);
  if (!output.reasoning.empty()) m["reasoning_content"] = output.reasoning;
  if (!output.tool_calls.empty()) {
    json calls = json::array();
    for (const ToolCall& c : output.tool_calls) {
      calls.push_back({{"id", c.id},
                       {"type", "function"},
                       {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
    }
    m["tool_calls"] = std::move(calls);
  }
  return m;
}

json DeltaJson(const StreamDelta& delta) {
  switch (delta.kind) {
    case StreamDelta::Kind::kContent: return {{"content", delta.text}};
    case StreamDelta::Kind::kReasoning: return {{"reasoning_content", delta.text}};
    case StreamDelta::Kind::kToolCallStart:
      return {
          {"tool_calls", json::array({{{"index", delta.index},
                                       {"id", delta.id},
                                       {"type", "function"},
                                       {"function", {{"name", delta.name}, {"arguments", ""}}}}})}};
    case StreamDelta::Kind::kToolCallArguments:
      return {{"tool_calls",
               json::array({{{"index", delta.index}, {"function", {{"arguments", delta.text}}}}})}};
  }
  return json::object();
}

std::string_view FinishReason(const AssistantOutput& output) {
  if (!output.tool_calls.empty()) return "tool_calls";
  return output.stopped ? "stop" : "length";
}

}  // namespace cedar::bridge
