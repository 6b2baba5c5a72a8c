// The server's side of session memory: 429 when --max-sessions sessions exist, GET /v1/sessions
// in pages (OpenAI's list shape), and the session-memory numbers in /v1/cache and /metrics.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "tests/server_fixture.h"

using namespace cedar;
using nlohmann::json;
using cedar::test::ApiFixture;

TEST_CASE("sessions: the limit answers 429, the list pages, and memory is reported") {
  session::ManagerOptions mo;
  mo.max_sessions = 3;
  mo.session_ram_bytes = 1;  // every session is demoted after its turn: the budget binds
  ApiFixture f(mo);
  for (const char* id : {"c", "a", "b"}) f.Ok("/v1/sessions", {{"session_id", id}});
  const server::HttpResponse full = f.Post("/v1/sessions", {{"session_id", "d"}});
  CHECK(full.status == 429);
  CHECK(json::parse(full.body)["error"]["code"] == "session_limit");
  f.Ok("/v1/chat/completions", {{"session_id", "a"},
                                {"messages", {{{"role", "user"}, {"content", "hello there"}}}},
                                {"max_tokens", 2}});
  const json p1 = json::parse(f.Call("GET", "/v1/sessions?limit=2").body);
  CHECK(p1["object"] == "list");
  REQUIRE(p1["data"].size() == 2);
  CHECK(p1["data"][0]["id"] == "a");
  CHECK(p1["first_id"] == "a");
  CHECK(p1["last_id"] == "b");
  CHECK(p1["has_more"] == true);
  const json p2 = json::parse(f.Call("GET", "/v1/sessions?limit=2&after=b").body);
  REQUIRE(p2["data"].size() == 1);
  CHECK(p2["data"][0]["id"] == "c");
  CHECK(p2["has_more"] == false);
  CHECK(json::parse(f.Call("GET", "/v1/sessions").body)["data"].size() == 3);
  for (const char* bad : {"0", "1001", "x", "-1", ""}) {
    const server::HttpResponse r = f.Call("GET", std::string("/v1/sessions?limit=") + bad);
    CAPTURE(bad);
    CHECK(r.status == 400);
    CHECK(json::parse(r.body)["error"]["param"] == "limit");
  }
  const json cache = json::parse(f.Call("GET", "/v1/cache").body);
  CHECK(cache["session_memory"]["budget_bytes"] == 1);
  CHECK(cache["session_memory"]["live_state_bytes"] == 0);  // "a" was demoted after its turn
  CHECK(cache["session_memory"]["demoted"].get<int64_t>() >= 1);
  CHECK(cache["session_memory"]["max_sessions"] == 3);
  const std::string metrics = f.Call("GET", "/metrics").body;
  for (const char* line : {"\ncedar_session_ram_budget_bytes 1\n", "\ncedar_session_live_state_bytes 0\n",
                           "\ncedar_sessions_max 3\n", "\ncedar_cache_inserts_partial_total 0\n"}) {
    CAPTURE(line);
    CHECK(metrics.find(line) != std::string::npos);
  }
  CHECK(metrics.find("\ncedar_sessions_demoted_total ") != std::string::npos);
}
