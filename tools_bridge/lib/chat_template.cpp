#include "tools_bridge/lib/chat_template.h"

#include <unordered_set>

#include "tools_bridge/lib/json_limits.h"

namespace cedar::bridge {
namespace {

using nlohmann::json;

std::string Where(size_t index, const Message& m) {
  return "messages[" + std::to_string(index) + "] (" + std::string(RoleName(m.role)) + ")";
}

[[noreturn]] void Fail(const std::string& what) { throw ChatTemplateError(what); }
[[noreturn]] void FailTools(const std::string& what) { throw ChatTemplateError(what, "tools"); }

void ValidateTools(const json& tools) {
  if (tools.is_null()) return;
  if (!tools.is_array()) FailTools("tools: expected an array or null, got " + JsonPreview(tools));
  for (size_t i = 0; i < tools.size(); ++i) {
    const json& t = tools[i];
    const std::string where = "tools[" + std::to_string(i) + "]";
    if (!t.is_object()) FailTools(where + ": expected an object");
    auto fn = t.find("function");
    if (fn == t.end() || !fn->is_object()) FailTools(where + ": missing the \"function\" object");
    auto name = fn->find("name");
    if (name == fn->end() || !name->is_string() || name->get_ref<const std::string&>().empty()) {
      FailTools(where + ".function.name: expected a non-empty string");
    }
  }
}

// Parses and checks a tool call's arguments; returns them parsed.
json CheckToolCall(const std::string& where, const ToolCall& call) {
  if (call.name.empty()) Fail(where + ": empty function name");
  if (call.id.empty()) Fail(where + " (\"" + Clip(call.name) + "\"): empty id");
  if (call.id.find('\n') != std::string::npos) {
    Fail(where + " (\"" + Clip(call.name) + "\"): id contains a newline");
  }
  // Client text: parsed with the depth limit, shown cut (it may be megabytes).
  JsonParseResult parsed = ParseJsonBounded(call.arguments);
  if (parsed.error) {
    Fail(where + " (\"" + Clip(call.name) + "\"): arguments are not valid JSON: " + parsed.error->message +
         "; arguments: " + Clip(call.arguments));
  }
  if (!parsed.value.is_object()) {
    Fail(where + " (\"" + Clip(call.name) + "\"): arguments must be a JSON object, got " + Clip(call.arguments));
  }
  return std::move(parsed.value);
}

}  // namespace

std::string_view RoleName(Role role) {
  switch (role) {
    case Role::kSystem: return "system";
    case Role::kUser: return "user";
    case Role::kAssistant: return "assistant";
    case Role::kTool: return "tool";
  }
  return "unknown";
}

ChatTokens ChatTokens::From(const Tokenizer& tok) {
  return ChatTokens{
      .bos = tok.SpecialId(kBosToken),
      .eos = tok.SpecialId(kEosToken),
      .system = tok.SpecialId(kSystemToken),
      .user = tok.SpecialId(kUserToken),
      .assistant = tok.SpecialId(kAssistantToken),
      .tool = tok.SpecialId(kToolToken),
      .tool_call = tok.SpecialId(kToolCallToken),
      .tool_call_end = tok.SpecialId(kToolCallEndToken),
      .end = tok.SpecialId(kEndToken),
      .tools = tok.SpecialId(kToolsToken),
  };
}

std::string CanonicalJson(const json& value) {
  return value.dump(-1, ' ', /*ensure_ascii=*/false, json::error_handler_t::replace);
}

std::string ToolCallJson(std::string_view name, const json& arguments) {
  return "{\"name\":" + CanonicalJson(json(std::string(name))) +
         ",\"arguments\":" + CanonicalJson(arguments) + "}";
}

ChatTemplate::ChatTemplate(const Tokenizer& tokenizer)
    : tokenizer_(tokenizer), tokens_(ChatTokens::From(tokenizer)) {}

void ChatTemplate::Validate(std::span<const Message> messages, const json& tools) const {
  ValidateTools(tools);
  std::unordered_set<std::string> call_ids;  // ids of tool calls made so far
  for (size_t i = 0; i < messages.size(); ++i) {
    const Message& m = messages[i];
    if (m.role != Role::kSystem && m.role != Role::kUser && m.role != Role::kAssistant &&
        m.role != Role::kTool) {
      Fail("messages[" + std::to_string(i) + "]: unknown role " +
           std::to_string(static_cast<int>(m.role)));
    }
    if (m.role != Role::kAssistant && !m.tool_calls.empty()) {
      Fail(Where(i, m) + ": only assistant messages may have tool_calls");
    }
    if (m.role != Role::kAssistant && m.generated) {
      Fail(Where(i, m) + ": only assistant messages may carry generated ids");
    }
    if (m.role != Role::kTool && !m.tool_call_id.empty()) {
      Fail(Where(i, m) + ": only tool messages may have a tool_call_id");
    }
    for (size_t c = 0; c < m.tool_calls.size(); ++c) {
      CheckToolCall(Where(i, m) + ".tool_calls[" + std::to_string(c) + "]", m.tool_calls[c]);
      call_ids.insert(m.tool_calls[c].id);
    }
    if (m.generated) {
      for (TokenId id : *m.generated) {
        if (!tokenizer_.InVocab(id)) {
          Fail(Where(i, m) + ": generated id " + std::to_string(id) + " is outside the vocab [0, " +
               std::to_string(tokenizer_.vocab_size()) + ")");
        }
      }
    }
    if (m.role == Role::kTool && !call_ids.contains(m.tool_call_id)) {
      Fail(Where(i, m) + ": tool_call_id \"" + Clip(m.tool_call_id) +
           "\" answers no tool call of an earlier assistant message");
    }
  }
}

void ChatTemplate::AppendText(std::string_view text, TokenIds& out) const {
  TokenIds ids = tokenizer_.Encode(text);
  out.insert(out.end(), ids.begin(), ids.end());
}

// REQUIRES: `m` passed Validate.
void ChatTemplate::AppendMessage(const Message& m, TokenIds& out) const {
  switch (m.role) {
    case Role::kSystem: out.push_back(tokens_.system); break;
    case Role::kUser: out.push_back(tokens_.user); break;
    case Role::kAssistant: out.push_back(tokens_.assistant); break;
    case Role::kTool: out.push_back(tokens_.tool); break;
  }
  if (m.generated) {
    out.insert(out.end(), m.generated->begin(), m.generated->end());
    if (m.generated->empty() || m.generated->back() != tokens_.end) out.push_back(tokens_.end);
    return;
  }
  if (m.role == Role::kTool) {
    AppendText(m.tool_call_id, out);
    AppendText("\n", out);
  }
  AppendText(m.content, out);
  for (const ToolCall& call : m.tool_calls) {
    out.push_back(tokens_.tool_call);
    // Validate parsed these arguments within the depth limit, so this parse succeeds.
    AppendText(ToolCallJson(call.name, ParseJsonBounded(call.arguments).value), out);
    out.push_back(tokens_.tool_call_end);
  }
  out.push_back(tokens_.end);
}

TokenIds ChatTemplate::RenderStart(const json& tools) const {
  TokenIds out{tokens_.bos};
  if (tools.is_array() && !tools.empty()) {
    out.push_back(tokens_.tools);
    AppendText(CanonicalJson(tools), out);
    out.push_back(tokens_.end);
  }
  return out;
}

TokenIds ChatTemplate::Render(std::span<const Message> messages, const json& tools) const {
  Validate(messages, tools);
  TokenIds out = RenderStart(tools);
  for (const Message& m : messages) AppendMessage(m, out);
  return out;
}

TokenIds ChatTemplate::RenderGenerationPrompt(std::span<const Message> messages,
                                              const json& tools) const {
  TokenIds out = Render(messages, tools);
  out.push_back(tokens_.assistant);
  return out;
}

}  // namespace cedar::bridge
