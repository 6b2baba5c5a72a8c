#include "server/output_constraint.h"

#include <spdlog/spdlog.h>

#include "grammar/grammar_cache.h"
#include "grammar/logits_processor.h"
#include "tools_bridge/lib/json_limits.h"
#include "tools_bridge/lib/tool_call_grammar.h"
#include "server/api_error.h"

namespace cedar::server {

using nlohmann::json;

namespace {

[[noreturn]] void Expected(const std::string& field, const std::string& what, const json& found) {
  throw InvalidRequest(field + ": expected " + what + ", found " + bridge::JsonPreview(found), field);
}

// The compiled grammars of recent requests (grammar_cache.h): an agent's later turns with the
// same tools or schema reuse the masks of the earlier ones. 8 grammars, ~40 MiB each at most.
grammar::GrammarCache& CompiledGrammars() {
  static grammar::GrammarCache cache(8);
  return cache;
}

}  // namespace

ResponseFormat ParseResponseFormat(const json& body) {
  ResponseFormat f;
  auto it = body.find("response_format");
  if (it == body.end() || it->is_null()) return f;
  const json& rf = *it;
  const char* shapes = "{\"type\": \"text\" | \"json_object\" | \"json_schema\", ...}";
  if (!rf.is_object() || !rf.contains("type") || !rf["type"].is_string()) Expected("response_format", shapes, rf);
  const std::string type = rf["type"].get<std::string>();
  if (type == "text") return f;
  if (type == "json_object") {
    f.kind = ResponseFormat::Kind::kJsonObject;
    return f;
  }
  if (type != "json_schema") Expected("response_format", shapes, rf);
  auto js = rf.find("json_schema");
  if (js == rf.end() || !js->is_object()) Expected("response_format", "json_schema to be an object with a schema", rf);
  f.kind = ResponseFormat::Kind::kJsonSchema;
  auto schema = js->find("schema");
  f.schema = schema == js->end() || schema->is_null() ? json::object() : *schema;
  if (!f.schema.is_object() && !f.schema.is_boolean()) Expected("response_format", "json_schema.schema to be an object", *schema);
  if (auto s = js->find("strict"); s != js->end() && !s->is_null()) {
    if (!s->is_boolean()) Expected("response_format", "json_schema.strict to be a boolean", *s);
    f.strict = s->get<bool>();
  }
  return f;
}

bool ParseParallelToolCalls(const json& body) {
  auto it = body.find("parallel_tool_calls");
  if (it == body.end() || it->is_null()) return true;
  if (!it->is_boolean()) Expected("parallel_tool_calls", "a boolean", *it);
  return it->get<bool>();
}

std::shared_ptr<LogitsProcessor> MakeOutputProcessor(const OutputRequest& r,
                                                     std::shared_ptr<const grammar::TokenVocab> vocab,
                                                     std::vector<int32_t> end_ids) {
  bridge::OutputConstraint c;
  c.thinking = r.chat && r.thinking;
  c.tools = r.tools;
  c.parallel_tool_calls = r.parallel_tool_calls;
  const bool has_tools = r.tools.is_array() && !r.tools.empty();
  std::string param = "tools";
  if (r.tool_choice.is_string()) {
    const std::string& s = r.tool_choice.get_ref<const std::string&>();
    c.choice = s == "none" ? bridge::ToolChoice::kNone : s == "required" ? bridge::ToolChoice::kRequired : bridge::ToolChoice::kAuto;
  } else if (r.tool_choice.is_object()) {
    c.choice = bridge::ToolChoice::kNamed;
    c.function = r.tool_choice["function"]["name"].get<std::string>();  // checked by request_parse
  }
  const bool forced_call = c.choice == bridge::ToolChoice::kRequired || c.choice == bridge::ToolChoice::kNamed;
  // Tool parameters: extra properties only where a schema allows them; keywords the grammar
  // cannot enforce are logged and not enforced (a tool's schema is the model's documentation
  // first: refusing the request for a `pattern` would break agents that work today).
  c.schema.strict = true;
  c.schema.error_on_unsupported = false;
  if (!forced_call && r.response_format.kind != ResponseFormat::Kind::kText) {
    c.choice = bridge::ToolChoice::kNone;  // the message is the JSON value
    c.json_object = r.response_format.kind == ResponseFormat::Kind::kJsonObject;
    if (r.response_format.kind == ResponseFormat::Kind::kJsonSchema) c.json_schema = r.response_format.schema;
    c.schema.strict = r.response_format.strict;
    c.schema.error_on_unsupported = r.response_format.strict;
    param = "response_format";
  } else if (!r.chat || (!has_tools && !r.tool_choice.is_string())) {
    return nullptr;  // nothing to enforce (a completion's text, or a chat without tools)
  } else if (!has_tools && c.choice != bridge::ToolChoice::kNone) {
    return nullptr;  // "auto" with no tools: free text
  }
  try {
    const bridge::ChatFormat format = r.chat ? r.format : bridge::ChatFormat::kCedar;
    // Everything the grammar and its masks depend on (the vocabulary by address: a cached
    // grammar holds its vocabulary, so the address cannot be reused while the entry lives).
    const json key = {int(format), int(c.choice), c.function, c.parallel_tool_calls, c.tools,
                      c.json_schema.value_or(json()), c.json_object, c.thinking, c.schema.strict,
                      c.schema.error_on_unsupported, c.schema.max_string_length, c.schema.max_any_depth,
                      end_ids, reinterpret_cast<uintptr_t>(vocab.get())};
    auto compiled = CompiledGrammars().Get(key.dump(), [&] {
      grammar::Grammar g = bridge::AssistantGrammar(format, c);
      spdlog::debug("output grammar: {} rules, choice {}, json {}", g.rules().size(), int(c.choice),
                    c.json_object || c.json_schema.has_value());
      // The prewarm (the top frames' verdicts a first generation needs, up to ~400 ms for
      // tools on the released vocabulary) runs beside the request's prefill.
      grammar::MatcherOptions options;
      options.prewarm_async = true;
      return grammar::CompiledGrammar::Compile(g, vocab, end_ids, options);
    });
    return std::make_shared<grammar::GrammarLogitsProcessor>(std::make_unique<grammar::TokenMatcher>(std::move(compiled)));
  } catch (const grammar::GrammarError& e) {
    throw InvalidRequest(param + ": " + e.what(), param);
  }
}

}  // namespace cedar::server
