// The released DeepSeek-V4.1 chat encoding ("deepseek_v41"), at the text level: messages in,
// prompt text out, with the special tokens written as their literal strings (the BPE tokenizer
// matches them before merging). It renders exactly what the released encoder
// (encoding/encoding.py in the model repository, revision dba1be0a) renders; the format, its
// sources and the test vectors are in docs/chat-encoding.md. Summary:
//
//   prompt   = BOS , { message } ;
//   item 0   : "<｜System｜>" , effort? , system content , ["\n\n" , tools_block]   (system first)
//              "<｜System｜>" , effort , <the item>                      (thinking, not system)
//   effort   = "Reasoning Effort: N (range 1-100, the higher the value, the more thorough the
//              reasoning)\n\n"                                          (thinking mode only)
//   system   = "<｜System｜>" , content               (a system message after index 0)
//   user     = "<｜User｜>" , block , { "\n\n" , block } ;  consecutive user and tool messages
//              merge into one user turn; a tool result block is "<tool_result>" text
//              "</tool_result>", the blocks of one turn ordered by the calls they answer
//   assistant= [ reasoning , "</think>" ] , content , [ "\n\n" , calls ] , EOS
//   calls    = "<｜DSML｜ calls>\n" , invoke , { "\n" , invoke } , "\n</｜DSML｜ calls>"
//   invoke   = "<｜DSML｜ invoke name=\"NAME\">\n" , param , { "\n" , param } , "\n</｜DSML｜ invoke>"
//   param    = "<｜DSML｜ parameter name=\"KEY\" string=\"true\">" raw text "</｜DSML｜ parameter>"
//            | "<｜DSML｜ parameter name=\"KEY\" string=\"false\">" json "</｜DSML｜ parameter>"
//   after a user turn (or a system message past index 0) that is last or followed by an
//   assistant: "<｜Assistant｜>" then "<think>" (thinking, reasoning kept from here) or "</think>".
//
// Reasoning of assistant turns before the last user turn is dropped in thinking mode
// (drop_thinking), except when the request has tools: then every turn keeps its reasoning,
// which is what makes agent loops prefix-stable.
//
// Byte-exact replay: an assistant Message with `raw` set (the exact text the model generated
// after the generation prompt) renders as that text, so the next prompt continues the bytes the
// model produced, however the client re-serialised its calls. RenderSegments marks where each
// such text sits, so a caller holding the exact sampled token ids (per session, keyed by tool
// call id) can splice them in instead of re-tokenising the text; `canonical_tool_call_turns`
// counts the assistant turns with calls that had to be rendered canonically (the fallback).
//
// Thread contract: pure functions; no state.
#pragma once
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "tools_bridge/lib/chat_template.h"

namespace cedar::bridge::dsml {

// The literal strings of the special tokens the encoding writes (fullwidth bars U+FF5C,
// U+2581 "▁" inside BOS/EOS).
inline constexpr std::string_view kBos = "<｜begin▁of▁sentence｜>";
inline constexpr std::string_view kEos = "<｜end▁of▁sentence｜>";
inline constexpr std::string_view kSystem = "<｜System｜>";
inline constexpr std::string_view kUser = "<｜User｜>";
inline constexpr std::string_view kAssistant = "<｜Assistant｜>";
inline constexpr std::string_view kThinkStart = "<think>";
inline constexpr std::string_view kThinkEnd = "</think>";
inline constexpr std::string_view kDsml = "｜DSML｜";
inline constexpr std::string_view kCallsOpen = "<｜DSML｜ calls>";
inline constexpr std::string_view kCallsClose = "</｜DSML｜ calls>";
inline constexpr std::string_view kInvokeClose = "</｜DSML｜ invoke>";
inline constexpr std::string_view kParamClose = "</｜DSML｜ parameter>";

// Encoder settings (the released encode_messages arguments).
struct Options {
  bool thinking = false;     // thinking_mode: true = "thinking", false = "chat"
  int reasoning_effort = 75; // 1..100, rendered in thinking mode only ("high" = 75, the default)
  bool drop_thinking = true; // drop reasoning of turns before the last user turn (no tools)
  bool add_bos = true;       // add_default_bos_token
};

// "low" -> 50, "high" -> 75, "max" -> 100, or an integer "1".."100". Throws ChatTemplateError
// naming the value otherwise.
int ParseReasoningEffort(std::string_view value);

// One piece of a rendered prompt. `message` is -1 for template text, else the index (into the
// messages passed in) of the assistant message whose `raw` text this piece is, starting at byte
// `raw_offset` of it (0, or just after "</think>" when that turn's reasoning is dropped).
struct Segment {
  std::string text;
  int message = -1;
  size_t raw_offset = 0;
  bool operator==(const Segment&) const = default;
};

struct Rendered {
  std::vector<Segment> segments;   // adjacent template text is merged into one segment
  int raw_turns = 0;                 // assistant turns rendered from `raw`
  int canonical_tool_call_turns = 0; // assistant turns with tool calls rendered canonically
  std::string Text() const;          // all segments joined
};

// Renders `messages` (OpenAI roles; a tool message's content is its result) with the request's
// OpenAI `tools` array (null or [] for none; kept in client key order, hence ordered_json).
// Tools attach to the first message when it is a system message, else to an empty system
// message put in front (what OpenAI-compatible servers do; the encoder reads tools from a
// system message). Ends with the generation prompt when the last message is a user or tool
// message. Throws ChatTemplateError for: a tool whose `function` is not an object with a
// string `name`; reasoning_effort outside 1..100.
Rendered RenderSegments(std::span<const Message> messages, const nlohmann::ordered_json& tools,
                        const Options& options);
std::string Render(std::span<const Message> messages, const nlohmann::ordered_json& tools,
                   const Options& options);

// The canonical DSML of calls, as the encoder renders them after an assistant's content:
// "<｜DSML｜ calls>\n" ... "\n</｜DSML｜ calls>" (no leading "\n\n"). `arguments` are JSON
// text; an object renders one parameter per key in order (strings raw with string="true",
// other values as Python JSON with string="false"); a JSON string holding an object is decoded
// once more; anything else renders as one string parameter "arguments" holding the text.
std::string RenderCalls(std::span<const ToolCall> calls);

// The tools block appended to the system prompt ("## Tools\n\n..." to the closing line).
std::string RenderTools(const nlohmann::ordered_json& tools);

}  // namespace cedar::bridge::dsml
