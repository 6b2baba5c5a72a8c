#include "grammar/json_schema.h"

#include <spdlog/spdlog.h>

#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>

namespace cedar::grammar {

using nlohmann::json;

namespace {

constexpr int kMaxSchemaDepth = 64;  // nesting of schemas (not of refs, which become rules)

const std::set<std::string, std::less<>> kAnnotations = {
    "title", "description", "default", "examples", "format", "$schema", "$id", "$comment", "deprecated",
    "readOnly", "writeOnly", "$defs", "definitions", "strict", "name", "contentEncoding", "contentMediaType"};
const std::set<std::string, std::less<>> kHandled = {
    "type", "properties", "required", "additionalProperties", "items", "minItems", "maxItems", "enum", "const",
    "minLength", "maxLength", "anyOf", "oneOf", "allOf", "$ref", "minimum"};

class Compiler {
 public:
  Compiler(Grammar& g, const json& root, const SchemaOptions& o) : g_(g), root_(root), o_(o) {}

  Element Compile(const json& s, const std::string& path, int depth) {
    if (depth > kMaxSchemaDepth) Fail(path, "schemas nested at most " + std::to_string(kMaxSchemaDepth) + " deep", s);
    if (s.is_boolean()) {
      if (s.get<bool>()) return Any(0);
      Fail(path, "a satisfiable schema", s);
    }
    if (!s.is_object()) Fail(path, "a schema (an object or a boolean)", s);
    CheckKeywords(s, path);
    if (auto it = s.find("$ref"); it != s.end()) return Ref(*it, path);
    if (auto it = s.find("allOf"); it != s.end()) return Compile(MergeAllOf(s, *it, path), path, depth + 1);
    for (const char* key : {"anyOf", "oneOf"}) {
      auto it = s.find(key);
      if (it == s.end()) continue;
      if (!it->is_array() || it->empty()) Fail(path + "/" + key, "a non-empty array of schemas", *it);
      json rest = s;
      rest.erase(key);
      std::vector<Element> options;
      for (size_t i = 0; i < it->size(); ++i) {
        json branch = (*it)[i];
        if (branch.is_object()) branch = Merged(rest, branch);  // siblings apply to every branch
        options.push_back(Compile(branch, path + "/" + key + "/" + std::to_string(i), depth + 1));
      }
      return g_.Alt(std::move(options));
    }
    if (auto it = s.find("const"); it != s.end()) return g_.Lit(it->dump());
    if (auto it = s.find("enum"); it != s.end()) {
      if (!it->is_array() || it->empty()) Fail(path + "/enum", "a non-empty array", *it);
      std::vector<Element> options;
      for (const json& v : *it) options.push_back(g_.Lit(v.dump()));
      return g_.Alt(std::move(options));
    }
    auto t = s.find("type");
    if (t == s.end()) {
      if (s.contains("properties") || s.contains("additionalProperties") || s.contains("required"))
        return Typed("object", s, path, depth);
      if (s.contains("items")) return Typed("array", s, path, depth);
      return Any(0);
    }
    if (t->is_string()) return Typed(t->get<std::string>(), s, path, depth);
    if (!t->is_array() || t->empty()) Fail(path + "/type", "a type name or a non-empty array of them", *t);
    std::vector<Element> options;
    for (const json& name : *t) {
      if (!name.is_string()) Fail(path + "/type", "type names", *t);
      options.push_back(Typed(name.get<std::string>(), s, path, depth));
    }
    return g_.Alt(std::move(options));
  }

  Element Any(int depth) {
    if (auto it = any_.find(depth); it != any_.end()) return it->second;
    std::vector<Element> options = {String(0, o_.max_string_length), Number(false),
                                    g_.Lit("true"), g_.Lit("false"), g_.Lit("null")};
    if (depth < o_.max_any_depth) {
      options.push_back(AnyObject(depth));
      const Element v = Any(depth + 1);
      options.push_back(g_.Seq({g_.Lit("["), g_.Opt(g_.Seq({v, g_.Star(g_.Seq({g_.Lit(","), v}))})), g_.Lit("]")}));
    }
    return any_[depth] = g_.Alt(std::move(options));
  }

  Element AnyObject(int depth) {
    const Element v = depth + 1 <= o_.max_any_depth ? Any(depth + 1) : Any(o_.max_any_depth);
    const Element kv = g_.Seq({String(0, o_.max_string_length), g_.Lit(":"), v});
    return g_.Seq({g_.Lit("{"), g_.Opt(g_.Seq({kv, g_.Star(g_.Seq({g_.Lit(","), kv}))})), g_.Lit("}")});
  }

 private:
  [[noreturn]] void Fail(const std::string& path, const std::string& expected, const json& found) {
    std::string shown = found.dump();
    if (shown.size() > 120) shown = shown.substr(0, 117) + "...";
    throw GrammarError("schema " + (path.empty() ? std::string("#") : path) + ": expected " + expected + ", found " +
                       shown);
  }

  void Unsupported(const std::string& path, const std::string& key, const json& s) {
    if (o_.error_on_unsupported) Fail(path + "/" + key, "a keyword the grammar can enforce (not " + key + ")", s[key]);
    spdlog::debug("json schema {}: keyword {} is not enforced", path.empty() ? "#" : path, key);
  }

  void CheckKeywords(const json& s, const std::string& path) {
    for (auto it = s.begin(); it != s.end(); ++it) {
      const std::string& k = it.key();
      if (kAnnotations.count(k) || kHandled.count(k)) continue;
      Unsupported(path, k, s);
    }
    if (auto m = s.find("minimum"); m != s.end() && !(m->is_number() && m->get<double>() >= 0 && m->get<double>() <= 0)) {
      Unsupported(path, "minimum", s);  // only minimum 0 (no sign) is enforced
    }
  }

  static json Merged(const json& base, const json& over) {
    json out = base;
    for (auto it = over.begin(); it != over.end(); ++it) out[it.key()] = it.value();
    return out;
  }

  json MergeAllOf(const json& s, const json& parts, const std::string& path) {
    if (!parts.is_array() || parts.empty()) Fail(path + "/allOf", "a non-empty array of schemas", parts);
    json out = s;
    out.erase("allOf");
    for (const json& p : parts) {
      if (!p.is_object()) Fail(path + "/allOf", "object schemas", p);
      for (auto it = p.begin(); it != p.end(); ++it) {
        if (out.contains(it.key()) && out[it.key()] != it.value()) {
          if (it.key() == "properties" && out["properties"].is_object() && it->is_object()) {
            out["properties"] = Merged(out["properties"], *it);
            continue;
          }
          if (it.key() == "required" && it->is_array() && out["required"].is_array()) {
            for (const json& r : *it) out["required"].push_back(r);
            continue;
          }
          Unsupported(path, "allOf", s);  // overlapping constraints: their intersection is not built
          continue;
        }
        out[it.key()] = it.value();
      }
    }
    return out;
  }

  Element Ref(const json& ref, const std::string& path) {
    if (!ref.is_string()) Fail(path + "/$ref", "a string", ref);
    const std::string r = ref.get<std::string>();
    if (auto it = refs_.find(r); it != refs_.end()) return g_.Ref(it->second);
    const json* target = nullptr;
    if (r == "#") {
      target = &root_;
    } else {
      for (const char* prefix : {"#/$defs/", "#/definitions/"}) {
        const std::string p = prefix;
        if (r.rfind(p, 0) != 0) continue;
        const std::string section = p.substr(2, p.size() - 3);
        const std::string name = r.substr(p.size());
        auto sec = root_.find(section);
        if (sec != root_.end() && sec->is_object()) {
          auto it = sec->find(name);
          if (it != sec->end()) target = &*it;
        }
      }
    }
    if (!target) Fail(path + "/$ref", "\"#\", \"#/$defs/<name>\" or \"#/definitions/<name>\" naming a schema", ref);
    const int32_t rule = g_.Declare("ref " + r);
    refs_.emplace(r, rule);  // before compiling the target, so a recursive ref finds it
    const Element body = Compile(*target, r, 0);
    g_.Define(rule, {Alternative{body}});
    return g_.Ref(rule);
  }

  Element Typed(const std::string& type, const json& s, const std::string& path, int depth) {
    if (type == "object") return Object(s, path, depth);
    if (type == "array") return Array(s, path, depth);
    if (type == "string") {
      const int64_t min = ReadCount(s, "minLength", path, 0);
      const int64_t max = ReadCount(s, "maxLength", path, o_.max_string_length);
      return String(min, max);
    }
    if (type == "integer") return Integer(NonNegative(s));
    if (type == "number") return Number(NonNegative(s));
    if (type == "boolean") return g_.Alt({g_.Lit("true"), g_.Lit("false")});
    if (type == "null") return g_.Lit("null");
    Fail(path + "/type", "object, array, string, integer, number, boolean or null", json(type));
  }

  // minimum 0 (the one value CheckKeywords lets through; any minimum >= 0 when unsupported
  // keywords are ignored) drops the sign.
  static bool NonNegative(const json& s) {
    auto m = s.find("minimum");
    return m != s.end() && m->is_number() && m->get<double>() >= 0;
  }

  int64_t ReadCount(const json& s, const char* key, const std::string& path, int64_t absent) {
    auto it = s.find(key);
    if (it == s.end()) return absent;
    if (!it->is_number_integer() || it->get<int64_t>() < 0 || it->get<int64_t>() > Grammar::kMaxRepeat) {
      Fail(path + "/" + key, "an integer in [0, " + std::to_string(Grammar::kMaxRepeat) + "]", *it);
    }
    return it->get<int64_t>();
  }

  Element Object(const json& s, const std::string& path, int depth) {
    json props = json::object();
    if (auto it = s.find("properties"); it != s.end()) {
      if (!it->is_object()) Fail(path + "/properties", "an object", *it);
      props = *it;
    }
    std::set<std::string> required;
    if (auto it = s.find("required"); it != s.end()) {
      if (!it->is_array()) Fail(path + "/required", "an array of names", *it);
      for (const json& r : *it) {
        if (!r.is_string()) Fail(path + "/required", "an array of names", *it);
        required.insert(r.get<std::string>());
        if (!props.contains(r.get<std::string>())) props[r.get<std::string>()] = true;
      }
    }
    // Extra properties: keys that are none of the declared ones.
    std::optional<Element> extra;
    const json ap = s.contains("additionalProperties") ? s["additionalProperties"] : json(!o_.strict);
    if (!(ap.is_boolean() && !ap.get<bool>())) {
      std::vector<std::string> names;
      for (auto it = props.begin(); it != props.end(); ++it) names.push_back(it.key());
      const Element value = ap.is_boolean() ? Any(0) : Compile(ap, path + "/additionalProperties", depth + 1);
      extra = g_.Seq({ExtraKey(names), g_.Lit(":"), value});
    }
    Element first = extra ? g_.Opt(g_.Seq({*extra, g_.Star(g_.Seq({g_.Lit(","), *extra}))})) : g_.Empty();
    Element rest = extra ? g_.Star(g_.Seq({g_.Lit(","), *extra})) : g_.Empty();
    std::vector<std::pair<std::string, const json*>> ordered;
    for (auto it = props.begin(); it != props.end(); ++it) ordered.emplace_back(it.key(), &it.value());
    // From the last property back: first_i = the properties from i on when none came before,
    // rest_i = the same after one did (each then starts with a comma).
    for (size_t i = ordered.size(); i-- > 0;) {
      const auto& [name, schema] = ordered[i];
      const Element kv = g_.Seq({g_.Lit(json(name).dump() + ":"), Compile(*schema, path + "/properties/" + name, depth + 1)});
      const Element with_first = g_.Seq({kv, rest});
      const Element with_rest = g_.Seq({g_.Lit(","), kv, rest});
      if (required.count(name)) {
        first = with_first;
        rest = with_rest;
      } else {
        first = g_.Alt({with_first, first});
        rest = g_.Alt({with_rest, rest});
      }
    }
    return g_.Seq({g_.Lit("{"), first, g_.Lit("}")});
  }

  // '"' + a printable-ASCII key without escapes that is none of `names` + '"': at each node of
  // the names' trie, end (unless a name ends there), leave the trie by a byte no name continues
  // with (then anything), or follow a name's next byte.
  Element ExtraKey(const std::vector<std::string>& names) {
    std::bitset<256> plain;
    for (int c = 0x20; c < 0x7f; ++c)
      if (c != '"' && c != '\\') plain.set(size_t(c));
    const Element any_rest = g_.Rep(g_.Bytes(plain), 0, o_.max_string_length);
    std::function<Element(const std::string&)> node = [&](const std::string& prefix) -> Element {
      std::bitset<256> children;
      bool ends_here = false;
      for (const std::string& n : names) {
        if (n.size() < prefix.size() || n.compare(0, prefix.size(), prefix) != 0) continue;
        if (n.size() == prefix.size()) ends_here = true;
        else if (plain.test(uint8_t(n[prefix.size()]))) children.set(uint8_t(n[prefix.size()]));
      }
      std::vector<Element> options;
      if (!ends_here) options.push_back(g_.Empty());
      if ((plain & ~children).any()) options.push_back(g_.Seq({g_.Bytes(plain & ~children), any_rest}));
      for (int c = 0; c < 256; ++c)
        if (children.test(size_t(c))) options.push_back(g_.Seq({g_.Range(uint8_t(c), uint8_t(c)), node(prefix + char(c))}));
      return g_.Alt(std::move(options));
    };
    return g_.Seq({g_.Lit("\""), node(""), g_.Lit("\"")});
  }

  Element Array(const json& s, const std::string& path, int depth) {
    Element item = Any(0);
    if (auto it = s.find("items"); it != s.end()) item = Compile(*it, path + "/items", depth + 1);
    const int64_t min = ReadCount(s, "minItems", path, 0);
    const int64_t max = ReadCount(s, "maxItems", path, -1);
    if (max == 0) return g_.Lit("[]");
    const Element more = g_.Seq({g_.Lit(","), item});
    const Element body = g_.Seq({item, g_.Rep(more, min > 0 ? min - 1 : 0, max < 0 ? -1 : max - 1)});
    return g_.Seq({g_.Lit("["), min > 0 ? body : g_.Opt(body), g_.Lit("]")});
  }

 public:
  // One character of a JSON string: printable ASCII but '"' and '\', a valid UTF-8 sequence,
  // or an escape (\uXXXX with surrogates only as a high-low pair).
  Element Char() {
    if (char_) return *char_;
    std::bitset<256> ascii;
    for (int c = 0x20; c < 0x80; ++c)
      if (c != '"' && c != '\\') ascii.set(size_t(c));
    const Element cont = g_.Range(0x80, 0xBF);
    const Element hex = g_.Alt({g_.Range('0', '9'), g_.Range('a', 'f'), g_.Range('A', 'F')});
    std::bitset<256> simple;
    for (char c : std::string("\"\\/bfnrt")) simple.set(uint8_t(c));
    const Element not_d = g_.Alt({g_.Range('0', '9'), g_.Range('a', 'c'), g_.Range('A', 'C'), g_.Range('e', 'f'), g_.Range('E', 'F')});
    const Element d = g_.Alt({g_.Lit("d"), g_.Lit("D")});
    const Element bmp = g_.Alt({g_.Seq({not_d, hex, hex, hex}), g_.Seq({d, g_.Range('0', '7'), hex, hex})});
    const Element high = g_.Seq({d, g_.Alt({g_.Range('8', '9'), g_.Range('a', 'b'), g_.Range('A', 'B')}), hex, hex});
    const Element low = g_.Seq({d, g_.Alt({g_.Range('c', 'f'), g_.Range('C', 'F')}), hex, hex});
    const Element escape = g_.Seq({g_.Lit("\\"), g_.Alt({g_.Bytes(simple), g_.Seq({g_.Lit("u"), bmp}),
                                                        g_.Seq({g_.Lit("u"), high, g_.Lit("\\u"), low})})});
    char_ = g_.Alt({
        g_.Bytes(ascii),
        g_.Seq({g_.Range(0xC2, 0xDF), cont}),
        g_.Seq({g_.Range(0xE0, 0xE0), g_.Range(0xA0, 0xBF), cont}),
        g_.Seq({g_.Range(0xE1, 0xEC), cont, cont}),
        g_.Seq({g_.Range(0xED, 0xED), g_.Range(0x80, 0x9F), cont}),
        g_.Seq({g_.Range(0xEE, 0xEF), cont, cont}),
        g_.Seq({g_.Range(0xF0, 0xF0), g_.Range(0x90, 0xBF), cont, cont}),
        g_.Seq({g_.Range(0xF1, 0xF3), cont, cont, cont}),
        g_.Seq({g_.Range(0xF4, 0xF4), g_.Range(0x80, 0x8F), cont, cont}),
        escape,
    });
    return *char_;
  }

  Element String(int64_t min, int64_t max) {
    const auto key = std::make_pair(min, max);
    if (auto it = strings_.find(key); it != strings_.end()) return it->second;
    return strings_[key] = g_.Seq({g_.Lit("\""), g_.Rep(Char(), min, max), g_.Lit("\"")});
  }

  Element Digits(int64_t min, int64_t max) { return g_.Rep(g_.Range('0', '9'), min, max); }

  Element Integer(bool non_negative) {
    const Element magnitude = g_.Alt({g_.Lit("0"), g_.Seq({g_.Range('1', '9'), Digits(0, 14)})});
    return non_negative ? magnitude : g_.Seq({g_.Opt(g_.Lit("-")), magnitude});
  }

  Element Number(bool non_negative) {
    const Element frac = g_.Opt(g_.Seq({g_.Lit("."), Digits(1, 15)}));
    const Element exp = g_.Opt(g_.Seq({g_.Alt({g_.Lit("e"), g_.Lit("E")}), g_.Opt(g_.Alt({g_.Lit("+"), g_.Lit("-")})), Digits(1, 2)}));
    return g_.Seq({Integer(non_negative), frac, exp});
  }

 private:
  Grammar& g_;
  const json& root_;
  const SchemaOptions& o_;
  std::map<std::string, int32_t> refs_;
  std::map<int, Element> any_;
  std::map<std::pair<int64_t, int64_t>, Element> strings_;
  std::optional<Element> char_;
};

}  // namespace

Element CompileJsonSchema(Grammar& g, const json& schema, const SchemaOptions& options, const json* root) {
  Compiler c(g, root ? *root : schema, options);
  return c.Compile(schema, "", 0);
}

Element AnyJsonObject(Grammar& g, const SchemaOptions& options) {
  const json empty = json::object();
  Compiler c(g, empty, options);
  return c.AnyObject(0);
}

}  // namespace cedar::grammar
