// Grammars of what an assistant turn may generate under the request's `tool_choice`,
// `parallel_tool_calls` and `response_format`, in each chat format's own tool-call markup, for
// grammar-constrained decoding (grammar/). What each mode allows:
//
//   none      text only: the tool-call markup can never start
//   auto      text, then optionally calls; a call that opens must name one of `tools` and carry
//             arguments matching that tool's `parameters` schema
//   required  one or more calls (exactly one with parallel_tool_calls false), nothing else
//   named     exactly one call, of the named function
//   parallel_tool_calls false: at most one call in every mode
//   response_format json_object / json_schema: the message is one JSON value (an object / a
//             value matching the schema), compact, and no tool call
//
// The markup per format (the parsers that read it back: tool_calls.h, dsml_parser.h):
//   cedar        text , { "<|tool_call|>" '{"name":' NAME ',"arguments":' ARGS '}' "<|/tool_call|>" }
//                (the markers are special ids: grammar special symbols named as the tokens)
//   deepseek_v41 [reasoning "</think>"] text ["\n\n<｜DSML｜ calls>\n" invoke {"\n" invoke}
//                "\n</｜DSML｜ calls>"]; an invoke holds one parameter per argument: string-typed
//                properties raw (string="true"; enum/const enforced, raw text is well-formed UTF-8, never contains
//                "</｜DSML｜"), the others compact JSON matching their schema (string="false").
//                Text never contains "｜DSML｜" (so the markup opens only where the grammar says).
// The turn's end ids (<|end|>, <｜end▁of▁sentence｜>) are the TokenMatcher's end ids, allowed
// exactly where the grammar is complete.
//
// Thread contract: pure functions.
#pragma once
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "grammar/grammar.h"
#include "grammar/json_schema.h"
#include "grammar/token_matcher.h"
#include "tools_bridge/lib/chat_format.h"
#include "tools_bridge/lib/tokenizer.h"

namespace cedar::bridge {

enum class ToolChoice { kNone, kAuto, kRequired, kNamed };

struct OutputConstraint {
  ToolChoice choice = ToolChoice::kAuto;
  std::string function;               // kNamed: the function's name
  bool parallel_tool_calls = true;    // false: at most one call
  nlohmann::json tools;               // the request's OpenAI `tools` (null or an array)
  // response_format: unset = text; a JSON object = json_schema's `schema`; true = json_object.
  std::optional<nlohmann::json> json_schema;
  bool json_object = false;
  bool thinking = false;              // deepseek_v41: the output starts with reasoning
  grammar::SchemaOptions schema;      // how schemas compile (strictness, limits)
};

// The grammar of an assistant turn in `format` under `c`. Throws grammar::GrammarError naming
// the tool or schema at fault (a schema the compiler cannot enforce, an unknown named function).
grammar::Grammar AssistantGrammar(ChatFormat format, const OutputConstraint& c);

// The vocabulary of `tokenizer` for a TokenMatcher (every id's bytes, specials by name).
// Building it sorts every token (tens of ms for 129K ids): build once per tokenizer.
std::shared_ptr<const grammar::TokenVocab> GrammarVocabOf(const Tokenizer& tokenizer);

// Text that never contains `pattern`: any bytes, or with `utf8` only well-formed UTF-8 (a KMP
// automaton as rules, one per prefix of `pattern` and UTF-8 state). REQUIRES: pattern non-empty.
grammar::Element TextAvoiding(grammar::Grammar& g, const std::string& pattern, bool utf8 = false);

}  // namespace cedar::bridge
