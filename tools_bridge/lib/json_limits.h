// Parsing JSON that a client (or the model) sent, with bounds that hold before any tree is
// built, and showing such values in error messages without recursing over them.
//
// Why not json::parse: nlohmann builds the whole tree first (a 32 MB body of nested arrays
// cost ~1.4 GB of RSS), a parser callback that rejects deep values still walks the rest of
// the input, and dump() of a 100k-deep value overflows the stack. Here a SAX handler counts
// the depth and stops the parser at the first container past the limit; nothing after that
// byte is read. Numbers outside double's range (1e400) and syntax errors are reported in our
// own words with the byte offset and the JSON path, never the library's exception text.
//
// Thread contract: free functions, no shared state.
#pragma once
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace cedar::bridge {

// Deepest nesting accepted anywhere a client's JSON is read (the request body, a tool call's
// `arguments` string). The outermost container counts as one: a request body (an object) may
// hold values nested 63 deep. OpenAI tool schemas rarely pass 10.
inline constexpr int kMaxJsonDepth = 64;

struct JsonParseError {
  enum class Kind {
    kSyntax,            // not JSON (includes invalid UTF-8 and raw control characters in strings)
    kTooDeep,           // a container deeper than the limit
    kNumberOutOfRange,  // a number whose magnitude does not fit a double (1e400)
  };
  Kind kind = Kind::kSyntax;
  size_t offset = 0;     // 0-based byte offset of the failing byte (the text's size at end of
                         // input); 0 for kTooDeep, whose SAX event carries no position
  std::string path;      // where, e.g. "tools[0].function.parameters" ("" = the top level)
  std::string top_key;   // the key of the top-level object the error is under ("" = none)
  std::string message;   // one sentence in our words (path, offset, limit), no library text
};

struct JsonParseResult {
  nlohmann::json value;                 // discarded when `error` is set
  std::optional<JsonParseError> error;  // set when the text was refused
};

// Parses `text` as one JSON value nested at most `max_depth` deep. Never throws (except
// std::bad_alloc); memory use is bounded by the tree of the accepted prefix.
JsonParseResult ParseJsonBounded(std::string_view text, int max_depth = kMaxJsonDepth);

// A short, single-line preview of `value` for an error message: at most about `max_chars`
// characters ("..." marks a cut), containers beyond `max_depth` levels shown as [...] / {...}.
// Cost is bounded by max_chars and max_depth, whatever the value's size or depth.
std::string JsonPreview(const nlohmann::json& value, size_t max_chars = 60, int max_depth = 8);

// `text` cut to at most `max_chars` bytes (on a UTF-8 character boundary) with "..." appended
// when cut: for echoing client strings in error messages.
std::string Clip(std::string_view text, size_t max_chars = 60);

}  // namespace cedar::bridge
