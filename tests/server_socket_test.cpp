// The transport over real sockets: keep-alive, pipelining, concurrency, disconnects that
// cancel turns, limits and timeouts, the API key, the Unix socket's mode and removal.
#include <doctest/doctest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <thread>

#include "tests/server_fixture.h"
#include "tests/test_models.h"
#include "server/http_server.h"

namespace cedar::test {
namespace {

using nlohmann::json;

std::string Chat(const std::string& text, json extra = json::object()) {
  json body = {{"messages", json::array({{{"role", "user"}, {"content", text}}})}, {"max_tokens", 4}};
  body.update(extra);
  return body.dump();
}

TEST_CASE("keep-alive and pipelining on one connection, over the Unix socket and TCP") {
  ServerFixture s;
  for (int transport = 0; transport < 2; ++transport) {
    TestClient c = transport == 0 ? s.Unix() : s.Tcp();
    for (int i = 0; i < 3; ++i) {
      const auto h = c.Request("GET", "/health");
      CHECK(h.status == 200);
      const auto r = c.Request("POST", "/v1/chat/completions", Chat("hi " + std::to_string(i)));
      CHECK(r.status == 200);
      CHECK(json::parse(r.body)["object"] == "chat.completion");
    }
    // Two requests sent at once are answered in order.
    c.SendRequest("POST", "/v1/chat/completions", Chat("one"));
    c.SendRequest("GET", "/v1/models");
    CHECK(json::parse(c.Read().body)["object"] == "chat.completion");
    CHECK(json::parse(c.Read().body)["object"] == "list");
    // A streamed response, then the connection is still usable.
    const auto sse = c.Request("POST", "/v1/chat/completions", Chat("s", {{"stream", true}}));
    CHECK(sse.status == 200);
    CHECK(sse.headers.at("content-type") == "text/event-stream");
    CHECK(sse.headers.at("transfer-encoding") == "chunked");
    CHECK(SseEvents(sse.body).size() >= 2);
    CHECK(c.Request("GET", "/health").status == 200);
    // A request pipelined behind a stream waits for the stream's end, which still arrives.
    c.SendRequest("POST", "/v1/chat/completions", Chat("s", {{"stream", true}, {"max_tokens", 50}}));
    c.SendRequest("GET", "/health");
    CHECK(SseEvents(c.Read().body).size() >= 2);
    CHECK(c.Read().status == 200);
  }
}

TEST_CASE("Expect: 100-continue is answered; HEAD has no body") {
  ServerFixture s;
  TestClient c = s.Unix();
  const std::string body = Chat("hello");
  c.Send("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\n\r\n");
  CHECK(c.ReadUntil("\r\n\r\n").rfind("HTTP/1.1 100 Continue\r\n\r\n", 0) == 0);
  c.Send(body);
  const auto r = c.Read();  // the 100 first
  CHECK(r.status == 100);
  CHECK(c.Read().status == 200);
  c.SendRequest("HEAD", "/health");
  const auto h = c.Read(/*head=*/true);
  CHECK(h.status == 200);
  CHECK(std::stoul(h.headers.at("content-length")) > 0);
  const auto g = c.Request("GET", "/health");  // the HEAD sent no body: this parses cleanly
  CHECK(g.status == 200);
  CHECK(json::parse(g.body)["status"] == "ok");
}

TEST_CASE("many concurrent connections and sessions") {
  ServerFixture s;
  constexpr int kClients = 24, kTurns = 3;
  std::atomic<int> ok{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kClients; ++i) {
    threads.emplace_back([&, i] {
      TestClient c = i % 2 ? s.Unix() : s.Tcp();
      const std::string sid = "c" + std::to_string(i);
      if (c.Request("POST", "/v1/sessions", json{{"session_id", sid}}.dump()).status != 200) return;
      json messages = {{{"role", "system"}, {"content", "shared system prompt for every agent"}}};
      for (int t = 0; t < kTurns; ++t) {
        messages.push_back({{"role", "user"}, {"content", "turn " + std::to_string(t)}});
        const auto r = c.Request("POST", "/v1/chat/completions",
                                 json{{"session_id", sid}, {"messages", messages}, {"max_tokens", 3},
                                      {"stream", t == 1}}.dump());
        if (r.status != 200) return;
        if (t == 1) {
          messages.push_back({{"role", "assistant"}, {"content", StreamedText(SseEvents(r.body))}});
        } else {
          messages.push_back(json::parse(r.body)["choices"][0]["message"]);
        }
      }
      ok++;
    });
  }
  for (auto& t : threads) t.join();
  CHECK(ok == kClients);
  CHECK(s.manager->Metrics().turns == kClients * kTurns);
  CHECK(s.api->metrics().totals().connections_total >= kClients);
  CHECK(s.Eventually([&](const session::EngineMetrics&) { return s.http->requests_in_flight() == 0; }));
}

TEST_CASE("clients that leave as soon as they have their answer leave nothing in flight") {
  ServerFixture s;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 40; ++i) {
        TestClient c = (i + t) % 2 ? s.Unix() : s.Tcp();
        if (i % 3 == 0) c.Request("POST", "/v1/chat/completions", Chat("x", {{"stream", true}, {"max_tokens", 2}}));
        else if (i % 3 == 1) c.Request("POST", "/v1/chat/completions", Chat("y", {{"max_tokens", 1}}));
        else c.Request("GET", "/health");
      }  // each client closes right after reading its response
    });
  }
  for (auto& t : threads) t.join();
  CHECK(s.Eventually([&](const session::EngineMetrics&) {
    return s.http->requests_in_flight() == 0 && s.api->metrics().totals().connections_open == 0;
  }));
  CHECK(s.http->requests_in_flight() == 0);
}

TEST_CASE("a client that disconnects mid-stream cancels its turn") {
  ServerFixture s;
  const int64_t before = s.manager->Metrics().turns_cancelled;
  {
    TestClient c = s.Unix();
    c.SendRequest("POST", "/v1/chat/completions",
                  Chat("go on forever", {{"stream", true}, {"max_tokens", 4000}, {"ignore_eos", true}}));
    c.ReadUntil("\"content\":");  // headers and the first chunks are out
  }  // closed
  CHECK(s.Eventually([&](const session::EngineMetrics& m) { return m.turns_cancelled == before + 1; }));
  // A non-streamed turn whose client leaves is cancelled too.
  {
    TestClient c = s.Tcp();
    c.SendRequest("POST", "/v1/completions",
                  json{{"prompt", "abc"}, {"max_tokens", 4000}, {"ignore_eos", true}}.dump());
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  CHECK(s.Eventually([&](const session::EngineMetrics& m) { return m.turns_cancelled == before + 2; }));
  CHECK(s.Eventually([&](const session::EngineMetrics& m) {
    return s.api->metrics().totals().connections_open == 0;
  }));
  // The server still serves.
  CHECK(s.Unix().Request("GET", "/health").status == 200);
}

TEST_CASE("limits: body size (413), read timeout, malformed HTTP (400)") {
  server::ServerOptions o;
  o.max_body_bytes = 1024;
  o.read_timeout_s = 0.3;
  ServerFixture s(o);
  {
    TestClient c = s.Unix();
    const auto r = c.Request("POST", "/v1/chat/completions", Chat(std::string(4000, 'x')));
    CHECK(r.status == 413);
    CHECK(json::parse(r.body)["error"]["code"] == "request_too_large");
    CHECK(c.ClosedByPeer());
  }
  {
    TestClient c = s.Unix();
    const auto t0 = std::chrono::steady_clock::now();
    CHECK(c.ClosedByPeer());  // idle: closed after the read timeout
    CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5));
  }
  {
    TestClient c = s.Unix();
    c.Send("GET /health HTTP/1.1\r\nHost: x\r\nContent-Length: nope\r\n\r\n");
    CHECK(c.Read().status == 400);
  }
  {
    TestClient c = s.Unix();  // a request that stops half way is dropped at the timeout
    c.Send("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"mess");
    CHECK(c.ClosedByPeer());
  }
}

TEST_CASE("the API key guards TCP, not the Unix socket") {
  server::ServerOptions o;
  o.api_keys = {"sekret"};
  ServerFixture s(o);
  CHECK(s.Tcp().Request("GET", "/v1/models").status == 401);
  CHECK(s.Tcp().Request("GET", "/v1/models", "", {{"Authorization", "Bearer wrong!"}}).status == 401);
  CHECK(s.Tcp().Request("GET", "/v1/models", "", {{"Authorization", "Bearer sekret"}}).status == 200);
  CHECK(s.Tcp().Request("GET", "/health").status == 200);
  CHECK(s.Unix().Request("GET", "/v1/models").status == 200);
}

TEST_CASE("the Unix socket: mode 0600, removed at shutdown, stale files replaced, live ones refused") {
  const std::string dir = TempDir("sock");
  const std::string path = dir + "/s.sock";
  server::ServerOptions o;
  o.unix_socket = path;
  o.drain_timeout_s = 0.2;
  {
    ServerFixture s(o);
    struct stat st{};
    REQUIRE(::stat(path.c_str(), &st) == 0);
    CHECK(S_ISSOCK(st.st_mode));
    CHECK((st.st_mode & 0777) == 0600);
    // A second server on the same path refuses to start and leaves the live socket alone.
    server::HttpServer second(*s.api, *s.manager, o);
    CHECK_THROWS_WITH_AS(second.Start(), doctest::Contains("already listening"), std::runtime_error);
    CHECK(std::filesystem::exists(path));
    // Stop with a turn in flight: it is cancelled after the drain timeout.
    TestClient c = s.Unix();
    c.SendRequest("POST", "/v1/chat/completions",
                  Chat("long", {{"stream", true}, {"max_tokens", 4000}, {"ignore_eos", true}}));
    c.ReadUntil("\"content\":");
    std::string got;
    std::thread reader([&] { got = c.ReadUntil("data: [DONE]"); });  // the client keeps reading
    const auto t0 = std::chrono::steady_clock::now();
    s.http->Stop();
    CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(3));
    reader.join();
    CHECK_FALSE(std::filesystem::exists(path));
    // The client got the end of its stream: cancelled, then [DONE].
    CHECK(got.find("\"finish_reason\":\"cancelled\"") != std::string::npos);
  }
  // A stale socket file (bound, nobody listening: a crashed server) is replaced.
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::strncpy(a.sun_path, path.c_str(), sizeof(a.sun_path) - 1);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  ::close(fd);
  REQUIRE(std::filesystem::exists(path));
  {
    ServerFixture s(o);
    CHECK(s.Unix().Request("GET", "/health").status == 200);
  }
  CHECK_FALSE(std::filesystem::exists(path));
}

}  // namespace
}  // namespace cedar::test
