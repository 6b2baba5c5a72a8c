// The model's deepseek_v41 output text -> OpenAI's assistant message {reasoning_content,
// content, tool_calls}, for a whole output or streamed in chunks of any size (a chunk may end
// inside a tag or inside a UTF-8 character).
//
// What the text means (the released format, read leniently; docs/chat-encoding.md §Parsing):
//   - thinking mode: reasoning up to "</think>", then content. Chat mode: content only.
//   - content up to "<｜DSML｜ calls>" (the "\n\n" before it is not content), then invokes:
//       <｜DSML｜ invoke name="N">\n <｜DSML｜ parameter name="K" string="true|false">V</｜DSML｜
//       parameter> ... </｜DSML｜ invoke>   ...   </｜DSML｜ calls>
//     Each complete invoke is one tool call: name N (kept whole, "ns::tool" included), arguments
//     the Python-JSON object (py_json.h) of its parameters in order: string="true" values as
//     strings, string="false" values parsed as JSON — exactly the released parser's output.
//   - "<｜end▁of▁sentence｜>" ends the message; text after it is ignored.
// Leniency (the released parser raises on all of these; we never throw):
//   - a calls block inside the reasoning (no "</think>" before it) ends the reasoning;
//   - the V4 spellings (<｜DSML｜tool_calls>, <｜DSML｜invoke>, <｜DSML｜parameter>) are read too;
//   - a parameter without string="..." is JSON if it parses, else a string; a string="false"
//     value that is not JSON is kept as a string; a repeated parameter keeps its last value;
//   - an invoke that is malformed or cut off (also by the end of the output) is content, shown
//     as its text (with the block's opener when no call of the block was accepted), and parsing
//     continues as content; text after "</｜DSML｜ calls>" is content;
//   - reasoning never closed stays reasoning.
// Streaming: deltas accumulated with ApplyDelta equal the whole-output parse for every way of
// cutting the text. Text is held back only while it may still be the start of a tag (or of the
// "\n\n" before a calls block) or of a UTF-8 character; a tool call comes out whole (a start
// delta and one arguments delta) once its </｜DSML｜ invoke> arrives, since until then it may
// still turn out malformed.
//
// Thread contract: ParseOutput is pure; a StreamParser belongs to one stream.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "tools_bridge/lib/tool_calls.h"

namespace cedar::bridge::dsml {

class StreamParser {
 public:
  // `thinking`: the prompt ended with "<think>" (the output starts with reasoning).
  explicit StreamParser(bool thinking, ToolCallIds call_ids = {});

  // Consumes generated text; returns the deltas it completes. Text after the end-of-sentence
  // token is ignored. Never throws (but std::bad_alloc).
  std::vector<StreamDelta> Push(std::string_view text);
  // End of generation: flushes everything held back (an unfinished call becomes content).
  // Idempotent.
  std::vector<StreamDelta> Finish();

  bool done() const { return done_; }        // end-of-sentence seen or Finish called
  bool stopped() const { return stopped_; }  // end-of-sentence seen
  int tool_call_count() const { return calls_; }
  // The text generated so far, without the end-of-sentence token and what follows it: what
  // Message::raw takes for byte-exact replay.
  const std::string& raw() const { return raw_; }

 private:
  enum class State { kReasoning, kContent, kCalls, kDone };
  void Run(bool final, std::vector<StreamDelta>& out);
  bool RunText(bool final, std::vector<StreamDelta>& out);   // false: wait for more text
  bool RunCalls(bool final, std::vector<StreamDelta>& out);  // false: wait for more text
  void Consume(size_t n);
  int ParseInvoke(std::string_view s, bool final, ToolCall* call, size_t* consumed);  // a Match
  void Stop(size_t eos_at);

  State state_;
  ToolCallIds call_ids_;
  std::string buf_;      // text received and not yet consumed
  size_t base_ = 0;      // offset of buf_[0] in raw_
  std::string raw_;
  std::string opener_;   // the calls opener (and the "\n\n" before it) while no call is accepted
  // What is known of the invoke being read (offsets into buf_ after its leading whitespace,
  // which stays put until the invoke is accepted or rejected).
  struct InvokeProgress {
    bool header = false;          // "<｜DSML｜ invoke name=...>" read
    std::string name;
    nlohmann::ordered_json args = nlohmann::ordered_json::object();  // parameters read so far
    size_t pos = 0;               // where reading resumes
    size_t scan_param = SIZE_MAX; // the parameter whose value search stopped at `scan`
    size_t scan = 0;
  };
  InvokeProgress progress_;
  int calls_ = 0;
  bool done_ = false;
  bool stopped_ = false;
};

// The whole-output form; `stopped` tells whether the end-of-sentence token was seen.
AssistantOutput ParseOutput(std::string_view text, bool thinking, ToolCallIds call_ids = {});

}  // namespace cedar::bridge::dsml
