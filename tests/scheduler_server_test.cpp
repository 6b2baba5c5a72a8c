// The scheduler seen through the API (issue 14): 429 queue_full with Retry-After past
// --max-queued-turns, the queue in /metrics, the `priority` field, a disconnect freeing a
// queued turn. Deterministic: with a session budget of one byte, a turn in flight keeps every
// later turn in the queue until it ends.
#include <doctest/doctest.h>

#include <thread>

#include "tests/server_fixture.h"
#include "server/api_error.h"

namespace cedar::test {
namespace {

using nlohmann::json;

json UserChat(const std::string& text, json extra = json::object()) {
  json body = {{"model", "tiny"}, {"messages", json::array({{{"role", "user"}, {"content", text}}})}};
  body.update(extra);
  return body;
}

server::HttpRequest StreamRequest(const json& body) {
  server::HttpRequest r;
  r.method = "POST";
  r.target = "/v1/chat/completions";
  r.body = body.dump();
  return r;
}

void Drain(server::HttpResponse& r) {
  std::string chunk;
  while (r.stream->Pull(&chunk)) {
  }
}

}  // namespace

TEST_CASE("past --max-queued-turns: 429 queue_full with Retry-After; the queue in /metrics; priority parsed") {
  session::ManagerOptions mo;
  mo.session_ram_bytes = 1;          // a turn in flight keeps the others queued
  mo.scheduler.max_queued_turns = 1;
  ApiFixture f(mo);
  server::HttpResponse first =
      f.api->Handle(StreamRequest(UserChat("runs", {{"stream", true}, {"max_tokens", 4000}, {"ignore_eos", true}})));
  REQUIRE(first.status == 200);
  std::thread w1(first.complete);
  // Admitted (it holds the session memory from now on): the queue is empty again.
  while (f.manager->Metrics().queued_turns != 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  server::HttpResponse second = f.api->Handle(StreamRequest(UserChat("waits", {{"stream", true}, {"max_tokens", 2}, {"priority", -3}})));
  REQUIRE(second.status == 200);
  std::thread w2(second.complete);
  // It waits for memory, in the queue, until the first ends.
  while (f.manager->Metrics().memory_waits == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));

  const server::HttpResponse third = f.Post("/v1/chat/completions", UserChat("refused", {{"max_tokens", 2}}));
  INFO(third.body);
  CHECK(third.status == 429);
  const json e = json::parse(third.body)["error"];
  CHECK(e["code"] == "queue_full");
  CHECK(e["type"] == "rate_limit_error");
  bool retry_after = false;
  for (const auto& [k, v] : third.headers)
    if (k == "Retry-After") retry_after = std::stoi(v) >= 1;
  CHECK(retry_after);
  const std::string metrics = f.Call("GET", "/metrics").body;
  CHECK(metrics.find("\ncedar_queue_turns 1\n") != std::string::npos);
  CHECK(metrics.find("\ncedar_queue_full_total 1\n") != std::string::npos);
  CHECK(metrics.find("cedar_queue_wait_seconds_total") != std::string::npos);

  // The first client goes away: its turn ends, and the queued one runs to its end.
  first.stream->Cancel();
  w1.join();
  Drain(first);
  w2.join();
  Drain(second);
  const session::EngineMetrics m = f.manager->Metrics();
  CHECK(m.turns_cancelled == 1);
  CHECK(m.turns == 2);
  CHECK(m.queued_turns == 0);
  CHECK(m.memory_waits >= 1);
}

TEST_CASE("priority: an integer, else 400 naming it") {
  ApiFixture f;
  f.Ok("/v1/chat/completions", UserChat("hi", {{"max_tokens", 1}, {"priority", 7}}));
  const server::HttpResponse bad = f.Post("/v1/chat/completions", UserChat("hi", {{"priority", "high"}}));
  CHECK(bad.status == 400);
  CHECK(json::parse(bad.body)["error"]["param"] == "priority");
  const server::HttpResponse big = f.Post("/v1/chat/completions", UserChat("hi", {{"priority", 1ll << 40}}));
  CHECK(big.status == 400);
}

}  // namespace cedar::test
