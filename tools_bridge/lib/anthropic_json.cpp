#include "tools_bridge/lib/anthropic_json.h"

#include <set>

#include "tools_bridge/lib/json_limits.h"
#include "tools_bridge/lib/request_fields.h"

namespace cedar::bridge {
namespace {

using namespace fields;  // Fail, Find, Preview, String; ojson

// Text blocks (or a string) joined; `where` names the field.
std::string TextOf(const ojson& content, const std::string& where) {
  return fields::JoinedText(content, where, "text blocks", [](const ojson& b, const std::string& at) {
    if (!b.is_object() || b.value("type", ojson()) != "text") {
      Fail(at + ".type", "only text blocks are supported here, found " + Preview(b.is_object() ? b.value("type", ojson()) : b));
    }
  });
}

// The arguments text of a tool_use input: canonical (sorted keys, as the responses showed it),
// so a call sent back equals the remembered one whatever key order the client used.
std::string Sorted(const ojson& input) { return nlohmann::json::parse(input.dump()).dump(); }

// fn(block, at, type) for each block of a message's content array; `at` is the block's path
// ("messages[i].content[b]"). Fails on a block that is not an object or has no string type.
template <class Fn>
void ForEachBlock(const ojson& content, const std::string& where, Fn fn) {
  for (size_t b = 0; b < content.size(); ++b) {
    const ojson& block = content[b];
    const std::string at = where + ".content[" + std::to_string(b) + "]";
    if (!block.is_object()) Fail(at, "expected an object, found " + Preview(block));
    fn(block, at, String(block, "type", at));
  }
}

ojson ChatMsg(const char* role, const std::string& content) { return {{"role", role}, {"content", content}}; }

// One Messages message -> one or more chat messages appended to `out`.
void ConvertMessage(const ojson& m, size_t i, ojson& out) {
  const std::string where = "messages[" + std::to_string(i) + "]";
  if (!m.is_object()) Fail(where, "expected an object, found " + Preview(m));
  const std::string role = String(m, "role", where);
  if (role != "user" && role != "assistant") Fail(where + ".role", "expected \"user\" or \"assistant\", found \"" + Clip(role) + "\"");
  const ojson* content = Find(m, "content");
  if (!content) Fail(where + ".content", "required");
  if (content->is_string()) {
    out.push_back(ChatMsg(role.c_str(), content->get<std::string>()));
    return;
  }
  if (!content->is_array()) Fail(where + ".content", "expected a string or an array of blocks, found " + Preview(*content));
  if (role == "assistant") {
    ojson msg = {{"role", "assistant"}, {"content", ""}};
    std::string text, reasoning;
    ojson calls = ojson::array();
    ForEachBlock(*content, where, [&](const ojson& block, const std::string& at, const std::string& type) {
      if (type == "text") {
        text += String(block, "text", at);
      } else if (type == "tool_use") {
        const ojson* input = Find(block, "input");
        if (!input || !input->is_object()) Fail(at + ".input", "expected an object");
        calls.push_back({{"id", String(block, "id", at)},
                         {"type", "function"},
                         {"function", {{"name", String(block, "name", at)}, {"arguments", Sorted(*input)}}}});
      } else if (type == "thinking") {
        reasoning += String(block, "thinking", at);
      } else if (type == "redacted_thinking") {
        // Opaque to us (another server's encrypted reasoning): nothing to render.
      } else {
        Fail(at + ".type", "expected text, tool_use or thinking in an assistant message, found \"" + Clip(type) + "\"");
      }
    });
    msg["content"] = text;
    if (!calls.empty()) msg["tool_calls"] = std::move(calls);
    if (!reasoning.empty()) msg["reasoning_content"] = reasoning;
    out.push_back(std::move(msg));
    return;
  }
  // user: tool results become tool messages; text between them a user message.
  std::string text;
  bool has_text = false;
  auto flush = [&] {
    if (has_text) out.push_back(ChatMsg("user", text));
    text.clear();
    has_text = false;
  };
  ForEachBlock(*content, where, [&](const ojson& block, const std::string& at, const std::string& type) {
    if (type == "text") {
      text += String(block, "text", at);
      has_text = true;
    } else if (type == "tool_result") {
      flush();
      std::string result;
      if (const ojson* c = Find(block, "content")) result = TextOf(*c, at + ".content");
      if (const ojson* e = Find(block, "is_error"); e && !e->is_boolean()) Fail(at + ".is_error", "expected a boolean");
      out.push_back({{"role", "tool"}, {"tool_call_id", String(block, "tool_use_id", at)}, {"content", result}});
    } else {
      Fail(at + ".type", "expected text or tool_result in a user message, found \"" + Clip(type) + "\" (images and documents are not supported)");
    }
  });
  flush();
}

ojson ConvertTools(const ojson& tools) {
  return FunctionTools(tools, [](const ojson& t, const std::string& at) {
    if (const ojson* type = Find(t, "type"); type && *type != "custom") {
      Fail(at + ".type", "only client tools (no type, or \"custom\") are supported, found " + Preview(*type));
    }
    const ojson* schema = Find(t, "input_schema");
    if (!schema || !schema->is_object()) Fail(at + ".input_schema", "expected a JSON Schema object");
    ojson fn = {{"name", String(t, "name", at)}};
    if (const ojson* d = Find(t, "description")) {
      if (!d->is_string()) Fail(at + ".description", "expected a string");
      fn["description"] = *d;
    }
    fn["parameters"] = *schema;
    return fn;
  });
}

}  // namespace

ojson AnthropicToChatBody(const ojson& body, bool for_count) {
  static const std::set<std::string> kAccepted = {
      "model", "max_tokens", "messages", "system", "tools", "tool_choice", "stop_sequences", "stream",
      "temperature", "top_p", "metadata", "thinking", "session_id", "cache_salt", "seed"};
  for (auto it = body.begin(); it != body.end(); ++it) {
    if (!kAccepted.count(it.key())) {
      Fail(Clip(it.key(), 64), "this field is not supported by Cedar's /v1/messages (see docs/SERVER.md)");
    }
  }
  ojson chat = ojson::object();
  if (const ojson* m = Find(body, "model")) chat["model"] = *m;
  if (const ojson* mt = Find(body, "max_tokens")) {
    if (!mt->is_number_integer() || mt->get<int64_t>() < 1) Fail("max_tokens", "expected an integer >= 1, found " + Preview(*mt));
    chat["max_tokens"] = *mt;
  } else if (!for_count) {
    Fail("max_tokens", "required");
  }
  ojson messages = ojson::array();
  if (const ojson* s = Find(body, "system")) messages.push_back(ChatMsg("system", TextOf(*s, "system")));
  const ojson* in = Find(body, "messages");
  if (!in) Fail("messages", "required");
  if (!in->is_array() || in->empty()) Fail("messages", "expected a non-empty array, found " + Preview(*in));
  for (size_t i = 0; i < in->size(); ++i) ConvertMessage((*in)[i], i, messages);
  chat["messages"] = std::move(messages);
  if (const ojson* t = Find(body, "tools")) chat["tools"] = ConvertTools(*t);
  if (const ojson* c = Find(body, "tool_choice")) {
    if (!c->is_object()) Fail("tool_choice", "expected an object {\"type\": \"auto\"|\"any\"|\"tool\"|\"none\"}, found " + Preview(*c));
    const std::string type = String(*c, "type", "tool_choice");
    if (type == "auto") chat["tool_choice"] = "auto";
    else if (type == "any") chat["tool_choice"] = "required";
    else if (type == "none") chat["tool_choice"] = "none";
    else if (type == "tool") chat["tool_choice"] = {{"type", "function"}, {"function", {{"name", String(*c, "name", "tool_choice")}}}};
    else Fail("tool_choice.type", "expected \"auto\", \"any\", \"tool\" or \"none\", found \"" + Clip(type) + "\"");
    if (const ojson* d = Find(*c, "disable_parallel_tool_use")) {
      if (!d->is_boolean()) Fail("tool_choice.disable_parallel_tool_use", "expected a boolean");
      chat["parallel_tool_calls"] = !d->get<bool>();
    }
  }
  if (const ojson* s = Find(body, "stop_sequences")) {
    if (!s->is_array()) Fail("stop_sequences", "expected an array of strings, found " + Preview(*s));
    chat["stop"] = *s;
  }
  if (const ojson* t = Find(body, "temperature")) {
    if (!t->is_number() || t->get<double>() < 0 || t->get<double>() > 1) Fail("temperature", "expected a number in [0, 1], found " + Preview(*t));
    chat["temperature"] = *t;
  }
  for (const char* key : {"top_p", "stream", "session_id", "cache_salt", "seed"}) {
    if (const ojson* v = Find(body, key)) chat[key] = *v;
  }
  if (const ojson* th = Find(body, "thinking")) {
    if (!th->is_object()) Fail("thinking", "expected {\"type\": \"enabled\"|\"disabled\", ...}");
    chat["thinking"] = {{"type", String(*th, "type", "thinking")}};
  }
  if (const ojson* md = Find(body, "metadata"); md && !md->is_object()) Fail("metadata", "expected an object");
  return chat;
}

nlohmann::json AnthropicContentJson(const AssistantOutput& output) {
  nlohmann::json blocks = nlohmann::json::array();
  if (!output.reasoning.empty()) blocks.push_back({{"type", "thinking"}, {"thinking", output.reasoning}, {"signature", ""}});
  if (!output.content.empty() || output.tool_calls.empty()) blocks.push_back({{"type", "text"}, {"text", output.content}});
  for (const ToolCall& c : output.tool_calls) {
    nlohmann::json input = nlohmann::json::parse(c.arguments, nullptr, false);
    if (!input.is_object()) input = nlohmann::json::object();  // the parsers only yield object arguments
    blocks.push_back({{"type", "tool_use"}, {"id", c.id}, {"name", c.name}, {"input", std::move(input)}});
  }
  return blocks;
}

std::string AnthropicStopReason(bool has_tool_calls, const std::string& matched_stop, const std::string& finish_reason) {
  if (has_tool_calls) return "tool_use";
  if (!matched_stop.empty()) return "stop_sequence";
  if (finish_reason == "length") return "max_tokens";
  return "end_turn";
}

}  // namespace cedar::bridge
