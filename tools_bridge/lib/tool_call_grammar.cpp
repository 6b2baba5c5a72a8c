#include "tools_bridge/lib/tool_call_grammar.h"

#include <spdlog/spdlog.h>

#include <bitset>
#include <map>
#include <set>

#include "tools_bridge/lib/dsml_encoding.h"

namespace cedar::bridge {

using grammar::Element;
using grammar::Grammar;
using grammar::GrammarError;
using nlohmann::json;

namespace {

struct Tool {
  std::string name;
  const json* parameters = nullptr;  // null: any object
};

std::vector<Tool> ToolsOf(const OutputConstraint& c) {
  std::vector<Tool> out;
  if (!c.tools.is_array()) return out;
  for (size_t i = 0; i < c.tools.size(); ++i) {
    const json& t = c.tools[i];
    const json* fn = t.is_object() && t.contains("function") ? &t["function"] : nullptr;
    if (!fn || !fn->is_object() || !fn->contains("name") || !(*fn)["name"].is_string()) {
      throw GrammarError("tools[" + std::to_string(i) + "]: expected {\"type\":\"function\",\"function\":{\"name\":...}}");
    }
    Tool tool{(*fn)["name"].get<std::string>(), nullptr};
    if (auto p = fn->find("parameters"); p != fn->end() && !p->is_null()) tool.parameters = &*p;
    if (c.choice == ToolChoice::kNamed && tool.name != c.function) continue;
    out.push_back(tool);
  }
  if (c.choice == ToolChoice::kNamed && out.empty()) {
    throw GrammarError("tool_choice: expected a function named in tools, found \"" + c.function + "\"");
  }
  return out;
}

std::bitset<256> AllBytes() { return std::bitset<256>().set(); }

// The arguments object of one tool (cedar: the JSON text inside call_json).
Element Arguments(Grammar& g, const Tool& t, const grammar::SchemaOptions& o) {
  try {
    return t.parameters ? grammar::CompileJsonSchema(g, *t.parameters, o) : grammar::AnyJsonObject(g, o);
  } catch (const GrammarError& e) {
    throw GrammarError("tools " + t.name + " parameters: " + e.what());
  }
}

// `calls` repeated as the constraint allows: 1 (named, or no parallel calls) or 1+ joined by `sep`.
Element Calls(Grammar& g, const OutputConstraint& c, Element call, Element sep) {
  if (c.choice == ToolChoice::kNamed || !c.parallel_tool_calls) return call;
  return g.Seq({call, g.Star(g.Seq({sep, call}))});
}

Element CedarCall(Grammar& g, const Tool& t, const grammar::SchemaOptions& o) {
  return g.Seq({g.SpecialElement(kToolCallToken), g.Lit("{\"name\":" + json(t.name).dump() + ",\"arguments\":"),
                Arguments(g, t, o), g.Lit("}"), g.SpecialElement(kToolCallEndToken)});
}

// One DSML parameter per property of the tool's object schema, in schema order, optional ones
// skippable, joined by "\n" (the first/rest chain of json_schema.cpp's objects).
Element DsmlParameters(Grammar& g, const Tool& t, const grammar::SchemaOptions& o) {
  if (!t.parameters || !t.parameters->is_object() || !t.parameters->contains("properties")) {
    // Arguments without declared properties: one JSON-typed parameter per key is not
    // enumerable, so only the empty call is allowed (documented in SERVER.md).
    return g.Empty();
  }
  const json& params = *t.parameters;
  const json& props = params["properties"];
  std::set<std::string> required;
  if (auto r = params.find("required"); r != params.end() && r->is_array())
    for (const json& n : *r)
      if (n.is_string()) required.insert(n.get<std::string>());
  const Element raw_text = TextAvoiding(g, "</" + std::string(dsml::kDsml), /*utf8=*/true);
  Element first = g.Empty(), rest = g.Empty();
  std::vector<std::pair<std::string, const json*>> ordered;
  for (auto it = props.begin(); it != props.end(); ++it) ordered.emplace_back(it.key(), &it.value());
  for (size_t i = ordered.size(); i-- > 0;) {
    const auto& [name, schema] = ordered[i];
    const bool is_string = schema->is_object() && schema->value("type", json()) == "string";
    Element value = raw_text;
    if (is_string && (schema->contains("enum") || schema->contains("const"))) {
      std::vector<Element> options;
      const json values = schema->contains("const") ? json::array({(*schema)["const"]}) : (*schema)["enum"];
      for (const json& v : values)
        if (v.is_string()) options.push_back(g.Lit(v.get<std::string>()));
      if (options.empty()) throw GrammarError("tools " + t.name + " parameter " + name + ": expected string enum values");
      value = g.Alt(std::move(options));
    } else if (!is_string) {
      try {
        value = grammar::CompileJsonSchema(g, *schema, o, &params);
      } catch (const GrammarError& e) {
        throw GrammarError("tools " + t.name + " parameters: " + e.what());
      }
    }
    const Element param = g.Seq({g.Lit("<" + std::string(dsml::kDsml) + " parameter name=\"" + name + "\" string=\"" +
                                       (is_string ? "true" : "false") + "\">"),
                                 value, g.Lit(std::string(dsml::kParamClose))});
    const Element with_first = g.Seq({param, rest});
    const Element with_rest = g.Seq({g.Lit("\n"), param, rest});
    if (required.count(name)) {
      first = with_first;
      rest = with_rest;
    } else {
      first = g.Alt({with_first, first});
      rest = g.Alt({with_rest, rest});
    }
  }
  return first;
}

Element DsmlInvoke(Grammar& g, const Tool& t, const grammar::SchemaOptions& o) {
  return g.Seq({g.Lit("<" + std::string(dsml::kDsml) + " invoke name=\"" + t.name + "\">\n"), DsmlParameters(g, t, o),
                g.Lit("\n" + std::string(dsml::kInvokeClose))});
}

}  // namespace

namespace {

// UTF-8 well-formedness as a byte automaton (Unicode table 3-7): state 0 between characters,
// 1..3 continuation bytes still due, 4..7 a lead byte whose next byte has a narrower range
// (E0, ED, F0, F4). Returns -1 for a byte that cannot come next.
int Utf8Next(int u, uint8_t b) {
  const bool cont = b >= 0x80 && b <= 0xBF;
  switch (u) {
    case 0:
      if (b < 0x80) return 0;
      if (b >= 0xC2 && b <= 0xDF) return 1;
      if (b == 0xE0) return 4;
      if (b == 0xED) return 5;
      if ((b >= 0xE1 && b <= 0xEC) || b == 0xEE || b == 0xEF) return 2;
      if (b == 0xF0) return 6;
      if (b >= 0xF1 && b <= 0xF3) return 3;
      if (b == 0xF4) return 7;
      return -1;
    case 1: return cont ? 0 : -1;
    case 2: return cont ? 1 : -1;
    case 3: return cont ? 2 : -1;
    case 4: return b >= 0xA0 && b <= 0xBF ? 1 : -1;
    case 5: return b >= 0x80 && b <= 0x9F ? 1 : -1;
    case 6: return b >= 0x90 && b <= 0xBF ? 2 : -1;
    case 7: return b >= 0x80 && b <= 0x8F ? 2 : -1;
  }
  return -1;
}

}  // namespace

Element TextAvoiding(Grammar& g, const std::string& pattern, bool utf8) {
  const size_t m = pattern.size();
  // KMP failure function, then the transition of every (matched prefix k, byte).
  std::vector<size_t> fail(m + 1, 0);
  for (size_t i = 1, k = 0; i < m; ++i) {
    while (k > 0 && pattern[i] != pattern[k]) k = fail[k];
    if (pattern[i] == pattern[k]) ++k;
    fail[i + 1] = k;
  }
  auto step = [&](size_t k, uint8_t b) {
    while (k > 0 && uint8_t(pattern[k]) != b) k = fail[k];
    return uint8_t(pattern[k]) == b ? k + 1 : 0;
  };
  // One rule per (matched prefix k, UTF-8 state u); the text may end only between characters.
  const int nu = utf8 ? 8 : 1;
  auto at = [&](size_t k, int u) { return k * size_t(nu) + size_t(u); };
  std::vector<int32_t> rules(m * size_t(nu));
  for (int32_t& r : rules) r = g.Declare("avoid");
  for (size_t k = 0; k < m; ++k) {
    for (int u = 0; u < nu; ++u) {
      std::map<size_t, std::bitset<256>> to;  // destination rule -> bytes leading there
      for (int b = 0; b < 256; ++b) {
        const size_t next = step(k, uint8_t(b));
        const int nu_next = utf8 ? Utf8Next(u, uint8_t(b)) : 0;
        if (next < m && nu_next >= 0) to[at(next, nu_next)].set(size_t(b));
      }
      std::vector<grammar::Alternative> alts;
      if (u == 0) alts.push_back({});
      for (const auto& [dest, set] : to) alts.push_back({g.Bytes(set), g.Ref(rules[dest])});
      if (alts.empty()) alts.push_back({g.Bytes(std::bitset<256>()), g.Ref(rules[at(k, u)])});  // unreachable
      g.Define(rules[at(k, u)], std::move(alts));
    }
  }
  return g.Ref(rules[0]);
}

Grammar AssistantGrammar(ChatFormat format, const OutputConstraint& c) {
  Grammar g;
  const bool dsml_format = format == ChatFormat::kDeepseekV41;
  std::vector<Element> parts;
  if (dsml_format && c.thinking) parts.push_back(g.Seq({TextAvoiding(g, std::string(dsml::kThinkEnd)), g.Lit(std::string(dsml::kThinkEnd))}));
  if (c.json_schema || c.json_object) {
    parts.push_back(c.json_schema ? grammar::CompileJsonSchema(g, *c.json_schema, c.schema) : grammar::AnyJsonObject(g, c.schema));
    g.SetRoot(g.Seq(parts));
    return g;
  }
  const Element text = dsml_format ? TextAvoiding(g, std::string(dsml::kDsml)) : g.Star(g.Bytes(AllBytes()));
  const std::vector<Tool> tools = c.choice == ToolChoice::kNone ? std::vector<Tool>{} : ToolsOf(c);
  std::optional<Element> calls;
  if (!tools.empty()) {
    std::vector<Element> each;
    for (const Tool& t : tools) each.push_back(dsml_format ? DsmlInvoke(g, t, c.schema) : CedarCall(g, t, c.schema));
    const Element call = g.Alt(std::move(each));
    if (dsml_format) {
      calls = g.Seq({g.Lit("\n\n" + std::string(dsml::kCallsOpen) + "\n"), Calls(g, c, call, g.Lit("\n")),
                     g.Lit("\n" + std::string(dsml::kCallsClose))});
    } else {
      calls = Calls(g, c, call, g.Empty());
    }
  }
  switch (c.choice) {
    case ToolChoice::kNone:
      parts.push_back(text);
      break;
    case ToolChoice::kAuto:
      parts.push_back(text);
      if (calls) parts.push_back(g.Opt(*calls));
      break;
    case ToolChoice::kRequired:
    case ToolChoice::kNamed:
      if (!calls) throw GrammarError("tool_choice: expected a non-empty tools array for \"required\" or a named function");
      parts.push_back(*calls);
      break;
  }
  g.SetRoot(g.Seq(parts));
  return g;
}

std::shared_ptr<const grammar::TokenVocab> GrammarVocabOf(const Tokenizer& tokenizer) {
  std::vector<std::string> bytes(size_t(tokenizer.vocab_size()));
  std::vector<std::pair<int32_t, std::string>> specials;
  for (TokenId id = 0; id < tokenizer.vocab_size(); ++id) {
    if (auto name = tokenizer.SpecialName(id)) {
      specials.emplace_back(id, std::string(*name));
      continue;
    }
    bytes[size_t(id)] = std::string(tokenizer.TokenBytes(id));
  }
  return std::make_shared<const grammar::TokenVocab>(bytes, specials);
}

}  // namespace cedar::bridge
