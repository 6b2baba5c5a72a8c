// JSON Schema -> Grammar: the compact JSON texts (no whitespace outside strings) that a schema
// accepts, as a grammar the automaton can run.
//
// Supported: type (a name or a list), properties, required, additionalProperties (false, true
// or a schema), items, minItems/maxItems, enum, const, minLength/maxLength, strings with every
// JSON escape (\uXXXX included, surrogates only as valid pairs) and valid UTF-8, number,
// integer (minimum >= 0 drops the sign), boolean, null, anyOf, oneOf (its branches should not
// overlap: the grammar is their union), allOf of non-overlapping parts, $ref to "#", "#/$defs/x"
// and "#/definitions/x" (recursion works), and the boolean schemas true/false.
// Annotations are ignored (title, description, default, examples, format, $schema, $id,
// $comment, deprecated, readOnly, writeOnly).
// Constraining keywords a context-free grammar cannot (or we do not yet) enforce (pattern,
// minimum/maximum beyond the sign, multipleOf, uniqueItems, not, if/then/else, ...): an error
// naming the keyword, or ignored when SchemaOptions::error_on_unsupported is false.
//
// Limits that keep every output parseable: an integer has at most 15 digits and a number's
// fraction at most 15, its exponent at most 2 digits (so each parses as a double / int64);
// extra property keys (additionalProperties) are printable ASCII without escapes and never
// equal a declared property name (so a duplicate key cannot shadow a declared one).
#pragma once
#include <cstdint>

#include <nlohmann/json.hpp>

#include "grammar/grammar.h"

namespace cedar::grammar {

struct SchemaOptions {
  // additionalProperties when a schema does not say: false (OpenAI's strict mode; what tools
  // mean) or JSON Schema's default true (any extra property).
  bool strict = true;
  // A constraining keyword we cannot enforce: GrammarError (true) or ignored (false).
  bool error_on_unsupported = true;
  // Longest string (in characters) where the schema sets no maxLength (and the most characters
  // an extra property key adds past the declared names' prefixes); -1 = unbounded.
  int64_t max_string_length = -1;
  // How deep an unconstrained value ({} or true, json_object) may nest objects and arrays.
  int max_any_depth = 8;
};

// The grammar element of the JSON texts matching `schema` (added to `g`). Throws GrammarError
// naming the schema path and what was expected for a schema it cannot compile.
// `root` (default: `schema` itself) is the document "#" and "$defs" refer to, for compiling a
// part of a larger schema (e.g. one property of a tool's parameters).
Element CompileJsonSchema(Grammar& g, const nlohmann::json& schema, const SchemaOptions& options = {},
                          const nlohmann::json* root = nullptr);

// Any JSON object (response_format json_object), nesting at most options.max_any_depth.
Element AnyJsonObject(Grammar& g, const SchemaOptions& options = {});

}  // namespace cedar::grammar
