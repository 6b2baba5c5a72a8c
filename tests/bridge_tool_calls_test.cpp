// Parsing generated ids into content and tool calls: whole-output and streaming, well-formed
// and malformed, plus the OpenAI JSON shapes.
#include <doctest/doctest.h>

#include "tools_bridge/lib/openai_json.h"
#include "tools_bridge/lib/tool_calls.h"

namespace cedar::bridge {
namespace {

using nlohmann::json;

// Builds generated ids from pieces: text is encoded, specials are given by name.
struct Ids {
  explicit Ids(const Tokenizer& t) : tok(t) {}
  const Tokenizer& tok;
  TokenIds ids;
  Ids& Text(std::string_view s) {
    TokenIds t = tok.Encode(s);
    ids.insert(ids.end(), t.begin(), t.end());
    return *this;
  }
  Ids& Special(std::string_view name) {
    ids.push_back(tok.SpecialId(name));
    return *this;
  }
  Ids& Id(TokenId id) {
    ids.push_back(id);
    return *this;
  }
  Ids& Call(std::string_view call_json) {
    return Special(kToolCallToken).Text(call_json).Special(kToolCallEndToken);
  }
};

// Streams `ids` one at a time, checks the deltas' shape, and returns their accumulation.
AssistantOutput Stream(const Tokenizer& tok, const TokenIds& ids, ToolCallIds call_ids = {}) {
  ToolCallStreamParser parser(tok, call_ids);
  AssistantOutput out;
  int started = 0;
  auto apply = [&](const std::vector<StreamDelta>& deltas) {
    for (const StreamDelta& d : deltas) {
      if (d.kind == StreamDelta::Kind::kContent) {
        CHECK_FALSE(d.text.empty());
        CHECK(RepairUtf8(d.text) == d.text);  // whole characters only
      } else if (d.kind == StreamDelta::Kind::kToolCallStart) {
        CHECK(d.index == started++);
      } else {
        CHECK(d.index == started - 1);
      }
      ApplyDelta(d, out);
    }
  };
  for (TokenId id : ids) apply(parser.Push(id));
  apply(parser.Finish());
  CHECK(parser.Finish().empty());
  out.stopped = parser.stopped();
  return out;
}

// Parses both ways and checks they agree.
AssistantOutput Parse(const Tokenizer& tok, const TokenIds& ids, ToolCallIds call_ids = {}) {
  AssistantOutput whole = ParseAssistantOutput(tok, ids, call_ids);
  CHECK(Stream(tok, ids, call_ids) == whole);
  return whole;
}

TEST_CASE("Parse: content and tool calls in OpenAI's shape, ids from the counter") {
  ByteTokenizer tok;
  Ids g{tok};
  g.Text("Let me check. ")
      .Call(R"({"name":"get_weather","arguments":{"city":"Oslo"}})")
      .Call(R"( { "arguments" : { "q" : [1, 2.5, true, null] , "a":"é" }, "name" : "search" } )")
      .Special(kEndToken);
  const AssistantOutput out = Parse(tok, g.ids, {"call_", 4});
  CHECK(out.content == "Let me check. ");
  REQUIRE(out.tool_calls.size() == 2);
  CHECK(out.tool_calls[0] == ToolCall{"call_4", "get_weather", R"({"city":"Oslo"})"});
  // Arguments come back in canonical form: sorted keys, no whitespace.
  CHECK(out.tool_calls[1] == ToolCall{"call_5", "search", R"({"a":"é","q":[1,2.5,true,null]})"});
  CHECK(out.stopped);
  CHECK(FinishReason(out) == "tool_calls");
  CHECK(AssistantMessageJson(out) == json::parse(R"({"role":"assistant",
      "content":"Let me check. ","tool_calls":[
      {"id":"call_4","type":"function","function":{"name":"get_weather",
       "arguments":"{\"city\":\"Oslo\"}"}},
      {"id":"call_5","type":"function","function":{"name":"search",
       "arguments":"{\"a\":\"é\",\"q\":[1,2.5,true,null]}"}}]})"));
}

TEST_CASE("Parse: ids after the stop id are ignored; no stop id means cut off") {
  ByteTokenizer tok;
  Ids g{tok};
  g.Text("done").Special(kEosToken).Text("ignored").Special(kEndToken);
  AssistantOutput out = Parse(tok, g.ids);
  CHECK(out.content == "done");
  CHECK(out.stopped);
  CHECK(FinishReason(out) == "stop");
  out = Parse(tok, Ids{tok}.Text("trunc").ids);
  CHECK_FALSE(out.stopped);
  CHECK(FinishReason(out) == "length");
  CHECK(AssistantMessageJson(out) == json::parse(R"({"role":"assistant","content":"trunc"})"));
}

TEST_CASE("Parse: malformed tool calls come back as plain content") {
  ByteTokenizer tok;
  const std::string open(kToolCallToken), close(kToolCallEndToken);
  const std::pair<std::string, std::string> bad_calls[] = {
      {R"({"name":"f","arguments":{})", "invalid JSON"},
      {R"({"arguments":{}})", "missing name"},
      {R"({"name":"","arguments":{}})", "empty name"},
      {R"({"name":7,"arguments":{}})", "name not a string"},
      {R"({"name":"f"})", "missing arguments"},
      {R"({"name":"f","arguments":"{}"})", "arguments a string"},
      {R"({"name":"f","arguments":{},"extra":1})", "extra key"},
      {R"(["f",{}])", "not an object"},
      {"", "empty"},
      {std::string(100, '[') + std::string(100, ']'), "too deep"},
  };
  for (const auto& bad : bad_calls) {
    const std::string& call = bad.first;
    CAPTURE(bad.second);
    Ids g{tok};
    g.Text("a").Call(call).Text("b").Special(kEndToken);
    const AssistantOutput out = Parse(tok, g.ids);
    CHECK(out.tool_calls.empty());
    CHECK(out.content == "a" + open + call + close + "b");
    CHECK(out.stopped);
  }
}

TEST_CASE("Parse: unterminated calls, stray specials and odd ids are content") {
  ByteTokenizer tok;
  const std::string open(kToolCallToken);
  const std::string ok_call = R"({"name":"f","arguments":{}})";
  SUBCASE("cut off by the end of generation") {
    const AssistantOutput out =
        Parse(tok, Ids{tok}.Text("x").Special(kToolCallToken).Text("{\"na").ids);
    CHECK(out.content == "x" + open + "{\"na");
    CHECK_FALSE(out.stopped);
  }
  SUBCASE("cut off by a stop id") {
    Ids g{tok};
    g.Special(kToolCallToken).Text("{").Special(kEndToken);
    const AssistantOutput out = Parse(tok, g.ids);
    CHECK(out.content == open + "{");
    CHECK(out.stopped);
  }
  SUBCASE("a second opener cuts the first call short; the second still parses") {
    Ids g{tok};
    g.Special(kToolCallToken).Text("{\"name\"").Call(ok_call).Special(kEndToken);
    const AssistantOutput out = Parse(tok, g.ids);
    CHECK(out.content == open + "{\"name\"");
    REQUIRE(out.tool_calls.size() == 1);
    CHECK(out.tool_calls[0] == ToolCall{"call_0", "f", "{}"});
  }
  SUBCASE("other specials show by name, unused ids as nothing, out-of-vocab ids as U+FFFD") {
    Ids g{tok};
    g.Text("a").Special(kUserToken).Special(kToolCallEndToken).Id(300).Id(-5).Id(1 << 20);
    g.Special(kToolCallToken).Text("{").Special(kBosToken);
    const AssistantOutput out = Parse(tok, g.ids);
    const std::string fffd(kReplacementChar);
    CHECK(out.content == "a<|user|><|/tool_call|>" + fffd + fffd + open + "{<|bos|>");
  }
  SUBCASE("a call with out-of-vocab ids inside is malformed") {
    Ids g{tok};
    g.Special(kToolCallToken).Text("{\"name\":\"").Id(9999).Text("\",\"arguments\":{}}");
    g.Special(kToolCallEndToken);
    const AssistantOutput out = Parse(tok, g.ids);
    CHECK(out.tool_calls.size() == 1);  // U+FFFD is a valid character in a name
    CHECK(out.tool_calls[0].name == std::string(kReplacementChar));
  }
  SUBCASE("invalid UTF-8 in a call makes it malformed; in content it is repaired") {
    Ids g{tok};
    g.Text("\xC3").Call("{\"name\":\"\xFF\",\"arguments\":{}}");
    const AssistantOutput out = Parse(tok, g.ids);
    CHECK(out.tool_calls.empty());
    CHECK(RepairUtf8(out.content) == out.content);
  }
}

TEST_CASE("Stream: content streams per character; a call comes out whole at its close") {
  ByteTokenizer tok;
  Ids g{tok};
  g.Text("é").Call(R"({"name":"f","arguments":{"k":"v"}})").Special(kEndToken);
  ToolCallStreamParser p(tok, {"call_x", 0});
  CHECK(p.Push(g.ids[0]).empty());  // first byte of é is held back
  std::vector<StreamDelta> d = p.Push(g.ids[1]);
  REQUIRE(d.size() == 1);
  CHECK(DeltaJson(d[0]) == json{{"content", "é"}});
  for (size_t i = 2; i + 2 < g.ids.size(); ++i) CHECK(p.Push(g.ids[i]).empty());
  d = p.Push(g.ids[g.ids.size() - 2]);  // <|/tool_call|>
  REQUIRE(d.size() == 2);
  CHECK(DeltaJson(d[0]) == json::parse(R"({"tool_calls":[{"index":0,"id":"call_x0",
      "type":"function","function":{"name":"f","arguments":""}}]})"));
  CHECK(DeltaJson(d[1]) ==
        json::parse(R"({"tool_calls":[{"index":0,"function":{"arguments":"{\"k\":\"v\"}"}}]})"));
  CHECK(p.tool_call_count() == 1);
  CHECK(p.Push(g.ids.back()).empty());
  CHECK(p.done());
  CHECK(p.stopped());
  CHECK(p.Push('z').empty());  // after the stop id
}

TEST_CASE("Stream: an unfinished character before a stop id comes out as U+FFFD") {
  ByteTokenizer tok;
  ToolCallStreamParser p(tok);
  CHECK(p.Push(0xE2).empty());
  const std::vector<StreamDelta> d = p.Push(tok.SpecialId(kEndToken));
  REQUIRE(d.size() == 1);
  CHECK(d[0].text == kReplacementChar);
}

TEST_CASE("MessagesFromJson: reads OpenAI messages and names the bad field") {
  const json request = json::parse(R"([
      {"role":"developer","content":"sys"},
      {"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]},
      {"role":"assistant","content":null,"tool_calls":[{"id":"call_0","type":"function",
          "function":{"name":"f","arguments":"{\"x\":1}"}}]},
      {"role":"tool","tool_call_id":"call_0","content":"42"}])");
  const std::vector<Message> m = MessagesFromJson(request);
  REQUIRE(m.size() == 4);
  CHECK(m[0].role == Role::kSystem);
  CHECK(m[1].content == "ab");
  CHECK(m[2].content.empty());
  CHECK(m[2].tool_calls == std::vector<ToolCall>{{"call_0", "f", "{\"x\":1}"}});
  CHECK(m[3].tool_call_id == "call_0");
  ByteTokenizer tok;
  CHECK_NOTHROW(ChatTemplate(tok).Render(m));

  auto rejects = [](const char* messages, const char* what) {
    CAPTURE(messages);
    CHECK_THROWS_WITH_AS(MessagesFromJson(json::parse(messages)), doctest::Contains(what),
                         ChatTemplateError);
  };
  rejects(R"([{"role":"function","content":"x"}])", "messages[0].role: unknown role \"function\"");
  rejects(R"([{"content":"x"}])", "messages[0].role");
  rejects(R"([{"role":"user","content":[{"type":"image_url"}]}])", "messages[0].content[0]");
  rejects(R"([{"role":"user","content":5}])", "messages[0].content");
  rejects(R"([{"role":"tool","content":"x"}])", "messages[0].tool_call_id");
  rejects(R"([{"role":"assistant","tool_calls":[{"id":"c","function":{"name":"f"}}]}])",
          "messages[0].tool_calls[0].function.arguments");
  rejects(R"({"role":"user"})", "messages: expected an array");
}

}  // namespace
}  // namespace cedar::bridge
