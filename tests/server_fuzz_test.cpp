// Hostile requests against an in-process server: a table of malformed requests (deep nesting in
// every field, numbers out of range, wrong types, bad UTF-8 and NUL, bad session ids, bad
// framing, oversize bodies), each of which must get a 4xx in OpenAI's error shape naming the
// parameter, then a seeded random mutator over valid requests that must never get a 5xx.
// Afterwards the server must still answer a normal turn exactly as before.
#include <doctest/doctest.h>

#include <cstdio>
#include <optional>
#include <random>

#include "tests/server_fixture.h"
#include "tests/test_models.h"
#include "server/http_server.h"
#include "tools_bridge/lib/json_limits.h"

namespace cedar::test {
namespace {

using nlohmann::json;

struct Case {
  std::string what;            // for the failure message
  std::string method = "POST";
  std::string target;
  std::string body;
  std::map<std::string, std::string> headers;
  std::optional<std::string> param;  // expected error.param (nullopt: null)
  int status = 400;                  // expected status (0: any 4xx)
  std::string code;                  // expected error.code ("": not checked)
};

std::string Deep(size_t depth, char open = '[', char close = ']') {
  return std::string(depth, open) + std::string(depth, close);
}
// {"a":{"a":...{"a":1}...}}, `depth` objects.
std::string DeepObjects(size_t depth) {
  std::string s;
  for (size_t i = 0; i < depth; ++i) s += "{\"a\":";
  s += "1";
  s += std::string(depth, '}');
  return s;
}

const json kChat = {{"model", "tiny"},
                    {"messages", json::array({{{"role", "user"}, {"content", "hello"}}})},
                    {"max_tokens", 2}};
const json kCompletion = {{"model", "tiny"}, {"prompt", "hello"}, {"max_tokens", 2}};

// `base` with `field` set to the raw JSON text `value` (spliced as text, so it may be anything).
std::string WithRaw(const json& base, const std::string& field, const std::string& value) {
  json b = base;
  b.erase(field);
  std::string text = b.dump();
  text.pop_back();  // the closing brace
  return text + (b.empty() ? "\"" : ",\"") + field + "\":" + value + "}";
}

// The error object of `r`, checked for OpenAI's shape and for what a message must not hold.
json CheckedError(const server::HttpResponse& r, const Case& c) {
  INFO(c.what << " -> " << r.status << " " << bridge::Clip(r.body, 400));
  CHECK(r.status >= 400);
  CHECK(r.status < 500);
  if (c.status) CHECK(r.status == c.status);
  bridge::JsonParseResult parsed = bridge::ParseJsonBounded(r.body);
  REQUIRE(!parsed.error);
  const json& j = parsed.value;
  REQUIRE(j.is_object());
  REQUIRE(j.contains("error"));
  const json& e = j["error"];
  CHECK(e["message"].is_string());
  CHECK(e["type"].is_string());
  CHECK(e.contains("param"));
  CHECK(e.contains("code"));
  if (!c.code.empty()) CHECK(e["code"] == c.code);
  if (c.param) {
    CHECK(e["param"] == *c.param);
  } else {
    CHECK(e["param"].is_null());
  }
  const std::string message = e["message"].is_string() ? e["message"].get<std::string>() : "";
  CHECK(message.size() < 600);  // never the offending value in full
  for (const char* internal : {"json.exception", "parse_error", "type_error", "out_of_range", "basic_string", "std::"}) {
    CHECK_MESSAGE(message.find(internal) == std::string::npos, internal);
  }
  return e;
}

// Wrong values for each field of a chat request, each with the param it must be reported under.
std::vector<Case> ChatCases() {
  std::vector<Case> cases;
  auto add = [&](const std::string& field, const std::string& value, std::optional<std::string> param = {},
                 int status = 400, const json& base = kChat, const std::string& target = "/v1/chat/completions") {
    Case c;
    c.what = target + " " + field + "=" + bridge::Clip(value, 50);
    c.target = target;
    c.body = WithRaw(base, field, value);
    c.param = param ? *param : field;
    c.status = status;
    cases.push_back(std::move(c));
  };
  const std::vector<std::string> fields = {"model", "stop", "temperature", "top_p", "max_tokens",
                                           "max_completion_tokens", "seed", "n", "stream", "ignore_eos",
                                           "stream_options", "session_id", "tools", "tool_choice", "messages"};
  // Deep nesting, huge numbers, in every field.
  auto code = [&](const char* c) { cases.back().code = c; };
  for (const std::string& f : fields) {
    add(f, Deep(100000)), code("json_too_deep");
    add(f, DeepObjects(100000)), code("json_too_deep");
    add(f, Deep(64)), code("json_too_deep");  // one past the limit with the body object
    add(f, "1e400"), code("number_out_of_range");
    add(f, "-1e400"), code("number_out_of_range");
    add(f, "[1e400]"), code("number_out_of_range");
  }
  // Wrong types and values, field by field.
  const std::map<std::string, std::vector<std::string>> wrong = {
      {"model", {"5", "true", "[]", "{}", "\"" + std::string(300, 'm') + "\"", Deep(63)}},
      {"temperature", {"\"hot\"", "-0.1", "2.5", "true", "[]", "{}", "1e308", "[0.5]"}},
      {"top_p", {"0", "1.5", "\"x\"", "[]", "-1", "{}"}},
      {"max_tokens", {"-1", "1.5", "\"1\"", "[]", "1099511627776", "true", "{}", "1e20"}},
      {"max_completion_tokens", {"-5", "0.5", "\"2\"", "[2]"}},
      {"seed", {"\"1\"", "1.5", "[]", "{}", "true"}},
      {"n", {"2", "0", "\"1\"", "[]", "-1"}},
      {"stream", {"\"yes\"", "1", "[]", "{}"}},
      {"ignore_eos", {"\"no\"", "0", "[]"}},
      {"stream_options", {"\"x\"", "[]", "{\"include_usage\":\"yes\"}", "5", "{\"include_usage\":" + Deep(70) + "}"}},
      {"stop",
       {"5", "[5]", "[\"\"]", "\"\"", "{}", "[[]]", "[\"a\",{}]", "\"" + std::string(300, 's') + "\"",
        json(std::vector<std::string>(17, "x")).dump(), "[" + Deep(62) + "]"}},
      {"session_id",
       {"7", "\"\"", "\"has space\"", "\"a?b\"", "\"a\\u0000b\"", "\"a\\r\\nb\"", "\"" + std::string(129, 'i') + "\"",
        "\"\\u00e9\"", "[]", "{}", "\"a/b\"", "\"a%20b\"", "true", "\"x\\ty\""}},
      {"tools",
       {"\"x\"", "5", "{}", "[5]", "[{}]", "[{\"function\":5}]", "[{\"function\":{}}]",
        "[{\"function\":{\"name\":\"\"}}]", "[{\"function\":{\"name\":5}}]", "[{\"type\":\"function\",\"function\":{\"name\":\"f\"}},7]",
        "[\"f\"]", "[[]]"}},
      {"tool_choice",
       {"\"sometimes\"", "5", "[]", "{}", "{\"function\":{}}", "{\"type\":\"function\",\"function\":{\"name\":\"nope\"}}",
        "\"required\"", "{\"function\":{\"name\":5}}", "true"}},
      {"messages",
       {"\"hi\"", "[]", "5", "{}", "[5]", "[{}]", "[{\"role\":\"wizard\",\"content\":\"x\"}]", "[{\"role\":5}]",
        "[{\"role\":\"user\",\"content\":5}]", "[{\"role\":\"user\",\"content\":[{\"type\":\"image\"}]}]",
        "[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":5}]}]",
        "[{\"role\":\"user\",\"content\":\"x\"},{\"role\":\"tool\",\"tool_call_id\":\"c\",\"content\":\"y\"}]",
        "[{\"role\":\"user\",\"content\":\"x\",\"tool_calls\":[{\"id\":\"c\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]}]",
        "[{\"role\":\"assistant\",\"tool_calls\":5}]",
        "[{\"role\":\"assistant\",\"tool_calls\":[{\"id\":\"c\",\"function\":{\"name\":\"f\",\"arguments\":\"{\"}}]}]",
        "[{\"role\":\"assistant\",\"tool_calls\":[{\"id\":\"c\",\"function\":{\"name\":\"f\",\"arguments\":\"[1]\"}}]}]",
        "[{\"role\":\"assistant\",\"tool_calls\":[{\"id\":\"c\",\"function\":{\"name\":\"f\",\"arguments\":\"" +
            Deep(100000) + "\"}}]}]",
        "[{\"role\":\"assistant\",\"tool_calls\":[{\"id\":\"c\",\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"x\\\":1e400}\"}}]}]",
        "[{\"role\":\"assistant\",\"tool_calls\":[{\"id\":\"\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]}]",
        "[{\"role\":\"assistant\",\"tool_calls\":[{\"id\":\"c\",\"type\":\"x\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]}]",
        "[{\"role\":\"user\",\"content\":\"" + std::string(5000, 'a') + "\"}]"}},
  };
  for (const auto& [field, values] : wrong) {
    for (const std::string& v : values) add(field, v);
  }
  // Bad UTF-8 and raw control characters inside a field's string.
  for (const char* f : {"model", "stop", "session_id", "messages", "tools", "tool_choice"}) {
    add(f, "\"\xC3\x28\"");
    add(f, "\"\xFF\xFE\"");
    add(f, std::string("\"a\0b\"", 5));
    add(f, "\"a\nb\"");
    add(f, "\"\\ud800\"");  // a lone surrogate escape
  }
  // A tool entry that is wrong is a `tools` error, not `messages`.
  add("tools", "[{\"type\":\"function\",\"function\":{\"name\":\"f\"}},{\"type\":\"function\"}]");
  // The session id from the header.
  for (const std::string& id : {std::string("has space"), std::string(200, 'h'), std::string("a?b"), std::string("\xC3\xA9")}) {
    Case c;
    c.what = "X-Session-Id " + bridge::Clip(id, 20);
    c.target = "/v1/chat/completions";
    c.body = kChat.dump();
    c.headers = {{"X-Session-Id", id}};
    c.param = "session_id";
    cases.push_back(c);
  }
  {
    Case c;
    c.what = "unknown session";
    c.target = "/v1/chat/completions";
    c.body = WithRaw(kChat, "session_id", "\"nope\"");
    c.param = "session_id";
    c.status = 404;
    cases.push_back(c);
  }
  // The completions prompt.
  for (const std::string& v : {Deep(100000), DeepObjects(100000), std::string("1e400"), std::string("[1,1e400]"),
                               std::string("5"), std::string("[]"), std::string("[1,\"x\"]"), std::string("[-1]"),
                               std::string("[99999]"), std::string("\"\""), std::string("{}"), std::string("true"),
                               std::string("[[1,2],[3]]"), std::string("[1.5]"), std::string("\"\xC3\x28\""),
                               std::string(4200, '1').insert(0, "\"").append("\"")}) {
    add("prompt", v, "prompt", 400, kCompletion, "/v1/completions");
  }
  for (const char* f : {"model", "stop", "temperature", "session_id", "max_tokens"}) {
    add(f, Deep(100000), f, 400, kCompletion, "/v1/completions");
    add(f, "1e400", f, 400, kCompletion, "/v1/completions");
  }
  // /v1/sessions.
  const json session = {{"session_id", "fuzz-s"}};
  for (const std::string& v : {Deep(100000), std::string("1e400"), std::string("7"), std::string("\"a b\""),
                               std::string("\"\""), std::string("\"a\\u0000\""), std::string(300, 'x').insert(0, "\"").append("\"")}) {
    add("session_id", v, "session_id", 400, session, "/v1/sessions");
  }
  for (const std::string& v : {std::string("-1"), std::string("\"x\""), std::string("1e9"), std::string("1e400"),
                               Deep(100000), std::string("[]")}) {
    add("pin_ttl_s", v, "pin_ttl_s", 400, session, "/v1/sessions");
  }
  for (const std::string& v : {Deep(100000), std::string("\"hi\""), std::string("[5]"),
                               std::string("[{\"role\":\"wizard\"}]"), std::string("1e400")}) {
    add("messages", v, "messages", 400, session, "/v1/sessions");
  }
  const json session_with_messages = {{"session_id", "fuzz-t"}, {"messages", kChat["messages"]}};
  for (const std::string& v : {Deep(100000), std::string("\"x\""), std::string("[5]"), std::string("[{\"function\":{}}]")}) {
    add("tools", v, "tools", 400, session_with_messages, "/v1/sessions");
  }
  return cases;
}

// Whole bodies that are not a request, and ids in paths.
std::vector<Case> BodyAndPathCases() {
  std::vector<Case> cases;
  for (const std::string target : {"/v1/chat/completions", "/v1/completions", "/v1/sessions"}) {
    // (body, the param it is reported under: the top-level key the error is in, if any)
    const std::vector<std::pair<std::string, std::optional<std::string>>> bodies = {
        {Deep(100000), {}}, {DeepObjects(100000), "a"}, {Deep(65), {}}, {"[", {}}, {"{", {}}, {"null", {}},
        {"5", {}}, {"\"s\"", {}}, {"[1,2]", {}}, {"{\"a\":}", "a"}, {"{} x", {}}, {"1e400", {}}, {"\xC3\x28", {}},
        {"{\"\xFF\":1}", {}}, {"{\"a\":1,}", "a"}, {"\xEF\xBB\xBF{}x", {}}, {std::string("{\"a\":\"\0\"}", 9), "a"},
        {"{\"a\":tru}", "a"}, {std::string(100000, '{'), {}}, {"", {}}, {"{\"a\":" + Deep(100000) + "}", "a"},
        {"{\"" + std::string(5000, 'k') + "\":" + Deep(70) + "}", std::string(5000, 'k').substr(0, 64) + "..."}};
    for (const auto& [body, param] : bodies) {
      if (body.empty() && target == std::string("/v1/sessions")) continue;  // an empty body creates a session
      Case c;
      c.what = target + " body " + bridge::Clip(body, 30);
      c.target = target;
      c.body = body;
      c.param = param;
      cases.push_back(c);
    }
  }
  // Ids in the path: percent-decoded, then held to the alphabet.
  for (const std::string method : {"GET", "DELETE"}) {
    for (const std::string& id : {std::string("a%20b"), std::string("%zz"), std::string("a%2"), std::string("a%2Fb"),
                                  std::string("a%00b"), std::string(129, 'p'), std::string("a%0D%0Ab"),
                                  std::string("%C3%A9"), std::string("a/b")}) {
      Case c;
      c.what = method + " /v1/sessions/" + bridge::Clip(id, 30);
      c.method = method;
      c.target = "/v1/sessions/" + id;
      c.param = "session_id";
      cases.push_back(c);
    }
    Case c;
    c.what = method + " unknown session";
    c.method = method;
    c.target = "/v1/sessions/nope%2Dnope";
    c.param = "session_id";
    c.status = 404;
    cases.push_back(c);
  }
  return cases;
}

// A fixed, deterministic turn; its output is compared before and after the hostile traffic.
std::string Reference(ApiFixture& f) {
  const json j = f.Ok("/v1/chat/completions", {{"messages", json::array({{{"role", "user"}, {"content", "steady"}}})},
                                               {"max_tokens", 8}, {"temperature", 0}});
  return j["choices"][0]["message"].dump();
}

// Valid requests with parts replaced by hostile ones (seeded: the same run every time).
class Mutator {
 public:
  explicit Mutator(uint64_t seed) : rng_(seed) {}

  std::string Mutate(json body) {
    const int structural = Below(4);
    for (int i = 0; i <= structural; ++i) MutateTree(body, 0);
    std::string text = body.dump(-1, ' ', false, json::error_handler_t::replace);
    if (Below(3) == 0) text = MutateBytes(text);
    return text;
  }

 private:
  int Below(int n) { return int(rng_() % uint64_t(n)); }

  std::string HostileText() {
    switch (Below(9)) {
      case 0: return Deep(1000 + Below(100000));
      case 1: return DeepObjects(65 + Below(1000));
      case 2: return "1e" + std::to_string(309 + Below(10000));
      case 3: return "-" + std::string(400, '9') + ".5e99999";
      case 4: return "\"\xC3\x28\"";
      case 5: return std::string("\"\0\"", 3);
      case 6: return "\"" + std::string(size_t(Below(5000)), 'z') + "\"";
      case 7: return "18446744073709551616";
      default: return "[" + Deep(size_t(Below(70))) + "]";
    }
  }

  json HostileValue() {
    switch (Below(10)) {
      case 0: return json();
      case 1: return Below(2) == 0;
      case 2: return int64_t(rng_());
      case 3: return -1.5e300;
      case 4: return std::string(size_t(Below(300)), char('a' + Below(26)));
      case 5: return json::array({1, "x", json::object()});
      case 6: return json::object({{"role", "user"}});
      case 7: return "a b?c";
      case 8: return json::array();
      default: {
        json deep = json::array();  // within the limit: a type error, not a depth error
        for (int i = 0, n = Below(50); i < n; ++i) deep = json::array({deep});
        return deep;
      }
    }
  }

  void MutateTree(json& v, int depth) {
    if ((v.is_object() || v.is_array()) && !v.empty() && depth < 6 && Below(3) != 0) {
      if (v.is_object()) {
        auto it = v.begin();
        std::advance(it, Below(int(v.size())));
        if (it.key() == "max_tokens") return;  // keeps every accepted turn short
        return MutateTree(it.value(), depth + 1);
      }
      return MutateTree(v[size_t(Below(int(v.size())))], depth + 1);
    }
    switch (Below(4)) {
      case 0: v = HostileValue(); break;
      case 1:
        if (v.is_object()) v["session_id"] = HostileValue();
        else v = HostileValue();
        break;
      case 2:
        if (v.is_object() && !v.empty()) v.erase(v.begin());
        else v = json::array({v});
        break;
      default:
        v = {{"x", v}};
    }
  }

  std::string MutateBytes(std::string text) {
    // Leave "max_tokens":2 alone so an accepted turn stays short.
    const size_t guard = text.find("\"max_tokens\":");
    size_t pos = size_t(Below(int(text.size())));
    if (guard != std::string::npos && pos + 20 >= guard && pos <= guard + 20) pos = 0;
    switch (Below(5)) {
      case 0: text[pos] = char(rng_()); break;
      case 1: text.insert(pos, HostileText()); break;
      case 2: text.resize(pos); break;
      case 3: text.insert(pos, 1, '\0'); break;
      default: text.insert(pos, ",\"session_id\":" + HostileText());
    }
    return text;
  }

  std::mt19937_64 rng_;
};

TEST_CASE("request fuzz: every hostile request gets a 4xx naming its parameter; the server stays exact") {
  ApiFixture f;
  const std::string before = Reference(f);
  f.Ok("/v1/sessions", {{"session_id", "fuzz-live"}});  // a session the cases may name

  std::vector<Case> cases = ChatCases();
  for (Case& c : BodyAndPathCases()) cases.push_back(std::move(c));
  MESSAGE("hostile requests in the table: ", cases.size());
  CHECK(cases.size() >= 200);
  size_t deep_bytes = 0;
  for (const Case& c : cases) {
    deep_bytes += c.body.size();
    CheckedError(f.Call(c.method, c.target, c.body, c.headers), c);
  }
  MESSAGE("table bytes sent: ", deep_bytes);

  // Seeded random mutations of valid requests: never a 5xx, every error in OpenAI's shape.
  Mutator mutator(20261201);
  const std::vector<std::pair<std::string, json>> seeds = {
      {"/v1/chat/completions", kChat},
      {"/v1/chat/completions", {{"messages", json::array({{{"role", "system"}, {"content", "s"}},
                                                          {{"role", "user"}, {"content", "u"}}})},
                                {"tools", json::array({{{"type", "function"},
                                                        {"function", {{"name", "f"}, {"parameters", {{"type", "object"}}}}}}})},
                                {"tool_choice", "auto"},
                                {"stop", json::array({"x"})},
                                {"session_id", "fuzz-live"},
                                {"max_tokens", 2}}},
      {"/v1/completions", kCompletion},
      {"/v1/completions", {{"prompt", json::array({1, 2, 3})}, {"max_tokens", 2}, {"temperature", 0.5}, {"seed", 1}}},
      {"/v1/sessions", {{"session_id", "m"}, {"pin_ttl_s", 1}}},
  };
  int errors = 0, ok = 0;
  for (int i = 0; i < 400; ++i) {
    const auto& [target, seed] = seeds[size_t(i) % seeds.size()];
    const std::string body = mutator.Mutate(seed);
    const server::HttpResponse r = f.Call("POST", target, body);
    INFO("mutation " << i << " " << target << ": " << bridge::Clip(body, 300) << " -> " << r.status << " "
                     << bridge::Clip(r.body, 300));
    REQUIRE(r.status < 500);
    if (r.status >= 400) {
      errors++;
      const bridge::JsonParseResult parsed = bridge::ParseJsonBounded(r.body);
      REQUIRE(!parsed.error);
      CHECK(parsed.value["error"]["message"].is_string());
      CHECK(parsed.value["error"].contains("param"));
    } else {
      ok++;
    }
    // Sessions a mutation created are deleted, so a later one can reuse the id.
    if (target == "/v1/sessions" && r.status == 200) {
      const json created = json::parse(r.body);
      f.Call("DELETE", "/v1/sessions/" + created["id"].get<std::string>());
    }
  }
  MESSAGE("mutated requests: ", errors, " refused (4xx), ", ok, " accepted");

  CHECK(Reference(f) == before);
  CHECK(f.Call("GET", "/health").status == 200);
}

// Bad HTTP framing and oversize bodies reach the transport, not the API: over the Unix socket.
TEST_CASE("request fuzz: bad framing and oversize bodies get a 4xx in OpenAI's shape") {
  ApiFixture f;
  server::ServerOptions o;
  const std::string dir = TempDir("fuzz");
  o.unix_socket = dir + "/cedar.sock";
  o.max_body_bytes = 64 << 10;  // small, so an over-limit body fits the socket's buffer
  server::HttpServer http(*f.api, *f.manager, o);
  http.Start();
  const std::string chat = kChat.dump();
  const std::vector<std::pair<std::string, std::string>> raw = {
      {"content-length larger than the limit",
       "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 40000000\r\n\r\n"},
      {"a body over the limit, chunked",
       "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n18000\r\n" +
           std::string(0x18000, 'a') + "\r\n0\r\n\r\n"},
      {"a bad chunk size", "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"},
      {"a non-numeric content-length", "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n"},
      {"two content-lengths", "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}"},
      {"a bad version", "GET /health HTTP/9.9\r\nHost: x\r\n\r\n"},
      {"a bad request line", "GARBAGE\r\n\r\n"},
      {"a header without a colon", "GET /health HTTP/1.1\r\nHost x\r\n\r\n"},
      {"headers over the limit", "GET /health HTTP/1.1\r\nX-Big: " + std::string(100000, 'h') + "\r\n\r\n"},
      {"NUL in the request line", std::string("GET /he") + '\0' + "alth HTTP/1.1\r\nHost: x\r\n\r\n"},
  };
  for (const auto& [what, bytes] : raw) {
    INFO(what);
    TestClient c = TestClient::Unix(http.unix_path(), 10);
    c.Send(bytes);
    TestClient::Response r = c.Read();
    CHECK(r.status >= 400);
    CHECK(r.status < 500);
    const bridge::JsonParseResult parsed = bridge::ParseJsonBounded(r.body);
    REQUIRE(!parsed.error);
    CHECK(parsed.value["error"]["message"].is_string());
    CHECK(parsed.value["error"]["type"].is_string());
  }
  // Still serving.
  TestClient c = TestClient::Unix(http.unix_path(), 30);
  CHECK(c.Request("POST", "/v1/chat/completions", chat).status == 200);
  http.Stop();
}

}  // namespace
}  // namespace cedar::test
