// deepseek_v41 chat encoding: the encoder against the released encoder's vectors (ported, see
// tests/data/dsml/make_encoder_vectors.py), Python-JSON formatting against CPython's own output,
// and byte-exact replay (raw generated text, segments, prefix extension across agent turns).
#include <doctest/doctest.h>

#include <fstream>
#include <functional>
#include <random>
#include <sstream>

#include "engine/config.h"
#include "tools_bridge/lib/chat_format.h"
#include "tools_bridge/lib/dsml_encoding.h"
#include "tools_bridge/lib/dsml_parser.h"
#include "tools_bridge/lib/openai_json.h"
#include "tools_bridge/lib/py_json.h"

namespace cedar::bridge {
namespace {

using ojson = nlohmann::ordered_json;

ojson LoadData(const std::string& name) {
  std::ifstream in(std::string(CEDAR_SOURCE_DIR) + "/tests/data/dsml/" + name);
  REQUIRE_MESSAGE(in.good(), "missing test data " << name);
  std::stringstream ss;
  ss << in.rdbuf();
  return ojson::parse(ss.str());
}

// Where two strings first differ, with a little context, for failure messages.
std::string FirstDifference(const std::string& want, const std::string& got) {
  size_t i = 0;
  while (i < want.size() && i < got.size() && want[i] == got[i]) ++i;
  const size_t from = i > 40 ? i - 40 : 0;
  return "at byte " + std::to_string(i) + "\n  want: ..." + want.substr(from, 120) +
         "\n  got:  ..." + got.substr(from, 120);
}

Message Msg(Role role, std::string content, std::vector<ToolCall> calls = {}) {
  Message m;
  m.role = role;
  m.content = std::move(content);
  m.tool_calls = std::move(calls);
  return m;
}

dsml::Options OptionsOf(const ojson& c) {
  dsml::Options o;
  o.thinking = c.at("thinking").get<bool>();
  if (c.contains("reasoning_effort")) {
    o.reasoning_effort = dsml::ParseReasoningEffort(c["reasoning_effort"].get<std::string>());
  }
  if (c.contains("drop_thinking")) o.drop_thinking = c["drop_thinking"].get<bool>();
  return o;
}

TEST_CASE("dsml encoder renders the released encoder's vectors byte for byte") {
  const ojson data = LoadData("encoder_vectors.json");
  int ported = 0;
  for (const ojson& c : data.at("cases")) {
    CAPTURE(c.at("name").get<std::string>());
    // MessagesFromJson takes nlohmann::json; the messages' key order does not matter to it.
    const auto messages = MessagesFromJson(nlohmann::json::parse(c.at("messages").dump()));
    const ojson tools = c.contains("tools") ? c["tools"] : ojson();
    const std::string want = c.at("expected").get<std::string>();
    const std::string got = dsml::Render(messages, tools, OptionsOf(c));
    CHECK_MESSAGE(got == want, FirstDifference(want, got));
    ported += c.at("source") == "ported";
  }
  CHECK(ported >= 25);
}

TEST_CASE("PyJsonDumps matches CPython json.dumps(ensure_ascii=False)") {
  const ojson data = LoadData("py_json_vectors.json");
  for (const ojson& c : data.at("cases")) {
    const std::string input = c.at("input").get<std::string>();
    CAPTURE(input);
    CHECK(PyJsonDumps(ojson::parse(input)) == c.at("expected").get<std::string>());
  }
}

TEST_CASE("reasoning effort: aliases, integers, and a clear error otherwise") {
  CHECK(dsml::ParseReasoningEffort("low") == 50);
  CHECK(dsml::ParseReasoningEffort("high") == 75);
  CHECK(dsml::ParseReasoningEffort("max") == 100);
  CHECK(dsml::ParseReasoningEffort("1") == 1);
  CHECK(dsml::ParseReasoningEffort("100") == 100);
  for (const char* bad : {"0", "101", "medium", "", "7x", "-5"}) {
    CAPTURE(bad);
    CHECK_THROWS_WITH_AS(dsml::ParseReasoningEffort(bad),
                         doctest::Contains("expected \"low\", \"high\", \"max\""),
                         ChatTemplateError);
  }
  dsml::Options o;
  o.reasoning_effort = 0;
  const std::vector<Message> m = {Msg(Role::kUser, "hi")};
  CHECK_THROWS_AS(dsml::Render(m, ojson(), o), ChatTemplateError);
  CHECK_THROWS_WITH_AS(dsml::Render(m, ojson::parse(R"([{"type":"function"}])"), {}),
                       doctest::Contains("tools[0].function"), ChatTemplateError);
}

// A random call with canonical (Python-JSON) arguments, as the parser produces them.
ToolCall RandomCall(std::mt19937& rng, int n) {
  static const std::vector<std::string> pieces = {
      "a", "Z", " ", "\"", "\\", "\n", "\t", "<", ">", "&", "中文", "😀", "{", "}", "[1, 2]",
      "</think>", "<｜DSML｜ calls>", "null", "3"};
  auto str = [&] {
    std::string s;
    for (int k = std::uniform_int_distribution<int>(0, 6)(rng); k > 0; --k) {
      s += pieces[std::uniform_int_distribution<size_t>(0, pieces.size() - 1)(rng)];
    }
    return s;
  };
  std::function<ojson(int)> value = [&](int depth) -> ojson {
    switch (std::uniform_int_distribution<int>(0, depth < 2 ? 6 : 4)(rng)) {
      case 0: return str();
      case 1: return std::uniform_int_distribution<int>(-100000, 100000)(rng);
      case 2: return std::uniform_real_distribution<double>(-1e6, 1e6)(rng);
      case 3: return std::uniform_int_distribution<int>(0, 1)(rng) == 1;
      case 4: return nullptr;
      case 5: {
        ojson o = ojson::object();
        for (int k = std::uniform_int_distribution<int>(0, 3)(rng); k > 0; --k) o[str()] = value(depth + 1);
        return o;
      }
      default: {
        ojson a = ojson::array();
        for (int k = std::uniform_int_distribution<int>(0, 3)(rng); k > 0; --k) a.push_back(value(depth + 1));
        return a;
      }
    }
  };
  ojson args = ojson::object();
  for (int k = std::uniform_int_distribution<int>(0, 4)(rng); k > 0; --k) {
    std::string key = "p";  // (not "p" + ...: GCC 12 warns falsely about that form, -Wrestrict)
    key += std::to_string(k);
    args[key] = value(0);
  }
  return {"call_" + std::to_string(n), "tool_" + std::to_string(n % 3), PyJsonDumps(args)};
}

TEST_CASE("parse(render(call)) == call for random calls") {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<ToolCall> calls;
    for (int k = std::uniform_int_distribution<int>(1, 3)(rng); k > 0; --k) {
      calls.push_back(RandomCall(rng, static_cast<int>(calls.size())));
    }
    const std::string text = "Let me check.\n\n" + dsml::RenderCalls(calls) + std::string(dsml::kEos);
    CAPTURE(text);
    const AssistantOutput out = dsml::ParseOutput(text, false);
    CHECK(out.content == "Let me check.");
    CHECK(out.stopped);
    CHECK(out.tool_calls == calls);  // ids: call_0, call_1, ... both ways
  }
}

// Tools for the replay tests.
const ojson& Tools() {
  static const ojson tools = ojson::parse(
      R"([{"type":"function","function":{"name":"read","description":"Read a file",
          "parameters":{"type":"object","properties":{"path":{"type":"string"},"lines":{"type":"integer"}}}}}])");
  return tools;
}

TEST_CASE("raw generated text is replayed verbatim and marked as a segment") {
  // The model wrote its call with an odd spacing and integer as 07: a client that re-serialises
  // the call ({"path":"a.txt","lines":7}) would render different bytes.
  const std::string raw =
      "I should read it.</think>Reading.\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"read\">\n"
      "<｜DSML｜ parameter name=\"path\" string=\"true\">a.txt</｜DSML｜ parameter>\n"
      "<｜DSML｜ parameter name=\"lines\" string=\"false\"> 7 </｜DSML｜ parameter>\n"
      "</｜DSML｜ invoke>\n</｜DSML｜ calls>";
  std::vector<Message> m = {Msg(Role::kUser, "read a.txt")};
  dsml::Options o;
  o.thinking = true;
  const std::string prompt = dsml::Render(m, Tools(), o);
  const AssistantOutput parsed = dsml::ParseOutput(raw, true);
  REQUIRE(parsed.tool_calls.size() == 1);
  CHECK(parsed.tool_calls[0].arguments == R"({"path": "a.txt", "lines": 7})");
  Message a = Msg(Role::kAssistant, parsed.content, parsed.tool_calls);
  a.reasoning = parsed.reasoning;
  Message result = Msg(Role::kTool, "hello");
  result.tool_call_id = parsed.tool_calls[0].id;

  // Canonical rendering differs from what the model wrote (" 7 " became "7")...
  std::vector<Message> next = m;
  next.push_back(a);
  next.push_back(result);
  const dsml::Rendered canonical = dsml::RenderSegments(next, Tools(), o);
  CHECK(canonical.canonical_tool_call_turns == 1);
  CHECK(canonical.raw_turns == 0);
  CHECK(canonical.Text().find(raw) == std::string::npos);
  // ...while with raw the next prompt extends the previous prompt plus the generated bytes.
  next[1].raw = raw;
  const dsml::Rendered replay = dsml::RenderSegments(next, Tools(), o);
  CHECK(replay.raw_turns == 1);
  CHECK(replay.canonical_tool_call_turns == 0);
  CHECK(replay.Text().starts_with(prompt + raw + std::string(dsml::kEos)));
  int generated = 0;
  for (const dsml::Segment& s : replay.segments) {
    if (s.message == -1) continue;
    ++generated;
    CHECK(s.message == 1);
    CHECK(s.raw_offset == 0);
    CHECK(s.text == raw);
  }
  CHECK(generated == 1);
}

TEST_CASE("raw text of a turn whose reasoning is dropped renders from after </think>") {
  // Thinking mode without tools: the released encoder drops earlier reasoning.
  std::vector<Message> m = {Msg(Role::kUser, "Q1"), Msg(Role::kAssistant, "A1"), Msg(Role::kUser, "Q2")};
  m[1].raw = "secret</think>A1 exactly";
  dsml::Options o;
  o.thinking = true;
  const dsml::Rendered r = dsml::RenderSegments(m, ojson(), o);
  CHECK(r.Text() == std::string(dsml::kBos) +
                        "<｜System｜>Reasoning Effort: 75 (range 1-100, the higher the value, the "
                        "more thorough the reasoning)\n\n<｜User｜>Q1<｜Assistant｜></think>A1 "
                        "exactly<｜end▁of▁sentence｜><｜User｜>Q2<｜Assistant｜><think>");
  bool found = false;
  for (const dsml::Segment& s : r.segments) {
    if (s.message != 1) continue;
    found = true;
    CHECK(s.raw_offset == std::string("secret</think>").size());
    CHECK(s.text == "A1 exactly");
  }
  CHECK(found);
}

// Agent loop: each turn's prompt extends the previous prompt + the model's output + EOS, for
// the released format with tools (reasoning kept), in thinking and chat mode.
TEST_CASE("with raw replay every agent turn extends the previous prompt and output") {
  for (bool thinking : {true, false}) {
    CAPTURE(thinking);
    std::mt19937 rng(thinking ? 11 : 12);
    dsml::Options o;
    o.thinking = thinking;
    std::vector<Message> conv = {Msg(Role::kSystem, "You are terse."), Msg(Role::kUser, "go")};
    std::string previous;
    int next_id = 0;
    for (int turn = 0; turn < 20; ++turn) {
      const std::string prompt = dsml::Render(conv, Tools(), o);
      if (!previous.empty()) {
        CHECK_MESSAGE(prompt.starts_with(previous), "turn " << turn);
      }
      // The model's output: reasoning (thinking), some content, 1-2 calls in canonical form
      // but with a stray space the parser tolerates and the canonical form would not keep.
      std::vector<ToolCall> calls;
      for (int k = std::uniform_int_distribution<int>(1, 2)(rng); k > 0; --k) {
        calls.push_back(RandomCall(rng, static_cast<int>(calls.size())));
      }
      std::string output = thinking ? "plan " + std::to_string(turn) + "</think>" : "";
      output += "step " + std::to_string(turn) + "\n\n" + dsml::RenderCalls(calls);
      const size_t at = output.find("<｜DSML｜ invoke name=");
      output.insert(at + std::string("<｜DSML｜ invoke").size(), " ");  // "invoke  name="
      dsml::StreamParser parser(thinking, {"call_", static_cast<uint64_t>(next_id)});
      AssistantOutput out;
      for (size_t i = 0; i < output.size(); i += 5) {
        for (const StreamDelta& d : parser.Push(std::string_view(output).substr(i, 5))) ApplyDelta(d, out);
      }
      for (const StreamDelta& d : parser.Push(dsml::kEos)) ApplyDelta(d, out);
      REQUIRE(parser.stopped());
      REQUIRE(out.tool_calls.size() == calls.size());
      CHECK(parser.raw() == output);
      Message a = Msg(Role::kAssistant, out.content, out.tool_calls);
      a.reasoning = out.reasoning;
      a.raw = parser.raw();
      conv.push_back(a);
      for (const ToolCall& c : out.tool_calls) {
        Message r = Msg(Role::kTool, std::string(std::uniform_int_distribution<size_t>(0, 3000)(rng), 'x'));
        r.tool_call_id = c.id;
        conv.push_back(r);
      }
      next_id += static_cast<int>(out.tool_calls.size());
      previous = prompt + output + std::string(dsml::kEos);
    }
  }
}

TEST_CASE("config.json selects the chat format; cedar is the default and is not written") {
  ModelConfig c;
  REQUIRE(PresetConfig("tiny", &c));
  CHECK(c.chat_format == "cedar");
  CHECK(ChatFormatOf(c) == ChatFormat::kCedar);
  CHECK_FALSE(ConfigToJson(c).contains("chat_format"));
  nlohmann::json j = ConfigToJson(c);
  j["chat_format"] = "deepseek_v41";
  ModelConfig v41 = ConfigFromJson(j);
  CHECK(v41.Validate().empty());
  CHECK(ChatFormatOf(v41) == ChatFormat::kDeepseekV41);
  CHECK(ConfigToJson(v41)["chat_format"] == "deepseek_v41");
  CHECK(ChatFormatName(ChatFormat::kDeepseekV41) == "deepseek_v41");
  j["chat_format"] = "llama3";
  ModelConfig bad = ConfigFromJson(j);
  CHECK(bad.Validate().find("chat_format: expected \"cedar\" or \"deepseek_v41\", found \"llama3\"") !=
        std::string::npos);
  CHECK_THROWS_AS(ChatFormatOf(bad), std::invalid_argument);
}

}  // namespace
}  // namespace cedar::bridge
