#include "tools_bridge/lib/responses_json.h"

#include <set>

#include "tools_bridge/lib/json_limits.h"
#include "tools_bridge/lib/request_fields.h"

namespace cedar::bridge {
namespace {

using namespace fields;  // Fail, Find, Preview, String; ojson

// A message's content: a string, or input_text / output_text parts joined.
std::string TextOf(const ojson& content, const std::string& where) {
  return fields::JoinedText(content, where, "text parts", [](const ojson& p, const std::string& at) {
    if (!p.is_object()) Fail(at, "expected an object");
    const std::string type = String(p, "type", at);
    if (type != "input_text" && type != "output_text" && type != "text") {
      Fail(at + ".type", "only input_text and output_text parts are supported, found \"" + Clip(type) + "\"");
    }
  });
}

ojson ConvertTools(const ojson& tools) {
  return FunctionTools(tools, [](const ojson& t, const std::string& at) {
    const std::string type = String(t, "type", at);
    if (type != "function") Fail(at + ".type", "only function tools are supported, found \"" + Clip(type) + "\"");
    ojson fn = {{"name", String(t, "name", at)}};
    if (const ojson* d = Find(t, "description")) fn["description"] = *d;
    fn["parameters"] = Find(t, "parameters") ? t["parameters"] : ojson{{"type", "object"}, {"properties", ojson::object()}};
    if (const ojson* s = Find(t, "strict")) fn["strict"] = *s;
    return fn;
  });
}

ojson ConvertToolChoice(const ojson& c) {
  if (c.is_string()) return c;  // none / auto / required: checked with the chat fields
  if (c.is_object() && c.value("type", ojson()) == "function") {
    return {{"type", "function"}, {"function", {{"name", String(c, "name", "tool_choice")}}}};
  }
  Fail("tool_choice", "expected \"none\", \"auto\", \"required\" or {\"type\": \"function\", \"name\": ...}, found " + Preview(c));
}

ojson ConvertFormat(const ojson& text) {
  if (!text.is_object()) Fail("text", "expected an object, found " + Preview(text));
  for (auto it = text.begin(); it != text.end(); ++it) {
    if (it.key() != "format" && it.key() != "verbosity") Fail("text." + Clip(it.key(), 40), "not supported");
  }
  const ojson* f = Find(text, "format");
  if (!f) return nullptr;
  if (!f->is_object()) Fail("text.format", "expected an object, found " + Preview(*f));
  const std::string type = String(*f, "type", "text.format");
  if (type == "text" || type == "json_object") return {{"type", type}};
  if (type != "json_schema") Fail("text.format.type", "expected text, json_object or json_schema, found \"" + Clip(type) + "\"");
  ojson schema = {{"name", Find(*f, "name") ? (*f)["name"] : ojson("response")}};
  if (const ojson* s = Find(*f, "schema")) schema["schema"] = *s;
  else Fail("text.format.schema", "required for json_schema");
  if (const ojson* s = Find(*f, "strict")) schema["strict"] = *s;
  return {{"type", "json_schema"}, {"json_schema", std::move(schema)}};
}

}  // namespace

void ResponsesInputToMessages(const ojson& input, ojson& messages) {
  if (input.is_string()) {
    messages.push_back({{"role", "user"}, {"content", input}});
    return;
  }
  if (!input.is_array()) Fail("input", "expected a string or an array of items, found " + Preview(input));
  bool open_assistant = false;  // the last message is an assistant turn function_call items may join
  std::string reasoning;        // a reasoning item waiting for its assistant message
  auto assistant = [&]() -> ojson& {
    if (!open_assistant) {
      messages.push_back({{"role", "assistant"}, {"content", ""}});
      open_assistant = true;
    }
    ojson& m = messages.back();
    if (!reasoning.empty()) m["reasoning_content"] = reasoning, reasoning.clear();
    return m;
  };
  for (size_t i = 0; i < input.size(); ++i) {
    const ojson& item = input[i];
    const std::string at = "input[" + std::to_string(i) + "]";
    if (!item.is_object()) Fail(at, "expected an object, found " + Preview(item));
    const std::string type = Find(item, "type") ? String(item, "type", at) : "message";
    if (type == "message") {
      const std::string role = String(item, "role", at);
      const ojson* content = Find(item, "content");
      const std::string text = content ? TextOf(*content, at + ".content") : "";
      if (role == "assistant") {
        // An assistant message after an open assistant turn (text after calls) starts a new one.
        open_assistant = false;
        ojson& m = assistant();
        m["content"] = text;
        continue;
      }
      if (role != "user" && role != "system" && role != "developer") {
        Fail(at + ".role", "expected user, system, developer or assistant, found \"" + Clip(role) + "\"");
      }
      messages.push_back({{"role", role}, {"content", text}});
      open_assistant = false;
    } else if (type == "function_call") {
      ojson& m = assistant();
      const ojson* args = Find(item, "arguments");
      if (args && !args->is_string()) Fail(at + ".arguments", "expected a JSON string, found " + Preview(*args));
      if (!m.contains("tool_calls")) m["tool_calls"] = ojson::array();
      m["tool_calls"].push_back({{"id", String(item, "call_id", at)},
                                 {"type", "function"},
                                 {"function", {{"name", String(item, "name", at)}, {"arguments", args ? *args : ojson("{}")}}}});
    } else if (type == "function_call_output") {
      const ojson* out = Find(item, "output");
      if (!out) Fail(at + ".output", "required");
      messages.push_back({{"role", "tool"}, {"tool_call_id", String(item, "call_id", at)}, {"content", TextOf(*out, at + ".output")}});
      open_assistant = false;
    } else if (type == "reasoning") {
      if (const ojson* s = Find(item, "summary"); s && s->is_array()) {
        for (const ojson& part : *s)
          if (part.is_object() && part.contains("text") && part["text"].is_string()) reasoning += part["text"].get<std::string>();
      }
    } else {
      Fail(at + ".type", "expected message, function_call, function_call_output or reasoning, found \"" + Clip(type) + "\"");
    }
  }
}

ojson ResponsesToChatBody(const ojson& body, const ojson& prior) {
  static const std::set<std::string> kAccepted = {
      "model", "input", "instructions", "tools", "tool_choice", "text", "max_output_tokens", "temperature", "top_p",
      "stream", "parallel_tool_calls", "store", "previous_response_id", "metadata", "user", "truncation",
      "prompt_cache_key", "seed", "cache_salt", "service_tier", "include", "reasoning"};
  for (auto it = body.begin(); it != body.end(); ++it) {
    if (!kAccepted.count(it.key())) Fail(Clip(it.key(), 64), "this field is not supported by Cedar's /v1/responses (see docs/SERVER.md)");
  }
  if (const ojson* t = Find(body, "truncation"); t && *t != "disabled") Fail("truncation", "only \"disabled\" is supported");
  if (const ojson* inc = Find(body, "include"); inc && !(inc->is_array() && inc->empty())) {
    Fail("include", "no extra output data is supported (expected [] or nothing)");
  }
  ojson chat = ojson::object();
  ojson messages = ojson::array();
  if (const ojson* ins = Find(body, "instructions")) {
    if (!ins->is_string()) Fail("instructions", "expected a string, found " + Preview(*ins));
    messages.push_back({{"role", "system"}, {"content", *ins}});
  }
  for (const ojson& m : prior) messages.push_back(m);
  const ojson* input = Find(body, "input");
  if (!input) Fail("input", "required");
  ResponsesInputToMessages(*input, messages);
  if (messages.empty()) Fail("input", "no messages");
  chat["messages"] = std::move(messages);
  if (const ojson* m = Find(body, "model")) chat["model"] = *m;
  if (const ojson* t = Find(body, "tools")) chat["tools"] = ConvertTools(*t);
  if (const ojson* c = Find(body, "tool_choice")) chat["tool_choice"] = ConvertToolChoice(*c);
  if (const ojson* t = Find(body, "text")) {
    ojson f = ConvertFormat(*t);
    if (!f.is_null()) chat["response_format"] = std::move(f);
  }
  if (const ojson* n = Find(body, "max_output_tokens")) chat["max_tokens"] = *n;
  for (const char* key : {"temperature", "top_p", "stream", "parallel_tool_calls", "seed", "cache_salt"}) {
    if (const ojson* v = Find(body, key)) chat[key] = *v;
  }
  if (const ojson* r = Find(body, "reasoning"); r && r->is_object()) {
    if (const ojson* e = Find(*r, "effort")) chat["reasoning_effort"] = *e;
  }
  return chat;
}

nlohmann::json ResponsesOutputJson(const AssistantOutput& output, const std::string& item_id) {
  using json = nlohmann::json;
  json items = json::array();
  if (!output.reasoning.empty()) {
    items.push_back({{"type", "reasoning"},
                     {"id", "rs_" + item_id},
                     {"summary", json::array({{{"type", "summary_text"}, {"text", output.reasoning}}})}});
  }
  if (!output.content.empty() || output.tool_calls.empty()) {
    items.push_back({{"type", "message"},
                     {"id", "msg_" + item_id},
                     {"status", "completed"},
                     {"role", "assistant"},
                     {"content", json::array({{{"type", "output_text"}, {"text", output.content}, {"annotations", json::array()}}})}});
  }
  for (size_t i = 0; i < output.tool_calls.size(); ++i) {
    const ToolCall& c = output.tool_calls[i];
    items.push_back({{"type", "function_call"},
                     {"id", "fc_" + item_id + "_" + std::to_string(i)},
                     {"call_id", c.id},
                     {"name", c.name},
                     {"arguments", c.arguments},
                     {"status", "completed"}});
  }
  return items;
}

ojson ChatAssistantMessage(const AssistantOutput& output) {
  ojson m = {{"role", "assistant"}, {"content", output.content}};
  if (!output.reasoning.empty()) m["reasoning_content"] = output.reasoning;
  if (!output.tool_calls.empty()) {
    ojson calls = ojson::array();
    for (const ToolCall& c : output.tool_calls) {
      calls.push_back({{"id", c.id}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
    }
    m["tool_calls"] = std::move(calls);
  }
  return m;
}

}  // namespace cedar::bridge
