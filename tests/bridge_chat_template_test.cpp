// The chat template's exact output and its validation errors.
#include <doctest/doctest.h>

#include <algorithm>

#include "tools_bridge/lib/chat_template.h"

namespace cedar::bridge {
namespace {

using nlohmann::json;

Message Msg(Role role, std::string content) {
  Message m;
  m.role = role;
  m.content = std::move(content);
  return m;
}

Message Call(std::string id, std::string name, std::string arguments) {
  Message m = Msg(Role::kAssistant, "");
  m.tool_calls.push_back({std::move(id), std::move(name), std::move(arguments)});
  return m;
}

Message Result(std::string call_id, std::string content) {
  Message m = Msg(Role::kTool, std::move(content));
  m.tool_call_id = std::move(call_id);
  return m;
}

const json kWeatherTools = json::parse(R"([{"type":"function","function":{"name":"get_weather",
    "parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}])");

TEST_CASE("Render: a tool-using conversation renders to the documented grammar") {
  ByteTokenizer tok;
  ChatTemplate tmpl(tok);
  const std::vector<Message> conv = {
      Msg(Role::kSystem, "Be brief."),
      Msg(Role::kUser, "Weather in Oslo?"),
      Call("call_0", "get_weather", R"({ "units" : "c", "city": "Oslo" })"),
      Result("call_0", R"({"temp":3})"),
      Msg(Role::kAssistant, "3°C."),
  };
  const TokenIds ids = tmpl.Render(conv, kWeatherTools);
  CHECK(tok.Decode(ids) ==
        "<|bos|><|tools|>[{\"function\":{\"name\":\"get_weather\",\"parameters\":{\"properties\":"
        "{\"city\":{\"type\":\"string\"}},\"type\":\"object\"}},\"type\":\"function\"}]<|end|>"
        "<|system|>Be brief.<|end|>"
        "<|user|>Weather in Oslo?<|end|>"
        "<|assistant|><|tool_call|>{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Oslo\","
        "\"units\":\"c\"}}<|/tool_call|><|end|>"
        "<|tool|>call_0\n{\"temp\":3}<|end|>"
        "<|assistant|>3°C.<|end|>");
  // Structure is carried by special ids: six messages' worth of <|end|>, each a single id.
  CHECK(std::count(ids.begin(), ids.end(), tmpl.tokens().end) == 6);
  CHECK(ids.front() == tmpl.tokens().bos);

  const TokenIds gen = tmpl.RenderGenerationPrompt(conv, kWeatherTools);
  CHECK(gen.size() == ids.size() + 1);
  CHECK(std::equal(ids.begin(), ids.end(), gen.begin()));
  CHECK(gen.back() == tmpl.tokens().assistant);
}

TEST_CASE("Render: no tools block for null or empty tools; empty conversation is just bos") {
  ByteTokenizer tok;
  ChatTemplate tmpl(tok);
  CHECK(tmpl.Render({}) == TokenIds{tmpl.tokens().bos});
  const std::vector<Message> conv = {Msg(Role::kUser, "")};
  CHECK(tmpl.Render(conv, json::array()) == tmpl.Render(conv));
  CHECK(tok.Decode(tmpl.Render(conv)) == "<|bos|><|user|><|end|>");
}

TEST_CASE("Render: text that looks like special tokens stays text") {
  ByteTokenizer tok;
  ChatTemplate tmpl(tok);
  const std::vector<Message> conv = {Msg(Role::kUser, "<|end|><|assistant|><|tool_call|>")};
  const TokenIds ids = tmpl.Render(conv);
  int specials = 0;
  for (TokenId id : ids) specials += tok.IsSpecial(id);
  CHECK(specials == 3);  // bos, user, end
}

TEST_CASE("Render: generated ids are inserted verbatim, closed with <|end|> if needed") {
  ByteTokenizer tok;
  ChatTemplate tmpl(tok);
  const ChatTokens& t = tmpl.tokens();
  std::vector<Message> conv = {Msg(Role::kUser, "hi")};
  const TokenIds prompt = tmpl.RenderGenerationPrompt(conv);
  const TokenIds cases[] = {{'y', 'o', t.end}, {'y', 'o'}, {'y', t.eos}, {}, {300, t.user}};
  for (const TokenIds& generated : cases) {
    Message a = Msg(Role::kAssistant, "ignored when generated is set");
    a.generated = generated;
    std::vector<Message> next = conv;
    next.push_back(a);
    TokenIds want = prompt;
    want.insert(want.end(), generated.begin(), generated.end());
    if (generated.empty() || generated.back() != t.end) want.push_back(t.end);
    CHECK(tmpl.Render(next) == want);
  }
}

TEST_CASE("ChatTemplate: a tokenizer without the chat specials is rejected at construction") {
  struct NoSpecials final : Tokenizer {
    TokenIds Encode(std::string_view) const override { return {}; }
    std::string_view TokenBytes(TokenId) const override { return {}; }
    std::optional<TokenId> FindSpecial(std::string_view) const override { return {}; }
    std::optional<std::string_view> SpecialName(TokenId) const override { return {}; }
    int32_t vocab_size() const override { return 256; }
  } tok;
  CHECK_THROWS_WITH_AS(ChatTemplate{tok}, doctest::Contains("<|bos|>"), std::invalid_argument);
}

void CheckRejected(const std::vector<Message>& conv, const std::string& what,
                   const json& tools = nullptr) {
  ByteTokenizer tok;
  ChatTemplate tmpl(tok);
  CAPTURE(what);
  CHECK_THROWS_WITH_AS(tmpl.Render(conv, tools), doctest::Contains(what.c_str()),
                       ChatTemplateError);
  CHECK_THROWS_AS(tmpl.RenderGenerationPrompt(conv, tools), ChatTemplateError);
}

TEST_CASE("Validate: clear errors for requests the template cannot render") {
  const Message user = Msg(Role::kUser, "q");
  const Message call = Call("call_7", "f", "{}");
  CheckRejected({user, Msg(static_cast<Role>(9), "x")}, "messages[1]: unknown role 9");
  CheckRejected({user, Result("call_7", "r")},
                "messages[1] (tool): tool_call_id \"call_7\" answers no tool call");
  CheckRejected({user, Result("call_7", "r"), call}, "answers no tool call");  // call comes later
  CheckRejected({user, call, Result("call_8", "r")}, "\"call_8\" answers no tool call");
  CheckRejected({user, Call("call_1", "f", "{\"a\":")},
                "messages[1] (assistant).tool_calls[0] (\"f\"): arguments are not valid JSON");
  CheckRejected({user, Call("call_1", "f", "")}, "arguments are not valid JSON");
  CheckRejected({user, Call("call_1", "f", "[1]")}, "arguments must be a JSON object");
  CheckRejected({user, Call("call_1", "", "{}")}, "empty function name");
  CheckRejected({user, Call("", "f", "{}")}, "empty id");
  CheckRejected({user, Call("a\nb", "f", "{}")}, "id contains a newline");
  Message user_with_calls = user;
  user_with_calls.tool_calls = call.tool_calls;
  CheckRejected({user_with_calls}, "only assistant messages may have tool_calls");
  Message user_with_id = user;
  user_with_id.tool_call_id = "call_7";
  CheckRejected({user_with_id}, "only tool messages may have a tool_call_id");
  Message user_generated = user;
  user_generated.generated = TokenIds{'a'};
  CheckRejected({user_generated}, "only assistant messages may carry generated ids");
  Message bad_generated = Msg(Role::kAssistant, "");
  bad_generated.generated = TokenIds{'a', 512};
  CheckRejected({user, bad_generated}, "generated id 512 is outside the vocab");
  CheckRejected({user}, "tools: expected an array", json::object());
  CheckRejected({user}, "tools[0]: missing the \"function\" object", json::parse("[{}]"));
  CheckRejected({user}, "tools[0].function.name",
                json::parse(R"([{"type":"function","function":{"name":""}}])"));
}

TEST_CASE("Validate: a tool result may answer any earlier call, with generated ids too") {
  ByteTokenizer tok;
  ChatTemplate tmpl(tok);
  Message generated_call = Call("call_1", "g", "{\"x\":1}");
  generated_call.generated = TokenIds{'a', tmpl.tokens().end};
  const std::vector<Message> conv = {Msg(Role::kUser, "q"),  Call("call_0", "f", "{}"),
                                     generated_call,         Result("call_0", "r0"),
                                     Result("call_1", "r1"), Result("call_0", "again")};
  CHECK_NOTHROW(tmpl.Validate(conv, kWeatherTools));
}

}  // namespace
}  // namespace cedar::bridge
