// Tool-call grammars (tools_bridge/lib/tool_call_grammar.h) in both chat formats, sampled with
// random logits and read back by the formats' own parsers: every mode of tool_choice and
// parallel_tool_calls yields what it promises, every call names a tool and its arguments pass
// valijson against that tool's schema; without the grammar the same logits almost never do.
#include <doctest/doctest.h>

#include <map>

#include "grammar/automaton.h"
#include "tests/grammar_util.h"
#include "tools_bridge/lib/dsml_encoding.h"
#include "tools_bridge/lib/dsml_parser.h"
#include "tools_bridge/lib/tool_call_grammar.h"
#include "tools_bridge/lib/tool_calls.h"

using namespace cedar;
using namespace cedar::bridge;
using nlohmann::json;

namespace {

std::vector<float> RandomLogits(size_t n, uint64_t seed, size_t step) {
  uint64_t x = seed * 1000003 + step * 7919 + 1;
  std::vector<float> l(n);
  for (float& v : l) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    v = float(x >> 40) * (8.0f / float(1 << 24));
  }
  return l;
}

const json& SchemaOf(const json& tools, const std::string& name) {
  for (const json& t : tools)
    if (t["function"]["name"] == name) return t["function"]["parameters"];
  FAIL("no tool " << name);
  static json none;
  return none;
}

// What a mode promises about the parsed output.
void CheckOutput(const AssistantOutput& out, const OutputConstraint& c, const std::string& shown) {
  INFO(shown);
  for (const ToolCall& call : out.tool_calls) {
    const json args = json::parse(call.arguments, nullptr, false);
    CHECK_MESSAGE(cedar::test::Validates(SchemaOf(c.tools, call.name), args), "call " << call.name << " " << call.arguments);
    if (c.choice == ToolChoice::kNamed) CHECK(call.name == c.function);
  }
  switch (c.choice) {
    case ToolChoice::kNone: CHECK(out.tool_calls.empty()); break;
    case ToolChoice::kAuto: break;
    case ToolChoice::kRequired:
    case ToolChoice::kNamed:
      CHECK(!out.tool_calls.empty());
      CHECK(out.content.empty());
      break;
  }
  if (!c.parallel_tool_calls || c.choice == ToolChoice::kNamed) CHECK(out.tool_calls.size() <= 1);
  CHECK(out.stopped);
}

std::vector<OutputConstraint> Modes() {
  std::vector<OutputConstraint> modes;
  for (ToolChoice choice : {ToolChoice::kNone, ToolChoice::kAuto, ToolChoice::kRequired, ToolChoice::kNamed}) {
    for (bool parallel : {true, false}) {
      OutputConstraint c;
      c.choice = choice;
      c.parallel_tool_calls = parallel;
      c.tools = cedar::test::RealTools();
      c.function = "write_file";
      c.schema.max_string_length = 24;  // random logits rarely end a string on their own
      modes.push_back(c);
    }
  }
  return modes;
}

}  // namespace

TEST_CASE("cedar format: every tool_choice mode holds and every call validates") {
  ByteTokenizer tok(512);
  const auto vocab = GrammarVocabOf(tok);
  const ChatTemplate tpl(tok);
  const std::vector<int32_t> end_ids = {tpl.stop_ids()[0], tpl.stop_ids()[1]};
  int runs = 0, free_required_ok = 0;
  for (const OutputConstraint& c : Modes()) {
    const grammar::Grammar g = AssistantGrammar(ChatFormat::kCedar, c);
    for (uint64_t seed = 1; seed <= 12; ++seed) {
      grammar::TokenMatcher m(std::make_shared<grammar::Automaton>(g), vocab, end_ids);
      auto logits = [&](const std::vector<int32_t>& ids) { return RandomLogits(512, seed, ids.size()); };
      const auto ids = cedar::test::SampleIds(logits, &m, end_ids, 6000, seed);
      const AssistantOutput out = ParseAssistantOutput(tok, ids);
      CheckOutput(out, c, "seed " + std::to_string(seed) + " choice " + std::to_string(int(c.choice)) + ": " +
                              tok.Decode(ids));
      ++runs;
      if (c.choice == ToolChoice::kRequired) {
        const auto free_ids = cedar::test::SampleIds(logits, nullptr, end_ids, int(ids.size()), seed);
        const AssistantOutput f = ParseAssistantOutput(tok, free_ids);
        free_required_ok += !f.tool_calls.empty() && f.content.empty();
      }
    }
  }
  MESSAGE(runs << " constrained runs held; unconstrained runs that made the required call: " << free_required_ok << "/24");
  CHECK(free_required_ok < 12);
}

TEST_CASE("deepseek_v41 DSML format: every tool_choice mode holds and every call validates") {
  // Bytes, the DSML pieces as multi-byte tokens (so tokens span several grammar steps), and
  // the end-of-sentence special.
  std::vector<std::string> bytes;
  for (int b = 0; b < 256; ++b) bytes.push_back(std::string(1, char(b)));
  for (const char* piece : {"<｜DSML｜", "｜DSML｜ ", " invoke", " parameter", " name=\"", "\" string=\"", "true\">", "false\">",
                            "</｜DSML｜", " calls>", "\n\n", "\">\n", "path", "\":\"", "\"}", "</think>"}) {
    bytes.push_back(piece);
  }
  const int32_t eos = int32_t(bytes.size());
  bytes.push_back("");
  const auto vocab = std::make_shared<const grammar::TokenVocab>(
      bytes, std::vector<std::pair<int32_t, std::string>>{{eos, std::string(dsml::kEos)}});
  int runs = 0;
  for (bool thinking : {false, true}) {
    for (OutputConstraint c : Modes()) {
      c.thinking = thinking;
      const grammar::Grammar g = AssistantGrammar(ChatFormat::kDeepseekV41, c);
      for (uint64_t seed = 1; seed <= 6; ++seed) {
        grammar::TokenMatcher m(std::make_shared<grammar::Automaton>(g), vocab, {eos});
        auto logits = [&](const std::vector<int32_t>& ids) { return RandomLogits(bytes.size(), seed, ids.size()); };
        const auto ids = cedar::test::SampleIds(logits, &m, {eos}, 8000, seed);
        std::string text;
        for (int32_t id : ids) text += id == eos ? std::string(dsml::kEos) : bytes[size_t(id)];
        CheckOutput(dsml::ParseOutput(text, thinking), c, "seed " + std::to_string(seed) + ": " + text);
        ++runs;
      }
    }
  }
  MESSAGE(runs << " constrained DSML runs held");
}

TEST_CASE("a named function that is not in tools is an error naming it") {
  OutputConstraint c;
  c.choice = ToolChoice::kNamed;
  c.function = "nope";
  c.tools = cedar::test::RealTools();
  try {
    AssistantGrammar(ChatFormat::kCedar, c);
    FAIL("expected GrammarError");
  } catch (const grammar::GrammarError& e) {
    CHECK(std::string(e.what()).find("nope") != std::string::npos);
  }
}
