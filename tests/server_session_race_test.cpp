// Create, delete and turns on one session id from many threads: every outcome must fit one
// order of the calls (linearizable). The bug this guards against: a DELETE racing a create
// left a session that existed (GET 200) but answered every turn with 404.
#include <doctest/doctest.h>

#include <atomic>
#include <latch>
#include <set>
#include <random>
#include <thread>

#include "tests/server_fixture.h"

namespace cedar::test {
namespace {

using nlohmann::json;

enum Op { kCreate, kDelete, kTurn, kGet };

TEST_CASE("sessions: create, delete and turns racing on one id stay linearizable") {
  ApiFixture f;
  const std::string id = "race-1";
  const json create = {{"session_id", id}};
  const json turn = {{"session_id", id}, {"messages", json::array({{{"role", "user"}, {"content", "go"}}})},
                     {"max_tokens", 1}};
  constexpr int kRounds = 60, kThreads = 6, kOpsPerThread = 6;
  int rounds_alive = 0, turns_ok = 0;
  for (int round = 0; round < kRounds; ++round) {
    std::atomic<int> created{0}, deleted{0}, bad{0};
    std::latch start(kThreads);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        std::mt19937 rng(uint32_t(round * 100 + t));
        start.arrive_and_wait();
        for (int i = 0; i < kOpsPerThread; ++i) {
          const Op op = Op(rng() % 4);
          int status = 0;
          switch (op) {
            case kCreate:
              status = f.Post("/v1/sessions", create).status;
              if (status == 200) created++;
              else if (status != 409) bad++;
              break;
            case kDelete:
              status = f.Call("DELETE", "/v1/sessions/" + id).status;
              if (status == 200) deleted++;
              else if (status != 404 && status != 409) bad++;
              break;
            case kTurn:
              status = f.Post("/v1/chat/completions", turn).status;
              if (status != 200 && status != 404 && status != 409) bad++;
              break;
            case kGet:
              status = f.Call("GET", "/v1/sessions/" + id).status;
              if (status != 200 && status != 404) bad++;
              break;
          }
        }
      });
    }
    for (auto& th : threads) th.join();
    CAPTURE(round);
    CHECK(bad == 0);
    // Successful creates and deletes of one id alternate in any linear order, starting absent.
    const int alive = created - deleted;
    CHECK((alive == 0 || alive == 1));
    // Quiet now: what GET says, a turn, a DELETE and the list must agree with it.
    const int get = f.Call("GET", "/v1/sessions/" + id).status;
    CHECK(get == (alive == 1 ? 200 : 404));
    const json list = json::parse(f.Call("GET", "/v1/sessions").body)["data"];
    bool listed = false;
    for (const json& s : list) listed = listed || s["id"] == id;
    CHECK(listed == (get == 200));
    const int turned = f.Post("/v1/chat/completions", turn).status;
    CHECK(turned == (get == 200 ? 200 : 404));
    const int removed = f.Call("DELETE", "/v1/sessions/" + id).status;
    CHECK(removed == (get == 200 ? 200 : 404));
    CHECK(f.Call("GET", "/v1/sessions/" + id).status == 404);
    rounds_alive += get == 200;
    turns_ok += turned == 200;
  }
  MESSAGE(kRounds, " rounds; the session was alive at the end of ", rounds_alive, ", and its turn then answered 200 in ",
          turns_ok);
}

TEST_CASE("sessions: generated ids are 128 random bits, in the id alphabet") {
  ApiFixture f;
  std::set<std::string> ids;
  for (int i = 0; i < 50; ++i) {
    const json j = f.Ok("/v1/sessions", json::object());
    const std::string id = j["id"];
    CHECK(id.size() == 5 + 32);
    CHECK(id.rfind("sess_", 0) == 0);
    CHECK(id.find_first_not_of("0123456789abcdef", 5) == std::string::npos);
    CHECK(f.Call("GET", "/v1/sessions/" + id).status == 200);
    ids.insert(id);
  }
  CHECK(ids.size() == 50);
  // Ids that differ only in how the path spells them are the same session.
  f.Ok("/v1/sessions", {{"session_id", "a:b.c-d_e"}});
  CHECK(f.Call("GET", "/v1/sessions/a%3Ab%2Ec%2Dd%5Fe").status == 200);
  CHECK(f.Call("DELETE", "/v1/sessions/a%3ab.c-d_e").status == 200);
  CHECK(f.Call("GET", "/v1/sessions/a:b.c-d_e").status == 404);
  // The longest id is accepted everywhere; one more character nowhere.
  const std::string longest(128, 'L');
  f.Ok("/v1/sessions", {{"session_id", longest}});
  CHECK(f.Call("GET", "/v1/sessions/" + longest).status == 200);
  CHECK(f.Post("/v1/sessions", {{"session_id", longest + "L"}}).status == 400);
}

}  // namespace
}  // namespace cedar::test
