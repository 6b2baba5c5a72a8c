// Chat template: renders OpenAI-style messages (and the request's `tools`) into token ids.
//
// Grammar (ids in <|...|> are single special ids; "..." is text encoded with Encode, which
// never yields special ids, so message text cannot forge structure):
//
//   prompt        = "<|bos|>" , [ tools_block ] , { message } ;
//   gen_prompt    = prompt , "<|assistant|>" ;                  (* the model continues here *)
//   tools_block   = "<|tools|>" , canonical_json(tools) , "<|end|>" ;   (* if tools non-empty *)
//   message       = system | user | assistant | tool ;
//   system        = "<|system|>" , text , "<|end|>" ;
//   user          = "<|user|>" , text , "<|end|>" ;
//   assistant     = "<|assistant|>" , ( generated | body , "<|end|>" ) ;
//   body          = text , { tool_call } ;                      (* content first, then calls *)
//   tool_call     = "<|tool_call|>" , call_json , "<|/tool_call|>" ;
//   call_json     = '{"name":' , json_string , ',"arguments":' , canonical_json(object) , '}' ;
//   tool          = "<|tool|>" , tool_call_id , "\n" , text , "<|end|>" ;
//   generated     = raw ids , [ "<|end|>" ] ;   (* verbatim; <|end|> added unless last id *)
//
// canonical_json is nlohmann::json::dump(): no whitespace, object keys sorted by byte order,
// strings as UTF-8 (only the escapes JSON requires). call_json puts "name" before "arguments"
// so a streaming parser knows the name first. The model stops with <|end|> (or <|eos|>).
//
// Why this shape:
//   - Prefix stability. Each message renders on its own and is appended, and the tool schemas
//     come right after <|bos|>, before every message. So Render(m[0..k)) is a prefix of
//     Render(m[0..k+1)): each turn extends the previous prompt and the KV cache of the shared
//     prefix is reused. The tool schemas sit in that shared prefix.
//   - Generation continuity. Render(m + {assistant}) == RenderGenerationPrompt(m) + the ids the
//     model produced (+ <|end|>), whenever the caller hands back those raw ids in
//     Message::generated, whatever the model emitted (odd JSON spacing, text after a call,
//     malformed calls). Without them the canonical rendering is used; it reproduces the
//     generated ids exactly when the model wrote canonical output (what it is trained on).
//   - Tool results carry the tool_call_id they answer ("\n" ends it; ids may not contain one).
//
// Thread contract: a ChatTemplate is immutable after construction; use it from any thread.
#pragma once
#include <array>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "tools_bridge/lib/tokenizer.h"

namespace cedar::bridge {

enum class Role { kSystem, kUser, kAssistant, kTool };

std::string_view RoleName(Role role);  // "system", "user", "assistant", "tool"

// One function call requested by the assistant, in OpenAI's shape (tool_calls[i]).
struct ToolCall {
  std::string id;         // e.g. "call_0"; what a later tool message's tool_call_id names
  std::string name;       // function name
  std::string arguments;  // JSON text of an object, e.g. {"city":"Oslo"}
  bool operator==(const ToolCall&) const = default;
};

struct Message {
  Role role = Role::kUser;
  std::string content;               // text; may be empty (e.g. assistant with only calls)
  std::vector<ToolCall> tool_calls;  // assistant only
  std::string tool_call_id;          // tool only: the call this result answers
  // Assistant only, optional: the ids the model generated after <|assistant|> (stop id
  // included, if any), kept by the caller. When set they are rendered verbatim instead of
  // content/tool_calls, which still supply the call ids later tool messages answer.
  std::optional<TokenIds> generated;
  // Assistant only: the reasoning (OpenAI-compatible `reasoning_content`). The cedar template
  // ignores it; the deepseek_v41 encoding renders it inside <think>...</think> where the
  // released encoder keeps reasoning (dsml_encoding.h).
  std::string reasoning;
  // Assistant only, optional, deepseek_v41 encoding: the exact text the model generated after
  // the generation prompt (reasoning, "</think>", content and DSML calls; no end-of-sentence
  // token). When set it is rendered verbatim instead of reasoning/content/tool_calls, so the
  // next prompt holds the bytes the model produced even if the client re-serialised the
  // calls (dsml_encoding.h, "Byte-exact replay").
  std::optional<std::string> raw;
  bool operator==(const Message&) const = default;
};

// A request the template cannot render; what() names the message and what is wrong, param()
// the request field at fault ("messages" or "tools"), for the API's error `param`.
class ChatTemplateError : public std::invalid_argument {
 public:
  explicit ChatTemplateError(const std::string& what, std::string param = "messages")
      : std::invalid_argument(what), param_(std::move(param)) {}
  const std::string& param() const { return param_; }

 private:
  std::string param_;
};

// The special ids the template and the tool-call parser use, looked up once.
struct ChatTokens {
  TokenId bos, eos, system, user, assistant, tool, tool_call, tool_call_end, end, tools;
  // Throws std::invalid_argument if `tokenizer` lacks one of kChatSpecialTokens.
  static ChatTokens From(const Tokenizer& tokenizer);
  bool IsStop(TokenId id) const { return id == end || id == eos; }
};

// canonical_json above: nlohmann dump, no whitespace, sorted keys, invalid UTF-8 replaced.
std::string CanonicalJson(const nlohmann::json& value);
// call_json above: {"name":<name>,"arguments":<canonical arguments>}.
std::string ToolCallJson(std::string_view name, const nlohmann::json& arguments);

class ChatTemplate {
 public:
  // `tokenizer` must outlive the template. Throws std::invalid_argument if it lacks one of
  // kChatSpecialTokens.
  explicit ChatTemplate(const Tokenizer& tokenizer);

  // Throws ChatTemplateError for: a role outside Role; tool_calls on a non-assistant message;
  // a tool call with an empty name, an id that is empty or contains "\n", or arguments that
  // are not a JSON object; a tool message whose tool_call_id answers no tool call of an
  // earlier assistant message; `generated` on a non-assistant message or holding an id
  // outside the vocab; `tools` that is neither null nor an array of objects each with
  // function.name. A valid conversation's every prefix is valid too.
  void Validate(std::span<const Message> messages, const nlohmann::json& tools = nullptr) const;

  // `prompt` of the grammar. Validates first. `tools` is the request's OpenAI `tools` array
  // (null or [] renders no tools block).
  TokenIds Render(std::span<const Message> messages, const nlohmann::json& tools = nullptr) const;
  // `gen_prompt`: Render(...) followed by <|assistant|>, ready for the model to continue.
  TokenIds RenderGenerationPrompt(std::span<const Message> messages,
                                  const nlohmann::json& tools = nullptr) const;

  // Rendering one message at a time, for callers that need every prefix's rendering (each
  // is a prefix of the next): RenderStart(tools) is Render({}, tools), and RenderAppend adds
  // one message, so RenderStart + RenderAppend(m[0]) ... RenderAppend(m[k-1]) == Render(m[0..k)).
  // REQUIRES: Validate(messages, tools) passed for the whole list (then each prefix is valid).
  TokenIds RenderStart(const nlohmann::json& tools) const;
  void RenderAppend(const Message& message, TokenIds& out) const { AppendMessage(message, out); }

  // Ids that end an assistant turn: <|end|> and <|eos|>.
  std::array<TokenId, 2> stop_ids() const { return {tokens_.end, tokens_.eos}; }
  const ChatTokens& tokens() const { return tokens_; }
  const Tokenizer& tokenizer() const { return tokenizer_; }

 private:
  void AppendText(std::string_view text, TokenIds& out) const;
  void AppendMessage(const Message& message, TokenIds& out) const;

  const Tokenizer& tokenizer_;
  ChatTokens tokens_;
};

}  // namespace cedar::bridge
