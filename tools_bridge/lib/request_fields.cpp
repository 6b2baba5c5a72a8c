#include "tools_bridge/lib/request_fields.h"

#include "tools_bridge/lib/json_limits.h"

namespace cedar::bridge::fields {

void Fail(const std::string& param, const std::string& what) { throw RequestFieldError(param + ": " + what, param); }

std::string Preview(const ojson& v) { return Clip(v.dump(-1, ' ', false, ojson::error_handler_t::replace), 60); }

const ojson* Find(const ojson& obj, const char* key) {
  auto it = obj.find(key);
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}

std::string String(const ojson& obj, const char* key, const std::string& where) {
  const ojson* v = Find(obj, key);
  if (!v || !v->is_string()) Fail(where + "." + key, "expected a string, found " + (v ? Preview(*v) : "nothing"));
  return v->get<std::string>();
}

std::string JoinedText(const ojson& content, const std::string& where, const char* parts,
                       const std::function<void(const ojson& part, const std::string& at)>& check_part) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) Fail(where, std::string("expected a string or an array of ") + parts + ", found " + Preview(content));
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const std::string at = where + "[" + std::to_string(i) + "]";
    check_part(content[i], at);
    text += String(content[i], "text", at);
  }
  return text;
}

ojson FunctionTools(const ojson& tools, const std::function<ojson(const ojson& tool, const std::string& at)>& function_of) {
  if (!tools.is_array()) Fail("tools", "expected an array, found " + Preview(tools));
  ojson out = ojson::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string at = "tools[" + std::to_string(i) + "]";
    if (!tools[i].is_object()) Fail(at, "expected an object");
    out.push_back({{"type", "function"}, {"function", function_of(tools[i], at)}});
  }
  return out;
}

}  // namespace cedar::bridge::fields
