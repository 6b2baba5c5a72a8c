// cedar profile --servers N: the cluster simulation against what it must reduce to. One server is
// the single-server Cedar design request by request; session routing over an unbounded shared
// tier serves what one server that never evicts would (an independent computation here, a set of
// page-prefix digests); random routing without a shared tier loses hits that session routing keeps.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <sstream>
#include <unordered_set>

#include <xxhash.h>

#include "engine/engine.h"
#include "profile/cluster.h"
#include "profile/profile.h"

namespace cedar::profile {
namespace {

const std::string kData = std::string(CEDAR_SOURCE_DIR) + "/tests/data/profile/";

// A trace of `sessions` agent conversations, interleaved turn by turn: every prompt starts with
// one shared system block (id 1), then the session's own blocks; turn k of a session repeats its
// turn k - 1 blocks and adds two, with a ragged tail of 9 unique tokens (so prompts are not
// page-aligned and the n - 1 rule matters).
Trace SessionsTrace(int sessions, int turns) {
  Trace t;
  t.files = {"synthetic"};
  t.formats = {"claude-code"};
  size_t seq = 0;
  for (int k = 0; k < turns; ++k) {
    for (int s = 0; s < sessions; ++s) {
      TraceRequest r;
      r.t = double(k * sessions + s);
      r.recorded_t = r.t;
      r.session = "sess-" + std::to_string(s);
      r.conversation = uint32_t(s);
      r.seq = seq++;
      r.source = "synthetic: session " + std::to_string(s) + " turn " + std::to_string(k);
      r.scope = 1;
      r.block_size = 64;
      r.block_ids.push_back(1);
      for (int b = 0; b < 2 * (k + 1); ++b) r.block_ids.push_back(1000 * (s + 1) + b);
      r.input_tokens = int64_t(r.block_ids.size()) * 64 + 9;
      r.output_tokens = 20;
      t.requests.push_back(std::move(r));
    }
  }
  return t;
}

SimConfig TinyConfig(uint64_t ram_budget) {
  SimConfig c;
  REQUIRE(PresetConfig("tiny", &c.model));
  c.page_tokens = 16;
  c.block_tokens = 16;
  c.ram_budget = ram_budget;
  c.threads = 1;
  return c;
}

struct Both : ReplayDriver {
  Simulation& sim;
  ClusterSim& cluster;
  Both(Simulation& s, ClusterSim& c) : sim(s), cluster(c) {}
  void Submit(const ReplayRequest& r) override {
    sim.Submit(r);
    cluster.Submit(r);
  }
  void Finish() override { sim.Finish(); }
};

ClusterTotals RunCluster(const Trace& trace, const SimConfig& cfg, ClusterConfig cc) {
  ClusterSim cluster(cfg, cc);
  Replay(trace, TokenSynth(0, cfg.model.vocab_size), cluster);
  return cluster.totals();
}

}  // namespace

TEST_CASE("the shared tier is an LRU of content keys under a byte budget") {
  SharedTierSim s(25);
  s.Put(1, 10);
  s.Put(2, 10);
  CHECK(s.Get(1));  // 1 is now the most recent
  s.Put(3, 10);     // 30 > 25: the least recent (2) goes
  CHECK(s.Get(1));
  CHECK_FALSE(s.Get(2));
  CHECK(s.Get(3));
  CHECK(s.used() == 20);
  CHECK(s.evictions() == 1);
  s.Put(4, 26);  // larger than the whole tier: refused, nothing evicted
  CHECK_FALSE(s.Get(4));
  CHECK(s.evictions() == 1);
}

TEST_CASE("one server is the single-server run, request by request, with and without evictions") {
  const Trace trace = SessionsTrace(4, 6);
  // 6144 bytes per page or snapshot on tiny (profile_sim_test): 40 slots evict, 1 GiB does not.
  for (uint64_t ram : {uint64_t(40 * 6144), uint64_t(1) << 30}) {
    CAPTURE(ram);
    const SimConfig cfg = TinyConfig(ram);
    Simulation sim(cfg);
    ClusterSim cluster(cfg, ClusterConfig{1, Routing::kRandom, 0, 7});
    Both both(sim, cluster);
    Replay(trace, TokenSynth(0, cfg.model.vocab_size), both);
    const DesignRun& one = sim.runs()[0];
    REQUIRE(one.design == Design::kCedar);
    REQUIRE(cluster.outcomes().size() == one.outcomes.size());
    for (size_t i = 0; i < one.outcomes.size(); ++i) {
      CAPTURE(i);
      CHECK(cluster.outcomes()[i].server == 0);
      CHECK(cluster.outcomes()[i].hit_ram == one.outcomes[i].hit_ram);
      CHECK(cluster.outcomes()[i].hit_disk == one.outcomes[i].hit_disk);
      CHECK(cluster.outcomes()[i].hit_shared == 0);
    }
    CHECK(cluster.totals().hit_ram == one.totals.hit_ram);
    CHECK(cluster.totals().prompt_tokens == one.totals.prompt_tokens);
    if (ram < (1u << 20)) CHECK(one.counters.pages_dropped > 0);  // the small budget did evict
  }
}

TEST_CASE("session routing over an unbounded shared tier serves what one server that never evicts would") {
  const Trace trace = SessionsTrace(6, 5);
  const SimConfig cfg = TinyConfig(30 * 6144);  // small local tiers: they evict, the shared tier serves
  ClusterSim cluster(cfg, ClusterConfig{3, Routing::kSession, uint64_t(1) << 50, 0});
  const TokenSynth synth(0, cfg.model.vocab_size);
  Replay(trace, synth, cluster);

  // Independently: the longest page-aligned prefix of the prompt's first n - 1 tokens that any
  // earlier request's prompt + output began with. Cedar also serves an exact repeat of a
  // page-aligned prompt whole (n tokens): within one page of this.
  const size_t P = cfg.page_tokens;
  std::unordered_set<uint64_t> seen;
  std::vector<int32_t> prompt, output, full;
  int64_t ideal_total = 0;
  std::set<int> servers;
  for (size_t i = 0; i < trace.requests.size(); ++i) {
    synth.Prompt(trace.requests[i], &prompt);
    synth.Output(trace.requests[i], &output);
    full = prompt;
    full.insert(full.end(), output.begin(), output.end());
    std::vector<uint64_t> chain;
    uint64_t h = 0;
    for (size_t end = P; end <= full.size(); end += P) {
      h = XXH3_64bits_withSeed(full.data() + end - P, P * sizeof(int32_t), h ^ 0x5bd1e995);
      chain.push_back(h);
    }
    int64_t ideal = 0;
    while (size_t(ideal) + P <= prompt.size() - 1 && seen.count(chain[size_t(ideal) / P])) ideal += int64_t(P);
    for (uint64_t c : chain) seen.insert(c);
    const ClusterOutcome& co = cluster.outcomes()[i];
    CAPTURE(i);
    CHECK(co.hit() >= ideal);
    CHECK(co.hit() <= ideal + int64_t(P));
    ideal_total += ideal;
    servers.insert(co.server);
  }
  const ClusterTotals& t = cluster.totals();
  CHECK(t.hit_shared > 0);  // the local tiers alone did not serve it
  CHECK(t.hit_ram + t.hit_disk + t.hit_shared >= ideal_total);
  CHECK(t.hit_ram + t.hit_disk + t.hit_shared <= ideal_total + int64_t(P * trace.requests.size()));
  CHECK(servers.size() >= 2);  // routing did spread the sessions
  // One session, one server.
  std::map<std::string, int> where;
  for (size_t i = 0; i < trace.requests.size(); ++i) {
    auto [it, fresh] = where.emplace(trace.requests[i].session, cluster.outcomes()[i].server);
    CHECK(it->second == cluster.outcomes()[i].server);
  }
}

TEST_CASE("random routing without a shared tier loses hits that session routing keeps") {
  const Trace trace = SessionsTrace(6, 6);
  const SimConfig cfg = TinyConfig(uint64_t(1) << 30);  // no eviction: only routing loses hits
  const ClusterTotals affine = RunCluster(trace, cfg, ClusterConfig{3, Routing::kSession, 0, 0});
  const ClusterTotals random = RunCluster(trace, cfg, ClusterConfig{3, Routing::kRandom, 0, 0});
  CHECK(random.hit_ram < affine.hit_ram);
  CHECK(random.hit_shared == 0);
  // With the shared tier, random routing gets them back from it.
  const ClusterTotals random_shared = RunCluster(trace, cfg, ClusterConfig{3, Routing::kRandom, uint64_t(1) << 30, 0});
  CHECK(random_shared.hit_shared > 0);
  CHECK(random_shared.hit_ram + random_shared.hit_shared >= affine.hit_ram);
}

TEST_CASE("cedar profile --servers reports hit rates per tier that add up, and refuses cluster flags without it") {
  ProfileOptions o;
  o.traces = {kData + "claude_small.json"};
  o.preset = "tiny";
  o.cache_ram = 20 * 6144;
  o.out = std::string(CEDAR_BINARY_DIR) + "/profile_cluster_test_report";
  o.plots = false;
  o.progress = 0;
  o.servers = 2;
  o.routing = "random";
  o.cache_remote_ram = 1 << 20;
  std::ostringstream log;
  const ProfileResult r = RunProfile(o, log);
  REQUIRE(r.report.contains("cluster"));
  const nlohmann::json& c = r.report["cluster"];
  CHECK(c["servers"] == 2);
  CHECK(c["routing"] == "random");
  const nlohmann::json& t = c["hit_tokens"];
  CHECK(t["local_ram"].get<int64_t>() + t["local_disk"].get<int64_t>() + t["shared"].get<int64_t>() +
            t["miss"].get<int64_t>() ==
        c["prompt_tokens"].get<int64_t>());
  CHECK(c["prompt_tokens"] == r.report["designs"]["cedar"]["prompt_tokens"]);
  CHECK(SummaryTable(r.report).find("cluster: 2 servers") != std::string::npos);
  std::ifstream html(r.files.html_path);
  const std::string page((std::istreambuf_iterator<char>(html)), std::istreambuf_iterator<char>());
  CHECK(page.find("<h2>Several servers</h2>") != std::string::npos);

  ProfileOptions bad = o;
  bad.servers = 0;
  CHECK_THROWS_WITH_AS(RunProfile(bad, log), doctest::Contains("--servers"), std::invalid_argument);
  bad = o;
  bad.routing = "sticky";
  CHECK_THROWS_WITH_AS(RunProfile(bad, log), doctest::Contains("found 'sticky'"), std::invalid_argument);
}

}  // namespace cedar::profile
