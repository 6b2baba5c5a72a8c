// A streamed turn for the APIs whose events are not chat-completion chunks (/v1/responses,
// /v1/messages): the turn's ids become bridge::StreamDeltas (tool calls parsed, content held
// back while it could still be the start of a stop string, exactly as the chat stream does)
// and an EventFormatter turns those into the API's Server-Sent Events.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tools_bridge/lib/dsml_parser.h"
#include "tools_bridge/lib/tool_calls.h"
#include "server/http_message.h"
#include "server/live_turn.h"
#include "server/stop_strings.h"
#include "server/turn_format.h"

namespace cedar::server {

// "event: <name>\ndata: <json>\n\n" (the Responses and Messages APIs name their events).
std::string NamedSseEvent(const std::string& name, const nlohmann::json& data);

// The API's events for one turn. Called on the stream's consumer thread, in order: Start, then
// Deltas any number of times, then Finish (or Error).
class EventFormatter {
 public:
  virtual ~EventFormatter() = default;
  virtual std::string Start() = 0;
  virtual std::string Deltas(const std::vector<bridge::StreamDelta>& deltas) = 0;
  // After the last delta. `output_tokens`: ids the model generated.
  virtual std::string Finish(const LiveTurn& turn, int64_t output_tokens, bool has_tool_calls) = 0;
  virtual std::string Error(const session::TurnResult& result) = 0;
};

std::shared_ptr<BodySource> MakeEventStream(std::shared_ptr<LiveTurn> turn, const bridge::Tokenizer& tokenizer,
                                            const TurnMeta& meta, std::vector<std::string> stop,
                                            std::unique_ptr<EventFormatter> format);

}  // namespace cedar::server
