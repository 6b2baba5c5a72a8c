// Grammar-constrained decoding with the random-weight tiny model through the session manager's
// sampling hook (TurnRequest::logits_processor): for 200 seeded random schemas and the real
// tool table, every constrained output passes valijson (a real validator), and the same turns
// without the constraint almost never do, so the constraint is what makes them valid.
#include <doctest/doctest.h>

#include <future>

#include "engine/config.h"
#include "grammar/automaton.h"
#include "grammar/json_schema.h"
#include "grammar/logits_processor.h"
#include "session/session_manager.h"
#include "tests/grammar_util.h"
#include "tests/test_models.h"
#include "tools_bridge/lib/chat_template.h"
#include "tools_bridge/lib/tool_call_grammar.h"
#include "tools_bridge/lib/tool_calls.h"

using namespace cedar;
using nlohmann::json;

namespace {

std::shared_ptr<const Model> Tiny() { return cedar::test::SharedPresetModel("tiny"); }

session::TurnRequest Request(uint64_t seed, int max_tokens, std::shared_ptr<LogitsProcessor> processor,
                             const std::vector<int32_t>& end_ids) {
  session::TurnRequest rq;
  rq.prompt = cedar::test::RandomTokens(12, 256, seed);
  rq.max_tokens = max_tokens;
  rq.sampling.temperature = 1.0f;
  rq.sampling.seed = seed;
  rq.stop_tokens = end_ids;
  rq.logits_processor = std::move(processor);
  return rq;
}

std::shared_ptr<LogitsProcessor> Processor(const grammar::Grammar& g, std::shared_ptr<const grammar::TokenVocab> vocab,
                                           const std::vector<int32_t>& end_ids) {
  return std::make_shared<grammar::GrammarLogitsProcessor>(
      std::make_unique<grammar::TokenMatcher>(std::make_shared<grammar::Automaton>(g), vocab, end_ids));
}

// Output ids without a trailing stop id, as bytes.
std::string Text(const bridge::Tokenizer& tok, std::vector<int32_t> ids, const std::vector<int32_t>& end_ids) {
  if (!ids.empty() && std::find(end_ids.begin(), end_ids.end(), ids.back()) != end_ids.end()) ids.pop_back();
  return tok.Decode(ids);
}

}  // namespace

TEST_CASE("tiny model, 200 random schemas: constrained output always validates, unconstrained rarely") {
  bridge::ByteTokenizer tok(Tiny()->config().vocab_size);
  const auto vocab = bridge::GrammarVocabOf(tok);
  const bridge::ChatTemplate tpl(tok);
  const std::vector<int32_t> end_ids = {tpl.stop_ids()[0], tpl.stop_ids()[1]};
  auto manager = session::SessionManager::Start(Tiny(), {});
  constexpr int kRuns = 200;
  std::vector<json> schemas;
  std::vector<std::future<session::TurnResult>> constrained;
  for (uint64_t seed = 1; seed <= kRuns; ++seed) {
    schemas.push_back(cedar::test::RandomSchema(seed));
    grammar::Grammar g;
    grammar::SchemaOptions o;
    o.max_string_length = 16;  // extra property keys (every generated string has a maxLength)
    g.SetRoot(grammar::CompileJsonSchema(g, schemas.back(), o));
    constrained.push_back(manager->Submit(Request(seed, 2000, Processor(g, vocab, end_ids), end_ids)));
  }
  std::vector<session::TurnResult> results;
  for (auto& f : constrained) results.push_back(f.get());
  std::vector<std::future<session::TurnResult>> free;
  for (uint64_t seed = 1; seed <= kRuns; ++seed)
    free.push_back(manager->Submit(Request(seed, int(results[seed - 1].output.size()), nullptr, end_ids)));
  int valid = 0, valid_free = 0;
  for (int i = 0; i < kRuns; ++i) {
    const session::TurnResult& r = results[size_t(i)];
    REQUIRE(r.error.empty());
    const std::string text = Text(tok, r.output, end_ids);
    const bool ok = r.finish_reason == "stop" && cedar::test::TextValidates(schemas[size_t(i)], text);
    if (!ok) FAIL("seed " << i + 1 << " (" << r.finish_reason << "): schema " << schemas[size_t(i)].dump() << "\noutput " << text);
    valid += ok;
    const session::TurnResult fr = free[size_t(i)].get();
    valid_free += cedar::test::TextValidates(schemas[size_t(i)], Text(tok, fr.output, end_ids));
  }
  MESSAGE("tiny model: constrained valid " << valid << "/" << kRuns << ", unconstrained valid " << valid_free << "/" << kRuns);
  CHECK(valid == kRuns);
  CHECK(valid_free < kRuns / 2);
}

TEST_CASE("tiny model, real tools with tool_choice required: every call names a tool and validates") {
  bridge::ByteTokenizer tok(Tiny()->config().vocab_size);
  const auto vocab = bridge::GrammarVocabOf(tok);
  const bridge::ChatTemplate tpl(tok);
  const std::vector<int32_t> end_ids = {tpl.stop_ids()[0], tpl.stop_ids()[1]};
  auto manager = session::SessionManager::Start(Tiny(), {});
  bridge::OutputConstraint c;
  c.choice = bridge::ToolChoice::kRequired;
  c.tools = cedar::test::RealTools();
  c.schema.max_string_length = 24;  // the real schemas set no maxLength; a random model rarely ends a string
  const grammar::Grammar g = bridge::AssistantGrammar(bridge::ChatFormat::kCedar, c);
  constexpr int kRuns = 24;
  std::vector<std::future<session::TurnResult>> constrained;
  for (uint64_t seed = 1; seed <= kRuns; ++seed) constrained.push_back(manager->Submit(Request(seed, 3000, Processor(g, vocab, end_ids), end_ids)));
  int calls = 0, free_ok = 0;
  for (uint64_t seed = 1; seed <= kRuns; ++seed) {
    const session::TurnResult r = constrained[seed - 1].get();
    const bridge::AssistantOutput out = bridge::ParseAssistantOutput(tok, r.output);
    INFO("seed " << seed << ": " << tok.Decode(r.output));
    CHECK(r.finish_reason == "stop");
    CHECK(out.content.empty());
    REQUIRE(!out.tool_calls.empty());
    for (const bridge::ToolCall& call : out.tool_calls) {
      const json* schema = nullptr;
      for (const json& t : c.tools)
        if (t["function"]["name"] == call.name) schema = &t["function"]["parameters"];
      REQUIRE(schema);
      CHECK(cedar::test::Validates(*schema, json::parse(call.arguments)));
      ++calls;
    }
    const session::TurnResult fr = manager->Submit(Request(seed, int(r.output.size()), nullptr, end_ids)).get();
    const bridge::AssistantOutput fo = bridge::ParseAssistantOutput(tok, fr.output);
    free_ok += !fo.tool_calls.empty() && fo.content.empty();
  }
  MESSAGE("tiny model, required: " << calls << " calls in " << kRuns << " turns, all valid; unconstrained turns that made one: "
                                   << free_ok << "/" << kRuns);
  CHECK(free_ok < kRuns / 2);
}
