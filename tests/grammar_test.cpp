// The grammar engine on its own: the automaton accepts exactly the texts a schema describes
// (checked against valijson, a real validator, and nlohmann's parser), the token matcher's
// trie walk gives the same mask as trying every token's bytes one by one (also for tokens that
// span several grammar steps), rollback restores masks, and bad schemas get clear errors.
#include <doctest/doctest.h>

#include <random>

#include "grammar/automaton.h"
#include "grammar/json_schema.h"
#include "grammar/token_matcher.h"
#include "tests/grammar_util.h"

using namespace cedar;
using namespace cedar::grammar;
using nlohmann::json;

namespace {

bool Accepts(Automaton& a, const std::string& text) {
  StateId s = a.Start();
  for (char c : text) {
    s = a.Next(s, Symbol(uint8_t(c)));
    if (s == kDeadState) return false;
  }
  return a.Accepting(s);
}

Automaton SchemaAutomaton(const json& schema, SchemaOptions o = {}) {
  Grammar g;
  g.SetRoot(CompileJsonSchema(g, schema, o));
  return Automaton(g);
}

// A vocabulary with every byte plus multi-byte tokens drawn from JSON-ish pieces, so many
// tokens cross grammar steps (`":"`, `},{"`, `\u00`).
std::vector<std::string> ToyVocab(uint64_t seed) {
  std::vector<std::string> v;
  for (int b = 0; b < 256; ++b) v.push_back(std::string(1, char(b)));
  const std::vector<std::string> pieces = {"\"", ":", ",", "{", "}", "[", "]", "a", "b", "name", "\\u00", "\\n",
                                           "1", "0", "-", ".", "e", "true", "null", "x", "\xc3\xa9", "\\"};
  std::mt19937_64 rng(seed);
  for (int i = 0; i < 3000; ++i) {
    std::string t;
    const int n = 2 + int(rng() % 4);
    for (int k = 0; k < n; ++k) t += pieces[rng() % pieces.size()];
    v.push_back(t);
  }
  v.push_back("");  // an unused id
  return v;
}

}  // namespace

TEST_CASE("json schema automaton accepts what the schema allows and rejects the rest") {
  const json schema = json::parse(R"({
    "type": "object",
    "properties": {
      "path": {"type": "string", "maxLength": 8},
      "mode": {"enum": ["r", "w"]},
      "n": {"type": "integer"},
      "tags": {"type": "array", "items": {"type": "boolean"}, "maxItems": 2},
      "x": {"anyOf": [{"type": "number"}, {"type": "null"}]}
    },
    "required": ["path"],
    "additionalProperties": false
  })");
  // Properties come in the schema's key order (nlohmann sorts keys: canonical_json's order).
  Automaton a = SchemaAutomaton(schema);
  for (const char* ok : {R"({"path":"a"})", R"({"mode":"w","path":""})", R"({"n":-12,"path":"\u00e9\n"})",
                         R"({"path":"x","tags":[true,false],"x":null})", R"({"path":"é","x":1.5e+3})",
                         R"({"path":"\ud83d\ude00"})"}) {
    INFO(std::string(ok));
    CHECK(Accepts(a, ok));
    CHECK(cedar::test::Validates(schema, json::parse(ok)));
  }
  for (const char* bad : {R"({})", R"({"mode":"x","path":"a"})", R"({"path":"123456789"})", R"({"path":1})",
                          R"({"path":"a","n":1.5})", R"({"path":"a","tags":[true,true,true]})",
                          R"({"path":"a","other":1})", R"({"path":"a"} )", R"({"path":"\ud800"})",
                          "{\"path\":\"\xff\"}", R"({"path":"a","n":01})"}) {
    INFO(std::string(bad));
    CHECK_FALSE(Accepts(a, bad));
  }
}

TEST_CASE("refs, recursion, const and additional properties") {
  const json schema = json::parse(R"({
    "$defs": {"node": {"type": "object", "properties": {"v": {"const": 3}, "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
                       "required": ["v"], "additionalProperties": false}},
    "type": "object",
    "properties": {"root": {"$ref": "#/$defs/node"}},
    "required": ["root"],
    "additionalProperties": {"type": "integer"}
  })");
  Automaton a = SchemaAutomaton(schema);
  CHECK(Accepts(a, R"({"root":{"kids":[{"v":3},{"kids":[],"v":3}],"v":3},"zz":4})"));
  CHECK_FALSE(Accepts(a, R"({"root":{"v":4}})"));
  CHECK_FALSE(Accepts(a, R"({"root":{"v":3},"root":1})"));  // an extra key never equals a declared one
  CHECK_FALSE(Accepts(a, R"({"root":{"v":3},"zz":"s"})"));
}

TEST_CASE("unsupported keywords are named, or ignored when asked") {
  const json schema = json::parse(R"({"type": "string", "pattern": "^a+$"})");
  try {
    SchemaAutomaton(schema);
    FAIL("expected GrammarError");
  } catch (const GrammarError& e) {
    CHECK(std::string(e.what()).find("pattern") != std::string::npos);
  }
  SchemaOptions lax;
  lax.error_on_unsupported = false;
  Automaton a = SchemaAutomaton(schema, lax);
  CHECK(Accepts(a, "\"b\""));
  CHECK_THROWS_AS(SchemaAutomaton(json::parse(R"({"$ref": "#/$defs/missing"})")), GrammarError);
  CHECK_THROWS_AS(SchemaAutomaton(json::parse(R"({"type": "strin"})")), GrammarError);
  CHECK_THROWS_AS(SchemaAutomaton(json(false)), GrammarError);
}

TEST_CASE("token masks from the trie walk equal trying every token, and rollback restores them") {
  const auto bytes = ToyVocab(7);
  auto vocab = std::make_shared<const TokenVocab>(bytes, std::vector<std::pair<int32_t, std::string>>{});
  const json schema = json::parse(R"({"type":"object","properties":{"name":{"type":"string"},"a":{"type":"array","items":{"type":"number"}},
                                      "b":{"enum":[true,null]}},"required":["name"],"additionalProperties":false})");
  Grammar g;
  g.SetRoot(CompileJsonSchema(g, schema));
  auto automaton = std::make_shared<Automaton>(g);
  const int32_t end_id = int32_t(bytes.size()) - 1;  // the unused id doubles as the end id
  TokenMatcher m(automaton, vocab, {end_id});
  std::mt19937_64 rng(3);
  std::vector<TokenMask> masks;
  for (int step = 0; step < 200 && !m.Ended(); ++step) {
    const TokenMask mask = m.Mask();
    // Brute force: a token fits when each of its bytes leads to a live state.
    for (int32_t id = 0; id < vocab->size(); ++id) {
      bool fits;
      if (id == end_id) {
        fits = m.Accepting();
      } else {
        StateId s = m.state();
        for (char c : bytes[size_t(id)]) s = s == kDeadState ? s : automaton->Next(s, Symbol(uint8_t(c)));
        fits = s != kDeadState;
      }
      if (mask.Test(id) != fits) {
        FAIL("step " << step << " token " << id << " \"" << bytes[size_t(id)] << "\": mask " << mask.Test(id)
                     << ", brute force " << fits);
      }
    }
    masks.push_back(mask);
    std::vector<int32_t> allowed;
    for (int32_t id = 0; id < vocab->size(); ++id)
      if (mask.Test(id)) allowed.push_back(id);
    REQUIRE(!allowed.empty());
    // Prefer long tokens so many steps cross grammar boundaries.
    int32_t pick = allowed[rng() % allowed.size()];
    for (int k = 0; k < 3 && bytes[size_t(pick)].size() < 2; ++k) pick = allowed[rng() % allowed.size()];
    REQUIRE(m.AcceptToken(pick));
    if (step % 7 == 6) {  // roll back two and check the mask is what it was
      const size_t back = std::min<size_t>(2, m.accepted());
      m.Rollback(back);
      CHECK(m.Mask().words == masks[masks.size() - back].words);
      masks.resize(masks.size() - back);
    }
  }
  CHECK(m.accepted() > 0);
}

TEST_CASE("random schemas: constrained sampling always validates, unconstrained rarely does") {
  // 200 seeded schemas x random logits over a vocabulary of bytes and multi-byte JSON pieces.
  const auto bytes = ToyVocab(11);
  auto vocab = std::make_shared<const TokenVocab>(bytes, std::vector<std::pair<int32_t, std::string>>{});
  const int32_t end_id = int32_t(bytes.size()) - 1;
  SchemaOptions o;
  o.max_string_length = 16;  // extra keys: random logits rarely close a string on their own
  int valid = 0, valid_free = 0, runs = 0;
  for (uint64_t seed = 1; seed <= 200; ++seed) {
    const json schema = cedar::test::RandomSchema(seed);
    Grammar g;
    g.SetRoot(CompileJsonSchema(g, schema, o));
    TokenMatcher m(std::make_shared<Automaton>(g), vocab, {end_id});
    auto random_logits = [&](const std::vector<int32_t>& ids) {
      uint64_t x = seed * 1000003 + ids.size() * 7919 + 1;  // xorshift: cheap, seeded
      std::vector<float> l(bytes.size());
      for (float& v : l) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        v = float(x >> 40) * (8.0f / float(1 << 24));  // uniform in [0, 8)
      }
      return l;
    };
    auto text_of = [&](const std::vector<int32_t>& ids) {
      std::string t;
      for (int32_t id : ids) t += bytes[size_t(id)];
      return t;
    };
    const auto ids = cedar::test::SampleIds(random_logits, &m, {end_id}, 4000, seed);
    const std::string text = text_of(ids);
    const bool ok = !ids.empty() && ids.back() == end_id && cedar::test::TextValidates(schema, text);
    if (!ok) FAIL("seed " << seed << ": schema " << schema.dump() << "\noutput " << text);
    valid += ok;
    const auto free_ids = cedar::test::SampleIds(random_logits, nullptr, {end_id}, int(ids.size()), seed);
    valid_free += cedar::test::TextValidates(schema, text_of(free_ids));
    ++runs;
  }
  MESSAGE("constrained valid " << valid << "/" << runs << ", unconstrained valid " << valid_free << "/" << runs);
  CHECK(valid == runs);
  CHECK(valid_free < runs / 2);
}

TEST_CASE("a schema that would build too many rules is refused, not allocated") {
  json schema = {{"type", "object"}, {"properties", json::object()}};
  for (int i = 0; i < 8; ++i) schema["properties"]["p" + std::to_string(i)] = {{"type", "string"}, {"maxLength", 90000 + i}};  // distinct: equal bounds share rules
  try {
    SchemaAutomaton(schema);
    FAIL("expected GrammarError");
  } catch (const GrammarError& e) {
    CHECK(std::string(e.what()).find("rules") != std::string::npos);
  }
}
