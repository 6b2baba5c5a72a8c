// cedar profile --live: the simulation and a real `cedar serve` (in process, tiny model, Unix
// socket) agree on every request's hit tokens for the same short trace and budget.
//
// Why they can agree exactly (docs/PROFILE.md, "Live mode"): requests go one at a time without a
// session id, so the server serves them from its shared prefix cache as the simulation does;
// both match at most n - 1 tokens and cut matches to 16-token pages, except an exact repeat of a
// cached page-aligned prompt whose end snapshot carries a decoder tail the decoder policy
// accepts (both then hit the whole prompt); the simulation takes the
// server's restore policy and caches only what the server would (nothing past a replayed prefix
// under `replay`; up to the deepest snapshot under `recompute`); the RAM budget is large enough
// that neither cache evicts (their snapshot payloads differ in size: the server's also hold the
// decoder windows). The outputs differ (the server generates its own tokens) but no later
// prompt contains either, so they never give hits.
#include <doctest/doctest.h>

#include <fstream>
#include <sstream>

#include "profile/profile.h"
#include "tests/server_fixture.h"
#include "tests/test_models.h"
#include "server/profile_live/live_driver.h"
#include "server/http_server.h"

namespace cedar::test {
namespace {

using nlohmann::json;

const std::string kData = std::string(CEDAR_SOURCE_DIR) + "/tests/data/";

// A server on a fresh cache: pages of 16 tokens, 64 MiB of RAM, no disk tier.
session::ManagerOptions SmallCache() {
  session::ManagerOptions o;
  o.cache_ram_bytes = 64ull << 20;
  o.cache_disk_bytes = 0;
  o.cache_dir = "";
  o.page_tokens = 16;
  return o;
}

server::ApiOptions Restoring(session::RestorePolicy restore) {
  server::ApiOptions o;
  o.restore_policy = restore;
  return o;
}

struct LiveServer {
  explicit LiveServer(session::RestorePolicy restore) : api(SmallCache(), Restoring(restore)) {
    server::ServerOptions o;
    o.unix_socket = TempDir("profile-live") + "/cedar.sock";
    http = std::make_unique<server::HttpServer>(*api.api, *api.manager, o);
    http->Start();
  }
  ~LiveServer() { http->Stop(); }
  ApiFixture api;
  std::unique_ptr<server::HttpServer> http;
};

// Runs `cedar profile --live` on `trace` against `server`; returns report.json.
json RunLive(const LiveServer& server, const std::string& trace, profile::LiveOptions live = {}) {
  profile::ProfileOptions o;
  o.traces = {kData + trace};
  o.out = TempDir("profile-live-out");
  o.plots = false;
  o.progress = 0;
  o.live = true;
  const profile_live::ServerAddress address{"unix:" + server.http->unix_path(), ""};
  o.live_driver = [address, live](std::ostream& log) { return profile_live::ConnectLiveDriver(address, live, log); };
  std::ostringstream log;
  const profile::ProfileResult r = profile::RunProfile(o, log);
  INFO(log.str());
  return r.report;
}

std::vector<int64_t> LiveHits(const json& report) {
  std::vector<int64_t> v;
  for (const json& r : report["requests"]) v.push_back(r["live"].value("cached_tokens", int64_t(-1)));
  return v;
}

std::string Show(const std::vector<int64_t>& v) {
  std::string s;
  for (int64_t x : v) {
    if (!s.empty()) s += ' ';
    s += std::to_string(x);
  }
  return s;
}

std::vector<int64_t> SimulatedHits(const json& report) {
  std::vector<int64_t> v;
  for (const json& r : report["requests"]) v.push_back(r["cedar"]["hit_ram"].get<int64_t>() + r["cedar"]["hit_disk"].get<int64_t>());
  return v;
}

}  // namespace

TEST_CASE("live and simulated hit tokens agree on the known trace, with the hand-computed numbers") {
  // known.json (profile_sim_test.cpp): A0 128, S0 64, A1 220 (hits B1 B2 with the snapshot at
  // 128), A2 256 (matches B1 B2 B3 = 192; no snapshot at 192, the deepest is at 128), A3 300
  // (B1..B4 = 256 if A2 cached B4).
  for (auto [policy, expected] : {std::pair{session::RestorePolicy::kRecompute, std::vector<int64_t>{0, 0, 128, 128, 256}},
                                  std::pair{session::RestorePolicy::kReplay, std::vector<int64_t>{0, 0, 128, 192, 192}},
                                  std::pair{session::RestorePolicy::kStaircase, std::vector<int64_t>{0, 0, 128, 192, 256}}}) {
    // recompute: A2 restores at 128 and caches B4 with a snapshot at 256, which A3 hits.
    // replay: A2 replays at 192 and, its state being approximate past there, caches nothing
    // more, so A3 finds only 192 again.
    // staircase: A2 restores 192 exactly and caches B4 and its snapshot: A3 hits 256.
    CAPTURE(server::RestorePolicyName(policy));
    LiveServer server(policy);
    const json report = RunLive(server, "profile/known.json");
    INFO("live: ", Show(LiveHits(report)), "; simulated: ", Show(SimulatedHits(report)));
    CHECK(report["live"]["errors"] == 0);
    CHECK(LiveHits(report) == expected);
    CHECK(SimulatedHits(report) == expected);
    CHECK(report["live"]["agreement"]["equal_hit_tokens"] == 5);
    CHECK(report["live"]["agreement"]["simulated_restore_policy"] == server::RestorePolicyName(policy));
  }
}

TEST_CASE("live and simulated hit tokens agree per request on a longer trace (repeats, sub-agent, page-aligned)") {
  // profile_live/live_agree.json: 13 requests up to 1,536 tokens; identical page-aligned repeats, a
  // sub-agent, prompts ending inside and at the end of earlier ones. A repeat of a page-aligned
  // prompt that was computed and cached whole (with its end snapshot and decoder tail: bounded,
  // as the server's decoder policy is auto and the prompt is longer than W) hits all of it.
  for (session::RestorePolicy policy :
       {session::RestorePolicy::kRecompute, session::RestorePolicy::kReplay, session::RestorePolicy::kStaircase}) {
    CAPTURE(server::RestorePolicyName(policy));
    LiveServer server(policy);
    const json report = RunLive(server, "profile_live/live_agree.json");
    const std::vector<int64_t> live = LiveHits(report), sim = SimulatedHits(report);
    INFO("live: ", Show(live), "; simulated: ", Show(sim));
    REQUIRE(live.size() == 13);
    CHECK(live == sim);
    CHECK(report["live"]["errors"] == 0);
    const json& a = report["live"]["agreement"];
    CHECK(a["equal_hit_tokens"] == 13);
    CHECK(a["simulated_hit_tokens"] == a["live_hit_tokens"]);
    // Not a vacuous agreement: most prompt tokens are hits.
    CHECK(a["live_hit_tokens"].get<int64_t>() > 5000);
    // Request 1 repeats request 0 (256 tokens, a miss, so computed fresh and cached whole with its
    // tail under every policy): the whole prompt, under every restore policy.
    CHECK(live[1] == 256);
    // Request 12 repeats request 11 (1,536 tokens). Under recompute and staircase request 11
    // restored exactly and cached its whole prompt with a tail: 1,536. Under replay it ran Encoder
    // SWA Bounded Replay, so it cached nothing past its replayed prefix and no snapshot: request
    // 12 finds what request 11 found.
    if (policy == session::RestorePolicy::kReplay)
      CHECK(live[12] == live[11]);
    else
      CHECK(live[12] == 1536);
  }
}

TEST_CASE("live: concurrent requests on the trace's compressed timing all get answers") {
  LiveServer server(session::RestorePolicy::kRecompute);
  const json report = RunLive(server, "profile_live/live_agree.json", profile::LiveOptions{.time_scale = 0.01, .concurrency = 3});
  CHECK(report["live"]["answered"] == 13);
  CHECK(report["live"]["options"]["concurrency"] == 3);
  // Request 12 is sent no earlier than 11 s of trace time * 0.01.
  CHECK(report["requests"][12]["live"]["sent_s"].get<double>() >= 0.11 - 1e-3);
}

TEST_CASE("live: failed requests are counted and reported, and the run goes on") {
  LiveServer server(session::RestorePolicy::kRecompute);
  const json report = RunLive(server, "profile_live/live_errors.json");  // request 1 is longer than max_seq_len
  const json& l = report["live"];
  CHECK(l["requests"] == 3);
  CHECK(l["answered"] == 2);
  CHECK(l["errors"] == 1);
  CHECK(l["errors_by_status"]["400"] == 1);
  REQUIRE(l["first_errors"].size() == 1);
  CHECK(l["first_errors"][0]["i"] == 1);
  CHECK(l["first_errors"][0]["error"].get<std::string>().find("max_seq_len") != std::string::npos);
  CHECK(report["requests"][2]["live"]["cached_tokens"] == 128);
}

TEST_CASE("live: when the server would refuse every request, the run stops before sending, saying why") {
  LiveServer server(session::RestorePolicy::kRecompute);
  const std::string dir = TempDir("profile-live-too-long");
  {
    std::ofstream f(dir + "/too_long.json");
    f << R"({"id": "too_long", "block_size": 64, "requests": [
      {"t": 0, "in": 5000, "out": 4, "hash_ids": [1]}, {"t": 1, "in": 6000, "out": 4, "hash_ids": [1]}]})";
  }
  profile::ProfileOptions o;
  o.traces = {dir + "/too_long.json"};
  o.out = dir + "/out";
  o.plots = false;
  o.progress = 0;
  o.live = true;
  const profile_live::ServerAddress address{"unix:" + server.http->unix_path(), ""};
  o.live_driver = [address](std::ostream& log) { return profile_live::ConnectLiveDriver(address, {}, log); };
  std::ostringstream log;
  CHECK_THROWS_WITH_AS(profile::RunProfile(o, log), doctest::Contains("every one of the 2 requests"), std::runtime_error);
  CHECK_THROWS_WITH_AS(profile::RunProfile(o, log), doctest::Contains("max_seq_len"), std::runtime_error);
}

TEST_CASE("live: --live-max-tokens caps the simulated outputs too, and both still agree") {
  LiveServer server(session::RestorePolicy::kRecompute);
  const json report = RunLive(server, "profile_live/live_agree.json", profile::LiveOptions{.max_tokens = 1});
  REQUIRE(report["requests"].size() == 13);
  int64_t capped = 0;
  for (const json& r : report["requests"]) {
    CHECK(r["output_tokens"].get<int64_t>() <= 1);
    CHECK(r["live"]["output_tokens"].get<int64_t>() <= 1);
    capped += r["output_tokens"].get<int64_t>();
  }
  CHECK(capped > 0);  // the trace's outputs are longer than 1: each was cut to 1, not dropped
  CHECK(report["live"]["agreement"]["equal_hit_tokens"] == 13);
}

TEST_CASE("live: a server that cannot be reached is a clear error") {
  std::ostringstream log;
  const std::string path = TempDir("profile-live-none") + "/nobody.sock";
  CHECK_THROWS_WITH_AS(profile_live::ConnectLiveDriver({"unix:" + path, ""}, {}, log),
                       doctest::Contains(("cannot reach cedar serve at unix:" + path).c_str()), std::runtime_error);
  CHECK_THROWS_AS(profile_live::ConnectLiveDriver({"https://example.com:1", ""}, {}, log), std::invalid_argument);
}

}  // namespace cedar::test
