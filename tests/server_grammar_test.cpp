// The server enforces tool_choice, parallel_tool_calls and response_format (grammar-constrained
// decoding, server/output_constraint.h) on the random-weight tiny model: what comes back is
// what the request asked for, checked with the formats' parsers and valijson.
#include <doctest/doctest.h>

#include "tests/grammar_util.h"
#include "tests/server_fixture.h"

using namespace cedar;
using cedar::test::ApiFixture;
using nlohmann::json;

namespace {

// Tools whose strings are bounded, so a random model finishes its calls within max_tokens.
json Tools() {
  return json::parse(R"([
    {"type": "function", "function": {"name": "read_file", "parameters": {"type": "object",
      "properties": {"path": {"type": "string", "maxLength": 12}, "limit": {"type": "integer"}}, "required": ["path"]}}},
    {"type": "function", "function": {"name": "list_dir", "parameters": {"type": "object",
      "properties": {"dir": {"type": "string", "maxLength": 8}, "recursive": {"type": "boolean"},
                     "sort": {"enum": ["name", "size"]}}, "required": ["dir", "sort"]}}}
  ])");
}

json Chat(uint64_t seed, json extra) {
  json body = {{"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"max_tokens", 1500},
               {"temperature", 1.0}, {"seed", seed}};
  for (auto it = extra.begin(); it != extra.end(); ++it) body[it.key()] = it.value();
  return body;
}

const json& ParamsOf(const json& tools, const std::string& name) {
  for (const json& t : tools)
    if (t["function"]["name"] == name) return t["function"]["parameters"];
  FAIL("no tool named " << name);
  static json none;
  return none;
}

// Every call names a tool and its arguments validate; returns the calls.
json CheckedCalls(const json& message) {
  const json calls = message.value("tool_calls", json::array());
  for (const json& call : calls) {
    const std::string name = call["function"]["name"];
    const json args = json::parse(call["function"]["arguments"].get<std::string>());
    CHECK_MESSAGE(cedar::test::Validates(ParamsOf(Tools(), name), args), name << " " << args.dump());
  }
  return calls;
}

}  // namespace

TEST_CASE("tool_choice required, named, none and parallel_tool_calls false are enforced") {
  ApiFixture f;
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    INFO("seed " << seed);
    json j = f.Ok("/v1/chat/completions", Chat(seed, {{"tools", Tools()}, {"tool_choice", "required"}}));
    json c = j["choices"][0];
    CHECK(c["finish_reason"] == "tool_calls");
    CHECK(CheckedCalls(c["message"]).size() >= 1);
    CHECK((c["message"]["content"].is_null() || c["message"]["content"] == ""));

    j = f.Ok("/v1/chat/completions",
             Chat(seed, {{"tools", Tools()}, {"tool_choice", {{"type", "function"}, {"function", {{"name", "list_dir"}}}}}}));
    json calls = CheckedCalls(j["choices"][0]["message"]);
    REQUIRE(calls.size() == 1);
    CHECK(calls[0]["function"]["name"] == "list_dir");

    j = f.Ok("/v1/chat/completions",
             Chat(seed, {{"tools", Tools()}, {"tool_choice", "required"}, {"parallel_tool_calls", false}}));
    CHECK(CheckedCalls(j["choices"][0]["message"]).size() == 1);

    j = f.Ok("/v1/chat/completions", Chat(seed, {{"tools", Tools()}, {"tool_choice", "none"}, {"max_tokens", 64}}));
    CHECK(!j["choices"][0]["message"].contains("tool_calls"));
    CHECK(j["choices"][0]["finish_reason"] != "tool_calls");

    // auto: whatever calls appear are valid ones.
    j = f.Ok("/v1/chat/completions", Chat(seed, {{"tools", Tools()}, {"max_tokens", 200}}));
    CheckedCalls(j["choices"][0]["message"]);
  }
}

// A client that sends a reply back puts its call ids into the next prompt (Cedar's own chat
// format renders them), so a seeded conversation is reproducible only if the ids are: the
// server derives them from the prompt and the seed (Api::CallIdStem), not from its random
// response id.
TEST_CASE("tool call ids are the same for the same prompt and seed, and differ across seeds and prompts") {
  ApiFixture f;
  const json body = Chat(3, {{"tools", Tools()}, {"tool_choice", "required"}, {"parallel_tool_calls", false}});
  auto first_call = [&](const json& b) {
    const json j = f.Ok("/v1/chat/completions", b);
    const json calls = CheckedCalls(j["choices"][0]["message"]);
    REQUIRE(calls.size() == 1);
    return std::make_pair(j["id"].get<std::string>(), calls[0]["id"].get<std::string>());
  };
  const auto [id_a, call_a] = first_call(body);
  const auto [id_b, call_b] = first_call(body);
  CHECK(id_a != id_b);  // response ids stay random
  CHECK(call_a == call_b);
  CHECK(call_a.rfind("call_", 0) == 0);
  CHECK(call_a.size() == std::string("call_").size() + 12 + 2);  // call_ + 12 hex + _0
  json other_seed = body;
  other_seed["seed"] = 4;
  CHECK(first_call(other_seed).second != call_a);
  json other_prompt = body;
  other_prompt["messages"][0]["content"] = "hello";
  CHECK(first_call(other_prompt).second != call_a);
}

TEST_CASE("response_format json_schema and json_object on chat and completions") {
  ApiFixture f;
  const json schema = json::parse(R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 10},
    "age": {"type": "integer"}, "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 3}},
    "required": ["name", "age"], "additionalProperties": false})");
  const json rf = {{"type", "json_schema"}, {"json_schema", {{"name", "person"}, {"schema", schema}, {"strict", true}}}};
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    INFO("seed " << seed);
    json j = f.Ok("/v1/chat/completions", Chat(seed, {{"response_format", rf}}));
    CHECK(j["choices"][0]["finish_reason"] == "stop");
    CHECK(cedar::test::TextValidates(schema, j["choices"][0]["message"]["content"].get<std::string>()));
    // Tools offered with auto: the JSON answer wins, no call.
    j = f.Ok("/v1/chat/completions", Chat(seed, {{"response_format", rf}, {"tools", Tools()}}));
    CHECK(!j["choices"][0]["message"].contains("tool_calls"));
    CHECK(cedar::test::TextValidates(schema, j["choices"][0]["message"]["content"].get<std::string>()));

    j = f.Ok("/v1/completions", {{"prompt", "x"}, {"max_tokens", 1500}, {"temperature", 1.0}, {"seed", seed},
                                 {"response_format", rf}});
    CHECK(cedar::test::TextValidates(schema, j["choices"][0]["text"].get<std::string>()));
  }
  // json_object: some JSON object (the depth bound keeps a random model's object finite).
  const json obj = f.Ok("/v1/chat/completions", Chat(1, {{"response_format", {{"type", "json_object"}}}, {"max_tokens", 4000}}));
  const std::string text = obj["choices"][0]["message"]["content"];
  INFO(text);
  if (obj["choices"][0]["finish_reason"] == "stop") CHECK(json::parse(text, nullptr, false).is_object());
  else CHECK(text.rfind("{", 0) == 0);  // cut by max_tokens: still the start of an object
}

TEST_CASE("bad response_format and parallel_tool_calls get a 400 naming the field") {
  ApiFixture f;
  auto expect_400 = [&](const json& extra, const std::string& param, const std::string& needle) {
    const auto r = f.Post("/v1/chat/completions", Chat(1, extra));
    CHECK(r.status == 400);
    const json e = json::parse(r.body)["error"];
    CHECK(e["param"] == param);
    CHECK_MESSAGE(e["message"].get<std::string>().find(needle) != std::string::npos, e["message"]);
  };
  expect_400({{"response_format", {{"type", "xml"}}}}, "response_format", "json_schema");
  expect_400({{"response_format", {{"type", "json_schema"}, {"json_schema", {{"strict", true}, {"schema", {{"type", "string"}, {"pattern", "^a$"}}}}}}}},
             "response_format", "pattern");
  expect_400({{"parallel_tool_calls", "yes"}}, "parallel_tool_calls", "boolean");
  // Not strict: the keyword is not enforced, the request runs.
  const json lax = json::parse(R"({"type": "json_schema", "json_schema": {"schema": {"enum": ["yes", "no"], "pattern": "^y"}}})");
  const auto ok = f.Post("/v1/chat/completions", Chat(1, {{"max_tokens", 200}, {"response_format", lax}}));
  CHECK(ok.status == 200);
}
