// Tool-call parsing: the ids the model generated after <|assistant|> -> OpenAI's assistant
// message {content, tool_calls[]}, for a whole output or streamed one id at a time.
//
// What the generated ids mean (the `body` of chat_template.h, read leniently):
//   - The first stop id (<|end|> or <|eos|>) ends the message; ids after it are ignored.
//   - "<|tool_call|>" J "<|/tool_call|>" is a tool call when the text J parses as a JSON object
//     with exactly the keys "name" (a non-empty string) and "arguments" (an object). Its
//     arguments become canonical JSON text (CanonicalJson) and its id is the next one from
//     ToolCallIds.
//   - Everything else is content, never an error: a malformed call (invalid JSON, missing or
//     empty name, other keys, no closing <|/tool_call|> before the end or before another
//     special) is content, shown as "<|tool_call|>" + J [+ "<|/tool_call|>"]; other special
//     ids show as their names; unused ids show as nothing; ids outside the vocab as U+FFFD.
//   - Content is the bytes of all content pieces joined, repaired to valid UTF-8.
// So a parse never throws on any input (only std::bad_alloc can escape).
//
// Streaming: ToolCallStreamParser yields deltas whose accumulation (ApplyDelta) equals the
// whole-output parse of the same ids, for every prefix. Content streams as soon as each UTF-8
// character is complete. A tool call is held back until its <|/tool_call|>, because until
// then it may still turn out malformed (and so be content); it then comes out as a start
// delta (index, id, name) and one argument fragment — OpenAI's delta.tool_calls shape.
//
// Thread contract: the free functions are pure; a ToolCallStreamParser belongs to one stream.
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "tools_bridge/lib/chat_template.h"
#include "tools_bridge/lib/tokenizer.h"

namespace cedar::bridge {

// Tool call ids are `prefix` + a counter starting at `next`: "call_0", "call_1", ... Pass a
// per-conversation prefix or counter (e.g. the number of calls so far) to keep ids unique.
struct ToolCallIds {
  std::string prefix = "call_";
  uint64_t next = 0;
};

// One assistant turn as the client sees it.
struct AssistantOutput {
  std::string content;               // text outside tool calls (valid UTF-8)
  std::vector<ToolCall> tool_calls;  // in generation order
  std::string reasoning;             // deepseek_v41 only: the text inside <think>...</think>
  bool stopped = false;              // a stop id was seen (false: cut off, e.g. max_tokens)
  bool operator==(const AssistantOutput&) const = default;
};

// Parses a whole generated output. Throws std::invalid_argument only if `tokenizer` lacks one
// of kChatSpecialTokens; any ids are fine.
AssistantOutput ParseAssistantOutput(const Tokenizer& tokenizer, std::span<const TokenId> ids,
                                     ToolCallIds call_ids = {});

// The message to put back into the conversation for this output. With `generated` set the
// template renders those ids verbatim (exact continuation of the generation prompt).
Message ToMessage(const AssistantOutput& output, std::optional<TokenIds> generated = {});

// One streaming event, mapping onto OpenAI's chunk `choices[0].delta`.
struct StreamDelta {
  enum class Kind {
    kContent,            // delta.content = text
    kToolCallStart,      // delta.tool_calls = [{index, id, type:"function", function:{name}}]
    kToolCallArguments,  // delta.tool_calls = [{index, function:{arguments: text}}]
    kReasoning,          // delta.reasoning_content = text (deepseek_v41 thinking mode)
  };
  Kind kind = Kind::kContent;
  std::string text;  // kContent/kReasoning: the text; kToolCallArguments: an arguments fragment
  int index = 0;     // tool calls: position of the call in this message (0, 1, ...)
  std::string id;    // kToolCallStart
  std::string name;  // kToolCallStart
  bool operator==(const StreamDelta&) const = default;
};

// Folds a delta into `output` the way an OpenAI client accumulates a stream (stopped is left
// alone; read it from the parser).
void ApplyDelta(const StreamDelta& delta, AssistantOutput& output);

class ToolCallStreamParser {
 public:
  // `tokenizer` must outlive the parser. Throws std::invalid_argument if it lacks one of
  // kChatSpecialTokens.
  explicit ToolCallStreamParser(const Tokenizer& tokenizer, ToolCallIds call_ids = {});

  // Consumes one generated id; returns the deltas it completes (often none). After a stop id
  // everything is flushed and later ids are ignored. Never throws (but std::bad_alloc).
  std::vector<StreamDelta> Push(TokenId id);
  // End of generation without a stop id (e.g. max_tokens): flushes an unterminated call and an
  // unfinished UTF-8 character as content. Idempotent.
  std::vector<StreamDelta> Finish();

  bool done() const { return done_; }        // a stop id was seen or Finish was called
  bool stopped() const { return stopped_; }  // a stop id was seen
  int tool_call_count() const { return calls_; }

 private:
  void Content(std::string_view bytes);
  void CloseCall(std::vector<StreamDelta>& out);
  void Flush(std::vector<StreamDelta>& out);
  void TakeContent(std::vector<StreamDelta>& out);

  const Tokenizer& tokenizer_;
  ChatTokens tokens_;
  ToolCallIds call_ids_;
  Utf8Assembler utf8_;
  std::string content_;   // complete UTF-8 not yet returned
  bool in_call_ = false;  // after an open <|tool_call|>
  std::string call_;      // the bytes of that call so far
  int calls_ = 0;
  bool done_ = false;
  bool stopped_ = false;
};

}  // namespace cedar::bridge
