// `cedar serve --spec-tokens` over a real socket: a session's chat turns (plain and streamed,
// with a stop string) answer exactly as without speculation (content, finish_reason, usage with
// cached_tokens), and /metrics counts the drafts. The tiny model has no DSpark layers, so the
// turns speculate with a drafter whose proposals are the model's own greedy tokens, every fifth
// one corrupted (ManagerOptions::make_drafter): drafts are kept and rejected, stop strings fall
// inside kept drafts. session_speculative_test runs the released DSpark drafter on v41-tiny.
#include <doctest/doctest.h>

#include <sstream>

#include "server/http_server.h"
#include "tests/server_fixture.h"
#include "tests/spec_serve_fixture.h"
#include "tests/test_models.h"

namespace cedar::test {
namespace {

using nlohmann::json;

struct SpecServer {
  explicit SpecServer(int spec_tokens) : f(Options(spec_tokens)) {
    dir = TempDir("server_spec");
    server::ServerOptions o;
    o.unix_socket = dir + "/cedar.sock";
    o.tcp_host = "127.0.0.1";
    http = std::make_unique<server::HttpServer>(*f.api, *f.manager, o);
    http->Start();
  }
  ~SpecServer() { http->Stop(); }
  static session::ManagerOptions Options(int spec_tokens) {
    session::ManagerOptions mo;
    mo.spec_tokens = spec_tokens;
    mo.make_drafter = [](const Model& m) { return std::make_unique<spec_serve_test::OracleDrafter>(m); };
    return mo;
  }
  TestClient::Response Post(const std::string& target, const json& body) {
    return TestClient::Tcp(http->tcp_port()).Request("POST", target, body.dump(), {{"Content-Type", "application/json"}});
  }
  // The value of an unlabelled counter in /metrics.
  double Counter(const std::string& name) {
    const auto r = TestClient::Tcp(http->tcp_port()).Request("GET", "/metrics");
    std::istringstream in(r.body);
    for (std::string line; std::getline(in, line);)
      if (line.starts_with(name + " ")) return std::stod(line.substr(name.size() + 1));
    FAIL("no " << name << " in /metrics");
    return -1;
  }
  ApiFixture f;
  std::string dir;
  std::unique_ptr<server::HttpServer> http;
};

struct Answer {
  std::string content, finish;
  json usage;
};

// Three turns of session "s": plain, streamed with `stop` (when not empty), plain again.
std::vector<Answer> Conversation(SpecServer& s, const std::string& stop) {
  REQUIRE(s.Post("/v1/sessions", {{"session_id", "s"}}).status == 200);
  json messages = json::array({{{"role", "user"}, {"content", "Tell me about cedar trees."}}});
  std::vector<Answer> out;
  for (int turn = 0; turn < 3; ++turn) {
    json body = {{"model", "tiny"}, {"messages", messages}, {"session_id", "s"}, {"max_tokens", 12 + 5 * turn}};
    const bool stream = turn == 1;
    if (stream) {
      body["stream"] = true;
      body["stream_options"] = {{"include_usage", true}};
      if (!stop.empty()) body["stop"] = json::array({stop});
    }
    const auto r = s.Post("/v1/chat/completions", body);
    INFO(r.body);
    REQUIRE(r.status == 200);
    Answer a;
    if (stream) {
      const std::vector<json> events = SseEvents(r.body);
      a.content = StreamedText(events);
      for (const json& e : events) {
        if (e.contains("usage") && e["usage"].is_object()) a.usage = e["usage"];
        if (e.contains("choices") && !e["choices"].empty() && e["choices"][0]["finish_reason"].is_string())
          a.finish = e["choices"][0]["finish_reason"];
      }
    } else {
      const json j = json::parse(r.body);
      a.content = j["choices"][0]["message"]["content"].get<std::string>();
      a.finish = j["choices"][0]["finish_reason"];
      a.usage = j["usage"];
    }
    out.push_back(a);
    messages.push_back({{"role", "assistant"}, {"content", a.content}});
    messages.push_back({{"role", "user"}, {"content", "And then? " + std::to_string(turn)}});
  }
  return out;
}

}  // namespace

TEST_CASE("cedar serve --spec-tokens: chat turns over HTTP equal plain decoding (content, finish, usage, cached_tokens)") {
  // A stop string the plain streamed turn meets mid-output: one ASCII character of its content.
  std::string stop;
  {
    SpecServer plain(0);
    const std::vector<Answer> probe = Conversation(plain, "");
    const std::string& c = probe[1].content;
    INFO("probe streamed turn: " << json(c).dump());
    // Outside the names of special tokens ("<|tool|>"), which stop strings do not match.
    bool special = false;
    for (size_t i = 0; i + 4 < c.size() && stop.empty(); ++i) {
      if (c.compare(i, 2, "<|") == 0) special = true;
      if (c.compare(i, 2, "|>") == 0) special = false;
      if (!special && i >= 2 && static_cast<unsigned char>(c[i]) < 0x80 && c[i] != '<' && c[i] != '|' && c[i] != '>')
        stop = c.substr(i, 1);
    }
  }
  MESSAGE("stop string " << json(stop).dump());
  REQUIRE(!stop.empty());
  std::vector<Answer> base;
  {
    SpecServer plain(0);
    base = Conversation(plain, stop);
    CHECK(plain.Counter("cedar_spec_drafted_total") == 0);
  }
  INFO("plain streamed turn: " << json(base[1].content).dump());
  if (!stop.empty()) CHECK(base[1].finish == "stop");
  CHECK(base[2].usage["prompt_tokens_details"]["cached_tokens"].get<int64_t>() > 0);  // the session's state served it
  SpecServer spec(3);
  const std::vector<Answer> got = Conversation(spec, stop);
  for (size_t i = 0; i < base.size(); ++i) {
    CAPTURE(i);
    CHECK(got[i].content == base[i].content);
    CHECK(got[i].finish == base[i].finish);
    CHECK(got[i].usage == base[i].usage);
  }
  const double drafted = spec.Counter("cedar_spec_drafted_total"), accepted = spec.Counter("cedar_spec_accepted_total");
  MESSAGE("drafted " << drafted << ", accepted " << accepted);
  CHECK(drafted > 0);
  CHECK(accepted > 0);
  CHECK(accepted < drafted);
}

}  // namespace cedar::test
