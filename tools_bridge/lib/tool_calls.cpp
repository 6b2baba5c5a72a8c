#include "tools_bridge/lib/tool_calls.h"

#include "tools_bridge/lib/json_limits.h"

namespace cedar::bridge {
namespace {

using nlohmann::json;

// Deeper call JSON is treated as malformed: it keeps dump()'s recursion bounded whatever the
// model emits (json_limits.h stops the parser at the first container past the limit).
constexpr int kMaxCallJsonDepth = kMaxJsonDepth;

struct ParsedCall {
  std::string name;
  std::string arguments;  // canonical JSON text
};

// A well-formed call_json (see tool_calls.h), or nullopt. Never throws but std::bad_alloc.
std::optional<ParsedCall> ParseCallJson(const std::string& text) {
  JsonParseResult parsed = ParseJsonBounded(text, kMaxCallJsonDepth);
  const json& value = parsed.value;
  if (parsed.error || value.is_discarded() || !value.is_object() || value.size() != 2) {
    return std::nullopt;
  }
  auto name = value.find("name");
  auto args = value.find("arguments");
  if (name == value.end() || args == value.end() || !name->is_string() || !args->is_object()) {
    return std::nullopt;
  }
  std::string name_text = name->get<std::string>();
  if (name_text.empty()) return std::nullopt;
  return ParsedCall{std::move(name_text), CanonicalJson(*args)};
}

// What a non-stop id contributes to content, outside a call.
std::string_view ContentBytes(const Tokenizer& tok, TokenId id) {
  if (!tok.InVocab(id)) return kReplacementChar;
  if (auto name = tok.SpecialName(id)) return *name;
  return tok.TokenBytes(id);
}

// What an ordinary id contributes inside a call.
std::string_view CallBytes(const Tokenizer& tok, TokenId id) {
  return tok.InVocab(id) ? tok.TokenBytes(id) : kReplacementChar;
}

std::string CallId(const ToolCallIds& ids, int n) {
  return ids.prefix + std::to_string(ids.next + static_cast<uint64_t>(n));
}

std::string OpenCallText(const std::string& call) { return std::string(kToolCallToken) + call; }

}  // namespace

// The reference reading of tool_calls.h, written plainly; the stream parser below must agree.
AssistantOutput ParseAssistantOutput(const Tokenizer& tok, std::span<const TokenId> ids,
                                     ToolCallIds call_ids) {
  const ChatTokens t = ChatTokens::From(tok);
  AssistantOutput out;
  std::string content;   // raw bytes, repaired at the end
  bool in_call = false;  // after an open <|tool_call|>
  std::string call;      // the bytes of that call so far
  for (TokenId id : ids) {
    if (t.IsStop(id)) {
      out.stopped = true;
      break;
    }
    if (in_call) {
      if (id == t.tool_call_end) {
        if (auto parsed = ParseCallJson(call)) {
          const int n = static_cast<int>(out.tool_calls.size());
          out.tool_calls.push_back({CallId(call_ids, n), parsed->name, parsed->arguments});
        } else {
          content += OpenCallText(call) + std::string(kToolCallEndToken);
        }
        in_call = false;
        continue;
      }
      if (!tok.IsSpecial(id)) {
        call.append(CallBytes(tok, id));
        continue;
      }
      content += OpenCallText(call);  // another special cuts the call short
      in_call = false;
    }
    if (id == t.tool_call) {
      in_call = true;
      call.clear();
    } else {
      content.append(ContentBytes(tok, id));
    }
  }
  if (in_call) content += OpenCallText(call);
  out.content = RepairUtf8(content);
  return out;
}

Message ToMessage(const AssistantOutput& output, std::optional<TokenIds> generated) {
  Message m;
  m.role = Role::kAssistant;
  m.content = output.content;
  m.tool_calls = output.tool_calls;
  m.generated = std::move(generated);
  return m;
}

void ApplyDelta(const StreamDelta& delta, AssistantOutput& output) {
  switch (delta.kind) {
    case StreamDelta::Kind::kContent: output.content += delta.text; break;
    case StreamDelta::Kind::kReasoning: output.reasoning += delta.text; break;
    case StreamDelta::Kind::kToolCallStart:
      if (static_cast<int>(output.tool_calls.size()) <= delta.index) {
        output.tool_calls.resize(delta.index + 1);
      }
      output.tool_calls[delta.index].id = delta.id;
      output.tool_calls[delta.index].name = delta.name;
      break;
    case StreamDelta::Kind::kToolCallArguments:
      if (static_cast<int>(output.tool_calls.size()) <= delta.index) {
        output.tool_calls.resize(delta.index + 1);
      }
      output.tool_calls[delta.index].arguments += delta.text;
      break;
  }
}

ToolCallStreamParser::ToolCallStreamParser(const Tokenizer& tokenizer, ToolCallIds call_ids)
    : tokenizer_(tokenizer), tokens_(ChatTokens::From(tokenizer)), call_ids_(std::move(call_ids)) {}

void ToolCallStreamParser::Content(std::string_view bytes) { utf8_.Push(bytes, content_); }

void ToolCallStreamParser::TakeContent(std::vector<StreamDelta>& out) {
  if (content_.empty()) return;
  StreamDelta delta;
  delta.text = std::move(content_);
  out.push_back(std::move(delta));
  content_.clear();
}

void ToolCallStreamParser::CloseCall(std::vector<StreamDelta>& out) {
  in_call_ = false;
  if (auto parsed = ParseCallJson(call_)) {
    StreamDelta start;
    start.kind = StreamDelta::Kind::kToolCallStart;
    start.index = calls_++;
    start.id = CallId(call_ids_, start.index);
    start.name = std::move(parsed->name);
    StreamDelta args;
    args.kind = StreamDelta::Kind::kToolCallArguments;
    args.index = start.index;
    args.text = std::move(parsed->arguments);
    out.push_back(std::move(start));
    out.push_back(std::move(args));
  } else {
    Content(OpenCallText(call_));
    Content(kToolCallEndToken);
    TakeContent(out);
  }
}

void ToolCallStreamParser::Flush(std::vector<StreamDelta>& out) {
  if (in_call_) Content(OpenCallText(call_));
  in_call_ = false;
  utf8_.Finish(content_);
  TakeContent(out);
  done_ = true;
}

std::vector<StreamDelta> ToolCallStreamParser::Push(TokenId id) {
  std::vector<StreamDelta> out;
  if (done_) return out;
  if (tokens_.IsStop(id)) {
    stopped_ = true;
    Flush(out);
    return out;
  }
  if (in_call_) {
    if (id == tokens_.tool_call_end) {
      CloseCall(out);
      return out;
    }
    if (!tokenizer_.IsSpecial(id)) {
      call_.append(CallBytes(tokenizer_, id));
      return out;
    }
    Content(OpenCallText(call_));  // another special cuts the call short
    in_call_ = false;
  }
  if (id == tokens_.tool_call) {
    in_call_ = true;
    call_.clear();
  } else {
    Content(ContentBytes(tokenizer_, id));
  }
  TakeContent(out);
  return out;
}

std::vector<StreamDelta> ToolCallStreamParser::Finish() {
  std::vector<StreamDelta> out;
  if (!done_) Flush(out);
  return out;
}

}  // namespace cedar::bridge
