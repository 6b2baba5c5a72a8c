// deepseek_v41 output parsing: ported and lenient vectors (tests/data/dsml/make_parser_vectors.py)
// parsed whole, then streamed in every two-piece split, byte by byte and in random chunks: the
// accumulated deltas must equal the whole parse every time.
#include <doctest/doctest.h>

#include <fstream>
#include <random>
#include <sstream>

#include "tools_bridge/lib/dsml_encoding.h"
#include "tools_bridge/lib/dsml_parser.h"
#include "tools_bridge/lib/openai_json.h"

namespace cedar::bridge {
namespace {

using ojson = nlohmann::ordered_json;

ojson LoadVectors() {
  std::ifstream in(std::string(CEDAR_SOURCE_DIR) + "/tests/data/dsml/parser_vectors.json");
  REQUIRE(in.good());
  std::stringstream ss;
  ss << in.rdbuf();
  return ojson::parse(ss.str());
}

AssistantOutput Expected(const ojson& e) {
  AssistantOutput out;
  out.reasoning = e.at("reasoning").get<std::string>();
  out.content = e.at("content").get<std::string>();
  out.stopped = e.at("stopped").get<bool>();
  int n = 0;
  for (const ojson& c : e.at("tool_calls")) {
    out.tool_calls.push_back({"call_" + std::to_string(n++), c.at("name").get<std::string>(),
                              c.at("arguments").get<std::string>()});
  }
  return out;
}

// Streams `text` cut at `cuts` (ascending offsets) and folds the deltas.
AssistantOutput Stream(std::string_view text, bool thinking, const std::vector<size_t>& cuts) {
  dsml::StreamParser parser(thinking);
  AssistantOutput out;
  size_t from = 0;
  auto push = [&](size_t to) {
    for (const StreamDelta& d : parser.Push(text.substr(from, to - from))) ApplyDelta(d, out);
    from = to;
  };
  for (size_t c : cuts) push(c);
  push(text.size());
  for (const StreamDelta& d : parser.Finish()) ApplyDelta(d, out);
  CHECK(parser.Finish().empty());  // idempotent
  out.stopped = parser.stopped();
  return out;
}

std::string Show(const AssistantOutput& o) { return AssistantMessageJson(o).dump(); }

TEST_CASE("dsml parser: vectors whole and in every chunking") {
  const ojson data = LoadVectors();
  std::mt19937 rng(5);
  int cases = 0;
  for (const ojson& c : data.at("cases")) {
    const std::string name = c.at("name").get<std::string>();
    CAPTURE(name);
    const std::string text = c.at("text").get<std::string>();
    const bool thinking = c.at("thinking").get<bool>();
    const AssistantOutput want = Expected(c.at("expected"));
    const AssistantOutput whole = dsml::ParseOutput(text, thinking);
    CHECK_MESSAGE(whole == want, "want " << Show(want) << "\n got " << Show(whole));
    CHECK(whole.stopped == want.stopped);
    for (size_t cut = 1; cut < text.size(); ++cut) {
      const AssistantOutput got = Stream(text, thinking, {cut});
      if (!(got == whole)) {
        FAIL_CHECK("split at " << cut << ": " << Show(got));
        break;
      }
    }
    std::vector<size_t> every;
    for (size_t i = 1; i < text.size(); ++i) every.push_back(i);
    CHECK(Stream(text, thinking, every) == whole);
    for (int trial = 0; trial < 20; ++trial) {
      std::vector<size_t> cuts;
      for (size_t i = 1; i < text.size(); ++i) {
        if (std::uniform_int_distribution<int>(0, 6)(rng) == 0) cuts.push_back(i);
      }
      CHECK(Stream(text, thinking, cuts) == whole);
    }
    ++cases;
  }
  CHECK(cases >= 30);
}

TEST_CASE("dsml parser streams content early and never splits a UTF-8 character") {
  dsml::StreamParser p(false);
  std::vector<StreamDelta> d = p.Push("Hello \xE4\xB8");  // "中" cut after two bytes
  REQUIRE(d.size() == 1);
  CHECK(d[0].kind == StreamDelta::Kind::kContent);
  CHECK(d[0].text == "Hello ");
  d = p.Push("\xAD\n");  // completes 中; the newline may start "\n\n<｜DSML｜ calls>"
  REQUIRE(d.size() == 1);
  CHECK(d[0].text == "\xE4\xB8\xAD");
  d = p.Push("<｜DSML｜ ca");
  CHECK(d.empty());
  d = p.Push("t>");  // not a calls tag after all
  REQUIRE(d.size() == 1);
  CHECK(d[0].text == "\n<｜DSML｜ cat>");
}

TEST_CASE("dsml parser: a call comes out whole when its invoke closes, with fresh ids") {
  dsml::StreamParser p(true, {"call_t7_", 3});
  CHECK(p.Push("think").size() == 1);
  std::vector<StreamDelta> d = p.Push("</think>\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"f\">\n");
  CHECK(d.empty());
  d = p.Push("<｜DSML｜ parameter name=\"n\" string=\"false\">1.50</｜DSML｜ parameter>\n</｜DSML｜ invoke>");
  REQUIRE(d.size() == 2);
  CHECK(d[0].kind == StreamDelta::Kind::kToolCallStart);
  CHECK(d[0].id == "call_t7_3");
  CHECK(d[0].name == "f");
  CHECK(d[1].kind == StreamDelta::Kind::kToolCallArguments);
  CHECK(d[1].text == R"({"n": 1.5})");
  CHECK(DeltaJson(d[0]).dump() ==
        R"({"tool_calls":[{"function":{"arguments":"","name":"f"},"id":"call_t7_3","index":0,"type":"function"}]})");
  d = p.Push("\n</｜DSML｜ calls><｜end▁of▁sentence｜>trailing");
  CHECK(d.empty());
  CHECK(p.stopped());
  CHECK(p.tool_call_count() == 1);
  CHECK(p.raw() == "think</think>\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"f\">\n<｜DSML｜ parameter "
                   "name=\"n\" string=\"false\">1.50</｜DSML｜ parameter>\n</｜DSML｜ invoke>\n</｜DSML｜ calls>");
  CHECK(p.Push("more").empty());
}

TEST_CASE("dsml parser: reasoning deltas map to reasoning_content") {
  const AssistantOutput out = dsml::ParseOutput("r</think>c", true);
  CHECK(AssistantMessageJson(out).dump() ==
        R"({"content":"c","reasoning_content":"r","role":"assistant"})");
  StreamDelta d;
  d.kind = StreamDelta::Kind::kReasoning;
  d.text = "x";
  CHECK(DeltaJson(d).dump() == R"({"reasoning_content":"x"})");
}

}  // namespace
}  // namespace cedar::bridge
