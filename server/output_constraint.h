// Grammar-constrained decoding for the turn endpoints: reads `response_format`,
// `parallel_tool_calls` and `tool_choice` and makes the turn's logits processor
// (session::TurnRequest::logits_processor), which masks every step's logits so the output
// follows the grammar of tools_bridge/lib/tool_call_grammar.h. docs/SERVER.md, "Structured
// output and tool_choice", says what is enforced.
#pragma once
#include <memory>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/sampling.h"
#include "grammar/token_matcher.h"
#include "tools_bridge/lib/chat_format.h"

namespace cedar::server {

struct ResponseFormat {
  enum class Kind { kText, kJsonObject, kJsonSchema };
  Kind kind = Kind::kText;
  nlohmann::json schema;  // kJsonSchema: json_schema.schema
  bool strict = false;    // json_schema.strict: unsupported keywords are a 400, extra properties
                          // only where the schema allows them
};

// `response_format`: absent, {"type":"text"}, {"type":"json_object"} or {"type":"json_schema",
// "json_schema":{"name":...,"schema":{...},"strict":bool}}. 400 naming the field otherwise.
ResponseFormat ParseResponseFormat(const nlohmann::json& body);
// `parallel_tool_calls` (default true). 400 unless a boolean.
bool ParseParallelToolCalls(const nlohmann::json& body);

// What one turn's output must follow.
struct OutputRequest {
  bool chat = true;                  // false: /v1/completions (raw text, no chat markup)
  bridge::ChatFormat format = bridge::ChatFormat::kCedar;
  bool thinking = false;             // deepseek_v41 chat: the output starts with reasoning
  nlohmann::json tools;              // chat: the request's tools (null or an array)
  nlohmann::json tool_choice;        // chat: null, "none", "auto", "required" or a named function
  bool parallel_tool_calls = true;
  ResponseFormat response_format;
};

// The turn's logits processor, or null when the request constrains nothing (no tools, no
// tool_choice "none", text response_format). `end_ids`: the turn's stop ids (allowed where the
// output is complete). Throws ApiError 400 (param response_format or tools) for a schema the
// grammar cannot compile.
std::shared_ptr<LogitsProcessor> MakeOutputProcessor(const OutputRequest& request,
                                                     std::shared_ptr<const grammar::TokenVocab> vocab,
                                                     std::vector<int32_t> end_ids);

}  // namespace cedar::server
