// Reading a client's request body field by field, for the converters of the APIs that are not
// chat completions (anthropic_json.cpp, responses_json.cpp): every refusal names the field's
// JSON path and what was expected ("messages[2].content[0].text: expected a string, found 7").
// One copy, so the two APIs word their errors alike.
//
// Thread contract: free functions, no shared state.
#pragma once
#include <functional>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

namespace cedar::bridge {

// A request field a converter refuses; param() is the field at fault (e.g.
// "messages[2].content[0].type"), what() is "<param>: <what was expected, what was found>".
// AnthropicError and ResponsesError are this type.
class RequestFieldError : public std::invalid_argument {
 public:
  RequestFieldError(const std::string& what, std::string param) : std::invalid_argument(what), param_(std::move(param)) {}
  const std::string& param() const { return param_; }

 private:
  std::string param_;
};

namespace fields {

using ojson = nlohmann::ordered_json;

// Throws RequestFieldError("<param>: <what>", param).
[[noreturn]] void Fail(const std::string& param, const std::string& what);

// `v` on one line, cut to about 60 characters, for "found ..." (invalid UTF-8 replaced).
std::string Preview(const ojson& v);

// obj[key], or nullptr when it is absent or null.
const ojson* Find(const ojson& obj, const char* key);

// obj[key] as a string; Fails with "<where>.<key>: expected a string, found ..." otherwise.
std::string String(const ojson& obj, const char* key, const std::string& where);

// The text of a content field: a string as it is, or an array of parts whose "text" strings are
// joined. `check_part(part, "<where>[i]")` refuses (Fails on) any part the API does not take as
// text; `parts` names the accepted parts in the error for a value of neither shape.
std::string JoinedText(const ojson& content, const std::string& where, const char* parts,
                       const std::function<void(const ojson& part, const std::string& at)>& check_part);

// Chat-completions function tools from an API's `tools` array: [{type: "function", function:
// function_of(tool, "tools[i]")}]. Fails on a value that is not an array or an item that is not
// an object; function_of checks the rest and returns {name, description, parameters, ...}.
ojson FunctionTools(const ojson& tools, const std::function<ojson(const ojson& tool, const std::string& at)>& function_of);

}  // namespace fields
}  // namespace cedar::bridge
