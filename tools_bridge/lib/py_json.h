// Python's json.dumps(value, ensure_ascii=False) with the default separators (", " and ": "),
// byte for byte. The released DeepSeek-V4.1 encoder (encoding/encoding.py) renders tool schemas,
// non-string tool-call parameters and parsed tool-call arguments with exactly that call, so the
// prompt bytes the model was trained on depend on it (docs/chat-encoding.md §JSON).
//
// What Python does and this copies:
//   - objects keep their key order (hence nlohmann::ordered_json, never nlohmann::json, whose
//     std::map sorts keys);
//   - strings: only '"', '\\' and U+0000..U+001F are escaped (\n \r \t \b \f by name, the rest
//     as \u00xx, lowercase hex); everything else, U+007F and non-ASCII included, is raw UTF-8;
//   - floats use repr(): the shortest digits that round-trip, fixed notation when the decimal
//     exponent is in [-4, 16), else d[.ddd]e+XX with at least two exponent digits; integral
//     floats get ".0" (1e20 -> "1e+20", 2.50 -> "2.5", 1e15 -> "1000000000000000.0");
//   - integers as decimal.
// Known difference: Python keeps integers of any size; nlohmann parses integers beyond 64 bits
// as doubles, so such a literal prints as a float here.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

namespace cedar::bridge {

std::string PyJsonDumps(const nlohmann::ordered_json& value);
// repr() of a finite double as above; "NaN", "Infinity", "-Infinity" otherwise (json.dumps).
std::string PyFloatRepr(double value);
// A JSON string literal (with quotes) for UTF-8 `text`, escaped as json.dumps does.
void AppendPyJsonString(std::string_view text, std::string& out);

}  // namespace cedar::bridge
