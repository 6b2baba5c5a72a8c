// One streamed turn's ids -> bridge::StreamDeltas, for every streaming API (the chat chunks of
// turn_format.cpp, the Responses and Messages events of event_stream.cpp): tool calls parsed
// (the cedar format, or deepseek_v41's DSML after the ids are decoded to text), and content
// held back while it could still be the start of a stop string (StopHoldback), so streamed text
// equals the non-streamed text. One copy, so every API streams the same deltas.
//
// Thread contract: one instance per stream, used from the stream's consumer thread only.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "tools_bridge/lib/dsml_parser.h"
#include "tools_bridge/lib/tool_calls.h"
#include "server/stop_strings.h"
#include "server/turn_format.h"

namespace cedar::server {

class DeltaStream {
 public:
  // `meta`: the turn's format (dsml, thinking) and call-id style; `stop`: the request's stop strings.
  DeltaStream(const bridge::Tokenizer& tokenizer, const TurnMeta& meta, std::vector<std::string> stop);

  // The deltas one generated id completes (content already held back as needed).
  std::vector<bridge::StreamDelta> Push(int32_t id);
  // End of the turn: what the parsers held, then the held content less `matched_stop`.
  std::vector<bridge::StreamDelta> Finish(const std::string& matched_stop);
  int tool_call_count() const;

 private:
  // Reasoning passes; content goes through the holdback; anything else (a tool call) first
  // flushes the held content: a stop string cannot span a tool call.
  std::vector<bridge::StreamDelta> Held(std::vector<bridge::StreamDelta> deltas);

  std::optional<bridge::ToolCallStreamParser> parser_;  // cedar format
  std::optional<bridge::StreamDecoder> decoder_;        // deepseek_v41: ids -> text ...
  std::optional<bridge::dsml::StreamParser> dsml_;      // ... -> deltas
  StopHoldback holdback_;
};

}  // namespace cedar::server
