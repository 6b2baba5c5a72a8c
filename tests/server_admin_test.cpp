// Issue 19's utility endpoints and operational details: /tokenize, /detokenize,
// /apply-template (llama.cpp's shapes), the tenant-scoped /v1/cache/flush, /version, 409's
// x-should-retry, /metrics' new gauges and integer printing, the access log and SSE keep-alives.
#include <doctest/doctest.h>

#include <sstream>

#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include "server/version.h"
#include "tests/server_fixture.h"

using namespace cedar;
using cedar::test::ApiFixture;
using cedar::test::ServerFixture;
using nlohmann::json;

namespace {

// A request as tenant `tenant` (the transport sets it from the API key; here directly).
server::HttpResponse AsTenant(ApiFixture& f, uint64_t tenant, const std::string& target, const json& body) {
  server::HttpRequest r;
  r.method = "POST";
  r.target = target;
  r.body = body.dump();
  r.tenant = tenant;
  return f.api->Handle(r);
}

int64_t Cached(ApiFixture& f, uint64_t tenant, const std::string& prompt) {
  const auto r = AsTenant(f, tenant, "/v1/completions", {{"prompt", prompt}, {"max_tokens", 1}});
  INFO(r.body);
  REQUIRE(r.status == 200);
  return json::parse(r.body)["usage"]["prompt_tokens_details"]["cached_tokens"].get<int64_t>();
}

// The lines of `text` that start with `name` (a metric's samples).
std::vector<std::string> Samples(const std::string& text, const std::string& name) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (line.rfind(name, 0) == 0) out.push_back(line);
  return out;
}

}  // namespace

TEST_CASE("tokenize and detokenize round-trip, with pieces and the BOS special") {
  ApiFixture f;
  const json t = f.Ok("/tokenize", {{"content", "hello"}});
  const auto expected = f.api->tokenizer().Encode("hello");
  CHECK(t["tokens"] == json(std::vector<int32_t>(expected.begin(), expected.end())));
  CHECK(f.Ok("/detokenize", {{"tokens", t["tokens"]}})["content"] == "hello");
  const json p = f.Ok("/tokenize", {{"content", "hé"}, {"with_pieces", true}});
  REQUIRE(p["tokens"].size() == 3);  // the byte tokenizer: h, 0xC3, 0xA9
  CHECK(p["tokens"][0]["piece"] == "h");
  CHECK(p["tokens"][1]["piece"] == json::array({0xC3}));  // not whole UTF-8: its bytes
  const json b = f.Ok("/tokenize", {{"content", "hi"}, {"add_special", true}});
  CHECK(b["tokens"][0] == *f.api->tokenizer().FindSpecial("<|bos|>"));
  CHECK(b["tokens"].size() == 3);
  // parse_special (default true, as llama.cpp): a special's name in the text becomes its id.
  CHECK(f.Ok("/tokenize", {{"content", "<|end|>"}})["tokens"].size() == 1);
  CHECK(f.Ok("/tokenize", {{"content", "<|end|>"}, {"parse_special", false}})["tokens"].size() == 7);
  for (const json& bad : {json{{"tokens", {-1}}}, json{{"tokens", {1 << 30}}}, json{{"tokens", "x"}}}) {
    auto r = f.Post("/detokenize", bad);
    CHECK(r.status == 400);
    CHECK(json::parse(r.body)["error"]["param"] == "tokens");
  }
  CHECK(f.Post("/tokenize", {{"content", 5}}).status == 400);
  CHECK(f.Call("GET", "/tokenize").status == 405);
}

TEST_CASE("apply-template answers the text of the prompt a chat turn runs") {
  ApiFixture f;
  const json body = {{"messages", {{{"role", "system"}, {"content", "be brief"}}, {{"role", "user"}, {"content", "hi"}}}}};
  const json j = f.Ok("/apply-template", body);
  const std::vector<int32_t> ids = f.api->ChatPromptIds(body.dump());
  CHECK(j["prompt"] == f.api->tokenizer().Decode(ids, bridge::SpecialText::kName));
  CHECK(j["tokens"] == ids.size());
  CHECK(j["prompt"].get<std::string>().find("be brief") != std::string::npos);
  CHECK(f.Post("/apply-template", {{"messages", "x"}}).status == 400);
}

TEST_CASE("GET /version names the build") {
  ApiFixture f;
  auto r = f.Call("GET", "/version");
  REQUIRE(r.status == 200);
  const json j = json::parse(r.body);
  CHECK(j["version"] == kCedarVersion);
  CHECK(j["git"] == kCedarGitDescribe);
  CHECK(!std::string(kCedarVersion).empty());
}

TEST_CASE("cache flush drops only the caller's tenant's entries") {
  ApiFixture f;
  const std::string prompt(100, 'q');
  CHECK(Cached(f, 1, prompt) == 0);
  CHECK(Cached(f, 1, prompt) == 96);
  CHECK(Cached(f, 2, prompt) == 0);
  CHECK(Cached(f, 2, prompt) == 96);
  const auto r = AsTenant(f, 1, "/v1/cache/flush", json::object());
  REQUIRE(r.status == 200);
  CHECK(json::parse(r.body)["dropped_tokens"].get<int64_t>() >= 96);
  CHECK(f.manager->CheckCacheIntegrity() == "");
  CHECK(Cached(f, 2, prompt) == 96);  // the other tenant keeps its entries
  CHECK(Cached(f, 1, prompt) == 0);   // the caller's are gone
  CHECK(Cached(f, 1, prompt) == 96);
  CHECK(AsTenant(f, 1, "/v1/cache/flush", {{"cache_salt", 5}}).status == 400);
}

TEST_CASE("409 session_busy says x-should-retry: false") {
  ApiFixture f;
  f.Ok("/v1/sessions", {{"session_id", "s1"}});
  server::HttpRequest first;
  first.method = "POST";
  first.target = "/v1/completions";
  first.body = json{{"prompt", "a"}, {"max_tokens", 4000}, {"ignore_eos", true}, {"stream", true}, {"session_id", "s1"}}.dump();
  server::HttpResponse running = f.api->Handle(first);  // streamed: the turn runs on
  REQUIRE(running.stream);
  const auto busy = f.Post("/v1/completions", {{"prompt", "b"}, {"max_tokens", 1}, {"session_id", "s1"}});
  CHECK(busy.status == 409);
  bool header = false;
  for (const auto& [k, v] : busy.headers) header |= k == "x-should-retry" && v == "false";
  CHECK(header);
  running.stream->Cancel();
  running.complete();
  // Other errors do not carry it.
  const auto bad = f.Post("/v1/completions", {{"prompt", 5}});
  for (const auto& [k, v] : bad.headers) CHECK(k != "x-should-retry");
}

TEST_CASE("metrics: build info, running/waiting gauges, cache usage, inter-token latency, integers") {
  ApiFixture f;
  f.Ok("/v1/completions", {{"prompt", "abc"}, {"max_tokens", 5}, {"ignore_eos", true}});
  const std::string m = f.Call("GET", "/metrics").body;
  REQUIRE(Samples(m, "cedar_build_info{").size() == 1);
  CHECK(Samples(m, "cedar_build_info{")[0].find("version=\"" + std::string(kCedarVersion) + "\"") != std::string::npos);
  CHECK(Samples(m, "cedar_running_turns ").size() == 1);
  CHECK(Samples(m, "cedar_waiting_turns ").size() == 1);
  CHECK(Samples(m, "cedar_cache_usage_ratio{tier=\"ram\"}").size() == 1);
  // Five tokens: four gaps.
  CHECK(Samples(m, "cedar_inter_token_latency_seconds_count ") == std::vector<std::string>{"cedar_inter_token_latency_seconds_count 4"});
  // Byte gauges are integers, printed whole (not 1.073741824e+09).
  REQUIRE(Samples(m, "cedar_cache_budget_bytes{tier=\"ram\"}").size() == 1);
  CHECK(Samples(m, "cedar_cache_budget_bytes{tier=\"ram\"}")[0] == "cedar_cache_budget_bytes{tier=\"ram\"} 1073741824");
  std::istringstream lines(m);
  for (std::string line; std::getline(lines, line);)
    if (!line.empty() && line[0] != '#') CHECK_MESSAGE(line.find("e+") == std::string::npos, line);
}

TEST_CASE("one access log line per request, off with access_log = false") {
  std::ostringstream captured;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(captured);
  auto previous = spdlog::default_logger();
  spdlog::set_default_logger(std::make_shared<spdlog::logger>("capture", sink));
  spdlog::set_level(spdlog::level::info);
  {
    ApiFixture f;
    f.Ok("/v1/completions", {{"prompt", "abc"}, {"max_tokens", 2}, {"ignore_eos", true}});
    f.Post("/v1/completions", {{"prompt", 5}});
    f.Post("/v1/completions", {{"prompt", "abc"}, {"max_tokens", 2}, {"ignore_eos", true}, {"stream", true}});
    f.Call("GET", "/health");
  }
  const std::string log = captured.str();
  CHECK(log.find("access: POST /v1/completions 200") != std::string::npos);
  CHECK(log.find("prompt=3 cached=0 generated=2 session=-") != std::string::npos);
  CHECK(log.find("access: POST /v1/completions 400") != std::string::npos);
  CHECK(log.find("access: GET /health 200") != std::string::npos);
  size_t turns = 0;
  for (size_t p = log.find("generated=2"); p != std::string::npos; p = log.find("generated=2", p + 1)) turns++;
  CHECK(turns == 2);  // whole and streamed
  captured.str("");
  {
    server::ApiOptions o;
    o.access_log = false;
    ApiFixture f({}, o);
    f.Ok("/v1/completions", {{"prompt", "abc"}, {"max_tokens", 1}});
  }
  CHECK(captured.str().find("access:") == std::string::npos);
  spdlog::set_default_logger(previous);
}

TEST_CASE("a silent stream gets SSE keep-alive comments; clients' framing holds") {
  server::ServerOptions o;
  o.sse_keepalive_s = 0.001;  // every tick of a long prefill finds the stream silent
  ServerFixture s(o);
  const json body = {{"prompt", std::string(3000, 'k')}, {"max_tokens", 2}, {"stream", true}};
  const auto r = s.Unix().Request("POST", "/v1/completions", body.dump());
  REQUIRE(r.status == 200);
  std::string data = r.body;
  size_t comments = 0;
  for (size_t p; (p = data.find(": keep-alive\n\n")) != std::string::npos; comments++) data.erase(p, 14);
  CHECK(comments >= 1);
  CHECK(cedar::test::SseEvents(data).size() >= 1);  // the rest is well-framed SSE
}
