#include "tests/grammar_util.h"

#include <random>

#include <valijson/adapters/nlohmann_json_adapter.hpp>
#include <valijson/schema.hpp>
#include <valijson/schema_parser.hpp>
#include <valijson/validator.hpp>

#include "engine/sampling.h"

namespace cedar::test {

using nlohmann::json;

bool Validates(const json& schema, const json& doc) {
  valijson::Schema vs;
  valijson::SchemaParser parser;
  valijson::adapters::NlohmannJsonAdapter schema_adapter(schema);
  parser.populateSchema(schema_adapter, vs);
  valijson::Validator validator;
  valijson::adapters::NlohmannJsonAdapter doc_adapter(doc);
  return validator.validate(vs, doc_adapter, nullptr);
}

bool TextValidates(const json& schema, const std::string& text) {
  const json doc = json::parse(text, nullptr, false);
  return !doc.is_discarded() && Validates(schema, doc);
}

namespace {

struct Gen {
  std::mt19937_64 rng;
  int defs = 0;
  int Pick(int n) { return int(rng() % uint64_t(n)); }
  std::string Name() {
    static const char* names[] = {"path", "mode", "id", "query", "limit", "items", "x", "y", "name", "flag", "é", "a\"b"};
    return names[Pick(12)];
  }
  json Scalar() {
    switch (Pick(7)) {
      case 0: return {{"type", "string"}, {"maxLength", Pick(12)}};
      case 1: return {{"type", "string"}, {"minLength", 1}, {"maxLength", 1 + Pick(6)}};
      case 2: return {{"type", "integer"}};
      case 3: return {{"type", "number"}};
      case 4: return {{"type", "boolean"}};
      case 5: return {{"enum", json::array({"r", "w", 3, nullptr, "x\ny"})}};
      default: return {{"const", Pick(2) ? json("fixed") : json(42)}};
    }
  }
  json Schema(int depth) {
    const int kind = depth >= 3 ? 0 : Pick(10);
    if (kind <= 3) return Scalar();
    if (kind == 4) return {{"type", "null"}};
    if (kind == 5) return {{"type", "array"}, {"items", Schema(depth + 1)}, {"maxItems", Pick(4)}};
    if (kind == 6) {
      // Disjoint branches (by type), so oneOf's "exactly one" holds for any match.
      json o = json::object();
      o[Pick(2) ? "anyOf" : "oneOf"] = json::array({{{"type", "string"}, {"maxLength", 5}}, {{"type", "integer"}}, {{"type", "null"}}});
      return o;
    }
    if (kind == 7 && defs > 0) return {{"$ref", "#/$defs/d" + std::to_string(Pick(defs))}};
    return Object(depth + 1);
  }
  json Object(int depth) {
    json o = {{"type", "object"}, {"properties", json::object()}};
    json required = json::array();
    const int n = Pick(5);
    for (int i = 0; i < n; ++i) {
      const std::string k = Name();
      o["properties"][k] = Schema(depth);
      if (Pick(2)) required.push_back(k);
    }
    std::sort(required.begin(), required.end());
    required.erase(std::unique(required.begin(), required.end()), required.end());
    if (!required.empty()) o["required"] = required;
    switch (Pick(4)) {
      case 0: o["additionalProperties"] = false; break;
      case 1: o["additionalProperties"] = {{"type", "integer"}}; break;
      default: o["additionalProperties"] = false; break;
    }
    return o;
  }
};

}  // namespace

json RandomSchema(uint64_t seed) {
  Gen g{std::mt19937_64(seed)};
  json defs = json::object();
  const int ndefs = g.Pick(3);
  for (int i = 0; i < ndefs; ++i) defs["d" + std::to_string(i)] = g.Scalar();
  g.defs = ndefs;
  json root = g.Object(0);
  if (ndefs > 0) root["$defs"] = defs;
  return root;
}

json RealTools() {
  return json::parse(R"([
    {"type": "function", "function": {"name": "read_file", "description": "Read a file",
      "parameters": {"type": "object", "properties": {"path": {"type": "string"}, "offset": {"type": "integer"},
                     "limit": {"type": "integer"}}, "required": ["path"], "additionalProperties": false}}},
    {"type": "function", "function": {"name": "write_file", "description": "Write a file",
      "parameters": {"type": "object", "properties": {"path": {"type": "string"}, "content": {"type": "string"},
                     "mode": {"type": "string", "enum": ["overwrite", "append"]}}, "required": ["path", "content"],
                     "additionalProperties": false}}},
    {"type": "function", "function": {"name": "shell", "description": "Run a command",
      "parameters": {"type": "object", "properties": {"command": {"type": "array", "items": {"type": "string"}},
                     "timeout_ms": {"type": "integer"}, "env": {"type": "object", "additionalProperties": {"type": "string"}}},
                     "required": ["command"]}}},
    {"type": "function", "function": {"name": "search", "description": "Search the code",
      "parameters": {"type": "object", "properties": {"query": {"type": "string"}, "regex": {"type": "boolean"},
                     "scope": {"type": "object", "properties": {"dirs": {"type": "array", "items": {"type": "string"}},
                               "exclude": {"type": ["string", "null"]}}, "required": ["dirs"], "additionalProperties": false},
                     "max_results": {"type": "integer", "minimum": 0}}, "required": ["query"], "additionalProperties": false}}},
    {"type": "function", "function": {"name": "set_status", "description": "Enums and nesting",
      "parameters": {"type": "object", "properties": {"state": {"enum": ["todo", "doing", "done"]},
                     "labels": {"type": "array", "items": {"$ref": "#/$defs/label"}}},
                     "required": ["state"], "additionalProperties": false,
                     "$defs": {"label": {"type": "object", "properties": {"name": {"type": "string"}, "color": {"enum": ["red", "green"]}},
                                         "required": ["name", "color"], "additionalProperties": false}}}}}
  ])");
}

std::vector<int32_t> SampleIds(const std::function<std::vector<float>(const std::vector<int32_t>&)>& logits,
                               grammar::TokenMatcher* matcher, const std::vector<int32_t>& end_ids, int max_tokens,
                               uint64_t seed) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.seed = seed;
  Sampler sampler(p);
  std::vector<int32_t> ids;
  while (int(ids.size()) < max_tokens) {
    std::vector<float> l = logits(ids);
    if (matcher && matcher->ApplyMask(l) == 0) break;
    const int32_t id = sampler.Sample(l);
    if (matcher && !matcher->AcceptToken(id)) throw std::logic_error("sampled a masked token");
    ids.push_back(id);
    if (std::find(end_ids.begin(), end_ids.end(), id) != end_ids.end()) break;
  }
  return ids;
}

}  // namespace cedar::test
