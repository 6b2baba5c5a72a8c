// Clients that must not hurt each other (docs/SERVER.md, "Security model"): the API key is
// checked from the headers before any body is read; TCP clients cannot take the Unix socket's
// connection slots; each key is a tenant with its own sessions and cache partition, and
// `cache_salt` partitions a tenant's cache further; /metrics and /v1/cache answer while the
// engine thread is busy.
#include <doctest/doctest.h>

#include <chrono>
#include <future>
#include <vector>

#include "server/tenant.h"
#include "tests/server_fixture.h"

namespace cedar::test {
namespace {

using nlohmann::json;

const std::map<std::string, std::string> kKeyA = {{"Authorization", "Bearer key-a"}};
const std::map<std::string, std::string> kKeyB = {{"Authorization", "Bearer key-b"}};

server::ServerOptions TwoKeys() {
  server::ServerOptions o;
  o.api_keys = {"key-a", "key-b"};
  return o;
}

TEST_CASE("API keys and tenants: validation, duplicates, stable and distinct partitions") {
  CHECK_THROWS_WITH_AS(server::ApiKeys({"ok", ""}), doctest::Contains("API key #2 is empty"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(server::ApiKeys({"a b"}), doctest::Contains("whitespace"), std::invalid_argument);
  const server::ApiKeys keys({"a", "b", "a"});  // the same key from two sources counts once
  CHECK(keys.size() == 2);
  const std::string bearer_a = "Bearer a", b = "b", wrong = "Bearer c";
  const auto ta = keys.Authenticate(&bearer_a, nullptr), tb = keys.Authenticate(nullptr, &b);
  REQUIRE(ta.has_value());
  REQUIRE(tb.has_value());
  CHECK(*ta == server::TenantOfKey("a"));  // stable across processes (the disk tier keeps a tenant's entries)
  CHECK(*ta != *tb);
  CHECK(*ta != server::kOwnerTenant);
  CHECK_FALSE(keys.Authenticate(&wrong, nullptr).has_value());
  CHECK(server::CachePartition(*ta, "") == *ta);
  CHECK(server::CachePartition(server::kOwnerTenant, "") == cache::kNoTenant);  // the owner keeps the default partition
  CHECK(server::CachePartition(*ta, "x") != *ta);
  CHECK(server::CachePartition(*ta, "x") != server::CachePartition(*tb, "x"));
  CHECK(server::CachePartition(*ta, "x") != server::CachePartition(*ta, "y"));
}

TEST_CASE("TCP with API keys: the key is checked from the headers, before any body or 100 Continue") {
  ServerFixture s(TwoKeys());
  {
    // A 30 MB body announced with Expect: 100-continue and a wrong key: 401, never 100.
    TestClient c = s.Tcp();
    c.Send("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer wrong\r\n"
           "Expect: 100-continue\r\nContent-Type: application/json\r\nContent-Length: 31457280\r\n\r\n");
    const auto r = c.Read();
    CHECK(r.status == 401);
    CHECK(json::parse(r.body)["error"]["code"] == "invalid_api_key");
    CHECK(r.headers.at("www-authenticate") == "Bearer");
    CHECK(c.ClosedByPeer());
  }
  {
    // No key, part of a 1 MB body already sent without Expect: the client still reads its 401
    // (the server drains a bounded amount before closing, rather than resetting).
    TestClient c = s.Tcp();
    c.Send("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 1048576\r\n\r\n" + std::string(65536, ' '));
    CHECK(c.Read().status == 401);
  }
  {
    // With the right key, a body over the limit is refused from its Content-Length: 413, not 100.
    TestClient c = s.Tcp();
    c.Send("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer key-a\r\n"
           "Expect: 100-continue\r\nContent-Length: " + std::to_string((64u << 20)) + "\r\n\r\n");
    const auto r = c.Read();
    CHECK(r.status == 413);
    CHECK(json::parse(r.body)["error"]["code"] == "request_too_large");
  }
  // Every spelling of a valid key is accepted; anything else is refused.
  const std::vector<std::pair<std::map<std::string, std::string>, int>> cases = {
      {{{"Authorization", "Bearer key-a"}}, 200},   {{{"authorization", "bearer key-a"}}, 200},
      {{{"Authorization", "BEARER key-b"}}, 200},   {{{"Authorization", "Bearer   key-b  "}}, 200},
      {{{"x-api-key", "key-b"}}, 200},              {{{"X-Api-Key", "key-a"}}, 200},
      {{{"Authorization", "Basic key-a"}}, 401},    {{{"Authorization", "Bearerkey-a"}}, 401},
      {{{"Authorization", "Bearer key-"}}, 401},    {{{"Authorization", "Bearer key-aa"}}, 401},
      {{{"x-api-key", "Bearer key-a"}}, 401},       {{}, 401},
  };
  for (const auto& [headers, status] : cases) {
    CAPTURE(headers.empty() ? std::string("(none)") : headers.begin()->first + ": " + headers.begin()->second);
    CHECK(s.Tcp().Request("GET", "/v1/models", "", headers).status == status);
  }
  CHECK(s.Tcp().Request("GET", "/health").status == 200);  // liveness needs no key
}

TEST_CASE("TCP clients cannot take the Unix socket's slots; unauthenticated ones are dropped at the auth timeout") {
  server::ServerOptions o = TwoKeys();
  o.max_connections = 4;
  o.max_unix_connections = 4;
  o.auth_timeout_s = 0.3;
  o.read_timeout_s = 120;  // far beyond the clients' 30 s receive timeout: only the auth timeout can close them
  ServerFixture s(o);
  std::vector<TestClient> idle;
  for (size_t i = 0; i < o.max_connections; ++i) idle.push_back(s.Tcp());  // connected, silent
  CHECK(s.Eventually([&](const session::EngineMetrics&) {
    return s.api->metrics().totals().connections_total >= int64_t(o.max_connections);
  }));
  // The TCP slots are full, the Unix socket still answers.
  CHECK(s.Unix().Request("GET", "/v1/models").status == 200);
  // The silent connections are closed once the auth timeout passes (not the 120 s read timeout).
  for (TestClient& c : idle) CHECK(c.ClosedByPeer());
  CHECK(s.Tcp().Request("GET", "/v1/models", "", kKeyA).status == 200);
}

// A completion of `prompt` (100 bytes: 96 of them in full cache pages) as `key`; returns its
// usage.prompt_tokens_details.cached_tokens.
int64_t CachedTokens(ServerFixture& s, const std::map<std::string, std::string>& key, const std::string& prompt,
                     const std::string& cache_salt = "") {
  json body = {{"prompt", prompt}, {"max_tokens", 1}};
  if (!cache_salt.empty()) body["cache_salt"] = cache_salt;
  const auto r = s.Tcp().Request("POST", "/v1/completions", body.dump(), key);
  INFO(r.body);
  REQUIRE(r.status == 200);
  return json::parse(r.body)["usage"]["prompt_tokens_details"]["cached_tokens"].get<int64_t>();
}

TEST_CASE("each API key is a tenant: no cached tokens across keys; cache_salt partitions within a key") {
  ServerFixture s(TwoKeys());
  const std::string prompt(100, 'p');
  CHECK(CachedTokens(s, kKeyA, prompt) == 0);
  CHECK(CachedTokens(s, kKeyA, prompt) == 96);  // one tenant shares its prefixes
  CHECK(CachedTokens(s, kKeyB, prompt) == 0);   // another tenant does not see them
  CHECK(CachedTokens(s, kKeyB, prompt) == 96);
  // The Unix socket's owner is a tenant of its own.
  const auto owner = s.Unix().Request("POST", "/v1/completions", json{{"prompt", prompt}, {"max_tokens", 1}}.dump());
  CHECK(json::parse(owner.body)["usage"]["prompt_tokens_details"]["cached_tokens"] == 0);
  // cache_salt: a partition of its own inside the tenant, shared by the requests that name it.
  CHECK(CachedTokens(s, kKeyA, prompt, "team-1") == 0);
  CHECK(CachedTokens(s, kKeyA, prompt, "team-1") == 96);
  CHECK(CachedTokens(s, kKeyA, prompt, "team-2") == 0);
  CHECK(CachedTokens(s, kKeyB, prompt, "team-1") == 0);  // the same salt under another key is another partition
  // A bad cache_salt is refused, naming it.
  for (const json& bad : {json(7), json(""), json(std::string(300, 's')), json::array({"x"})}) {
    const auto r = s.Tcp().Request("POST", "/v1/completions",
                                   json{{"prompt", "x"}, {"max_tokens", 1}, {"cache_salt", bad}}.dump(), kKeyA);
    CHECK(r.status == 400);
    CHECK(json::parse(r.body)["error"]["param"] == "cache_salt");
  }
}

TEST_CASE("without API keys, TCP clients are one tenant, apart from the socket's owner") {
  ServerFixture s;
  const std::string prompt(100, 'q');
  CHECK(CachedTokens(s, {}, prompt) == 0);
  CHECK(CachedTokens(s, {}, prompt) == 96);  // another TCP connection: the same tenant
  const auto owner = s.Unix().Request("POST", "/v1/completions", json{{"prompt", prompt}, {"max_tokens", 1}}.dump());
  CHECK(json::parse(owner.body)["usage"]["prompt_tokens_details"]["cached_tokens"] == 0);
  REQUIRE(s.Unix().Request("POST", "/v1/sessions", json{{"session_id", "mine"}}.dump()).status == 200);
  CHECK(s.Tcp().Request("GET", "/v1/sessions/mine").status == 404);
  CHECK(s.Unix().Request("GET", "/v1/sessions/mine").status == 200);
}

TEST_CASE("sessions belong to the tenant that created them") {
  ServerFixture s(TwoKeys());
  auto call = [&](const std::map<std::string, std::string>& key, const std::string& method, const std::string& target,
                  const json& body = nullptr) {
    return s.Tcp().Request(method, target, body.is_null() ? "" : body.dump(), key);
  };
  const json turn = {{"session_id", "shared"}, {"messages", {{{"role", "user"}, {"content", "hello"}}}}, {"max_tokens", 2}};
  REQUIRE(call(kKeyA, "POST", "/v1/sessions", {{"session_id", "shared"}}).status == 200);
  REQUIRE(call(kKeyA, "POST", "/v1/chat/completions", turn).status == 200);
  // Another key: the session does not exist for it, whatever it tries.
  CHECK(call(kKeyB, "GET", "/v1/sessions/shared").status == 404);
  CHECK(call(kKeyB, "DELETE", "/v1/sessions/shared").status == 404);
  CHECK(call(kKeyB, "POST", "/v1/chat/completions", turn).status == 404);
  CHECK(json::parse(call(kKeyB, "GET", "/v1/sessions").body)["data"].empty());
  CHECK(s.Unix().Request("GET", "/v1/sessions/shared").status == 404);  // nor for the socket's owner
  // It may create its own session of that name, which is a different one.
  CHECK(call(kKeyB, "POST", "/v1/sessions", {{"session_id", "shared"}}).status == 200);
  CHECK(json::parse(call(kKeyB, "GET", "/v1/sessions/shared").body)["turns"] == 0);
  CHECK(json::parse(call(kKeyA, "GET", "/v1/sessions/shared").body)["turns"] == 1);
  const json listed = json::parse(call(kKeyA, "GET", "/v1/sessions").body)["data"];
  REQUIRE(listed.size() == 1);
  CHECK(listed[0]["id"] == "shared");
  CHECK(call(kKeyA, "DELETE", "/v1/sessions/shared").status == 200);
  CHECK(call(kKeyA, "GET", "/v1/sessions/shared").status == 404);
  CHECK(call(kKeyB, "GET", "/v1/sessions/shared").status == 200);  // B's is untouched
}

TEST_CASE("/metrics and /v1/cache answer while the engine thread is inside a turn") {
  ApiFixture f;
  // A turn that holds the engine thread until released: its first token waits for us.
  std::promise<void> entered, release;
  std::shared_future<void> released = release.get_future().share();
  session::TurnRequest rq;
  rq.prompt = std::vector<int32_t>(64, 7);
  rq.max_tokens = 2;
  auto first = std::make_shared<bool>(true);
  rq.on_token = [&entered, released, first](int32_t) {
    if (*first) {
      *first = false;
      entered.set_value();
      released.wait();
    }
    return true;
  };
  std::future<session::TurnResult> turn = f.manager->Submit(std::move(rq));
  entered.get_future().wait();  // the engine thread is inside the turn now, and stays there
  auto metrics = std::async(std::launch::async, [&] { return f.Call("GET", "/metrics"); });
  auto cache = std::async(std::launch::async, [&] { return f.Call("GET", "/v1/cache"); });
  // A guard against a deadlock, not a latency bound: an answer that needs the engine thread
  // never comes while it is held.
  const bool answered = metrics.wait_for(std::chrono::seconds(30)) == std::future_status::ready &&
                        cache.wait_for(std::chrono::seconds(30)) == std::future_status::ready;
  CHECK(answered);
  CHECK(turn.wait_for(std::chrono::seconds(0)) == std::future_status::timeout);  // the turn is still running
  release.set_value();
  CHECK(turn.get().finish_reason == "length");
  const server::HttpResponse m = metrics.get(), c = cache.get();
  CHECK(m.status == 200);
  CHECK(m.body.find("cedar_") != std::string::npos);
  CHECK(c.status == 200);
  CHECK(json::parse(c.body)["ram"]["budget_bytes"].get<uint64_t>() > 0);
  // Once the turn has ended, the counters include it.
  CHECK(f.manager->Metrics().turns == 1);
}

}  // namespace
}  // namespace cedar::test
