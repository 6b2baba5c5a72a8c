// cedar profile: arrival models, the ideal hit rate, block-id scopes, --limit and the sizes of the
// deployed KV precision, on synthetic traces whose expected numbers are worked out here.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>

#include <fmt/format.h>

#include "engine/engine.h"
#include "profile/arrival.h"
#include "profile/ideal.h"
#include "profile/kv_bytes.h"
#include "profile/profile.h"

namespace cedar::profile {
namespace {

namespace fs = std::filesystem;

std::string Dir(const std::string& name) {
  const std::string d = std::string(CEDAR_BINARY_DIR) + "/profile_arrival_test/" + name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

void Write(const std::string& path, const std::string& text) {
  std::ofstream f(path);
  f << text;
  REQUIRE(f.good());
}

// Three conversations (64-token blocks; times in seconds from each file's start):
//   a: requests at 0, 10, 30; a sub-agent at 5 with requests at +0 and +4 (5 and 9): duration 30
//   b: requests at 0, 20: duration 20
//   c: requests at 0, 5: duration 5
std::string ThreeConversations() {
  const std::string d = Dir("three");
  Write(d + "/a.json", R"({"id": "a", "requests": [
    {"t": 0, "in": 64, "out": 1, "hash_ids": [1]},
    {"t": 5, "type": "subagent", "agent_id": "s", "requests": [
      {"t": 0, "in": 64, "out": 1, "hash_ids": [1]}, {"t": 4, "in": 128, "out": 1, "hash_ids": [1, 2]}]},
    {"t": 10, "in": 128, "out": 1, "hash_ids": [1, 3]},
    {"t": 30, "in": 192, "out": 1, "hash_ids": [1, 3, 4]}]})");
  Write(d + "/b.json", R"({"id": "b", "requests": [
    {"t": 0, "in": 64, "out": 1, "hash_ids": [1]}, {"t": 20, "in": 128, "out": 1, "hash_ids": [1, 2]}]})");
  Write(d + "/c.json", R"({"id": "c", "requests": [
    {"t": 0, "in": 64, "out": 1, "hash_ids": [1]}, {"t": 5, "in": 128, "out": 1, "hash_ids": [1, 2]}]})");
  return d;
}

// "session@t" for every request in order.
std::vector<std::string> Order(const Trace& t) {
  std::vector<std::string> v;
  for (const TraceRequest& r : t.requests) v.push_back(r.session + "@" + std::to_string(int(std::lround(r.t))));
  return v;
}

// Independently of ActiveOverTime: the largest number of conversations whose [first, last)
// request interval contains a point, checked at every start.
int MaxActive(const Trace& t) {
  std::map<uint32_t, std::pair<double, double>> span;
  for (const TraceRequest& r : t.requests) {
    auto [it, fresh] = span.emplace(r.conversation, std::pair{r.t, r.t});
    it->second.first = std::min(it->second.first, r.t);
    it->second.second = std::max(it->second.second, r.t);
  }
  int most = 0;
  for (const auto& [id, s] : span) {
    int k = 0;
    for (const auto& [id2, s2] : span) k += s2.first <= s.first && s.first < s2.second;
    most = std::max(most, k);
  }
  return most;
}

}  // namespace

TEST_CASE("arrival recorded: every file starts at 0; sub-agents at their parent's time plus their own") {
  Trace t = LoadTraces({ThreeConversations()}, LoadOptions{});
  const auto spans = ApplyArrival(ParseArrival("recorded", 0), &t);
  REQUIRE(spans.size() == 3);
  for (const ConversationSpan& s : spans) CHECK(s.start == 0);
  CHECK(spans[0].duration == 30);
  CHECK(spans[0].has_subagents);
  CHECK(Order(t) == std::vector<std::string>{"a@0", "b@0", "c@0", "a/s@5", "c@5", "a/s@9", "a@10", "b@20", "a@30"});
  CHECK(t.requests[3].subagent);
  CHECK_FALSE(t.requests[4].subagent);
  CHECK(MaxActive(t) == 3);
}

TEST_CASE("arrival concurrency:1 runs the files one after another; concurrency:2 starts c when b ends") {
  const std::string dir = ThreeConversations();
  Trace one = LoadTraces({dir}, LoadOptions{});
  ApplyArrival(ParseArrival("concurrency:1", 0), &one);
  // a on [0, 30], b on [30, 50], c on [50, 55]: each file whole, in file order.
  CHECK(Order(one) == std::vector<std::string>{"a@0", "a/s@5", "a/s@9", "a@10", "a@30", "b@30", "b@50", "c@50", "c@55"});
  CHECK(MaxActive(one) == 1);
  // The same requests as each file replayed alone, one after another, each with its own timing.
  std::vector<std::string> sequential;
  double offset = 0;
  for (const char* f : {"a.json", "b.json", "c.json"}) {
    Trace alone = LoadTraces({dir + "/" + f}, LoadOptions{});
    double last = 0;
    for (const TraceRequest& r : alone.requests) {
      sequential.push_back(r.source + "@" + std::to_string(r.t + offset));
      last = std::max(last, r.t);
    }
    offset += last;
  }
  std::vector<std::string> got;
  for (const TraceRequest& r : one.requests) got.push_back(r.source + "@" + std::to_string(r.t));
  CHECK(got == sequential);

  Trace two = LoadTraces({dir}, LoadOptions{});
  const auto spans = ApplyArrival(ParseArrival("concurrency:2", 0), &two);
  CHECK(spans[2].start == 20);  // b ends at 20, before a (30)
  CHECK(Order(two) == std::vector<std::string>{"a@0", "b@0", "a/s@5", "a/s@9", "a@10", "b@20", "c@20", "c@25", "a@30"});
  CHECK(MaxActive(two) == 2);
}

TEST_CASE("arrival concurrency:N never has more than N active, and keeps N busy while conversations wait") {
  // 60 conversations of random lengths (1 to 6 requests, gaps of 1 to 50 s).
  const std::string d = Dir("many");
  std::mt19937 rng(5);
  for (int f = 0; f < 60; ++f) {
    std::string s = "{\"requests\": [";
    const int n = 1 + int(rng() % 6);
    int t = 0;
    for (int i = 0; i < n; ++i) {
      s += (i ? "," : "") + std::string("{\"t\": ") + std::to_string(t) + ", \"in\": 64, \"out\": 1, \"hash_ids\": [1]}";
      t += 1 + int(rng() % 50);
    }
    Write(d + "/" + std::to_string(100 + f) + ".json", s + "]}");
  }
  for (int n : {1, 3, 8}) {
    Trace t = LoadTraces({d}, LoadOptions{});
    const auto spans = ApplyArrival(ParseArrival("concurrency:" + std::to_string(n), 0), &t);
    CHECK(MaxActive(t) <= n);
    int peak = 0;
    for (const auto& [time, k] : ActiveOverTime(spans)) peak = std::max(peak, k);
    CHECK(peak <= n);
    // Work-conserving: the first n start at 0, every later one exactly when an earlier one ends.
    for (size_t i = 0; i < spans.size(); ++i) {
      if (i < size_t(n)) {
        CHECK(spans[i].start == 0);
        continue;
      }
      bool at_an_end = false;
      for (size_t j = 0; j < i; ++j) at_an_end |= spans[j].start + spans[j].duration == spans[i].start;
      CHECK(at_an_end);
    }
    for (size_t i = 1; i < t.requests.size(); ++i) CHECK(t.requests[i - 1].t <= t.requests[i].t);
  }
}

TEST_CASE("arrival poisson:R: seeded exponential gaps of mean 60/R s; conversations keep their timing") {
  Trace t = LoadTraces({ThreeConversations()}, LoadOptions{});
  const auto spans = ApplyArrival(ParseArrival("poisson:2", 42), &t);
  // The gaps recomputed here: mt19937_64(42), u = top 53 bits, gap = -ln(1 - u)·60/2.
  std::mt19937_64 rng(42);
  double expect = 0;
  for (size_t i = 0; i < 3; ++i) {
    if (i > 0) expect += -std::log(1.0 - double(rng() >> 11) / 9007199254740992.0) * 30.0;
    CHECK(spans[i].start == doctest::Approx(expect).epsilon(1e-12));
  }
  for (const TraceRequest& r : t.requests) {
    CHECK(r.t == doctest::Approx(spans[r.conversation - 1].start + r.recorded_t));  // conversations are files 1..3
  }
  // The sub-agent moves with its parent: a/s at a's start + 5 and + 9.
  for (const TraceRequest& r : t.requests) {
    if (r.subagent) CHECK((r.t - spans[0].start == doctest::Approx(5) || r.t - spans[0].start == doctest::Approx(9)));
  }
  CHECK(PoissonStarts(3, 2, 42) == PoissonStarts(3, 2, 42));
  CHECK(PoissonStarts(3, 2, 42) != PoissonStarts(3, 2, 43));
  // Over many conversations the mean gap is 60/R (for this seed within 3%).
  const std::vector<double> s = PoissonStarts(4001, 6.0, 7);
  CHECK(s.back() / 4000 == doctest::Approx(10.0).epsilon(0.03));
}

TEST_CASE("arrival values: unknown ones are errors naming them") {
  CHECK_THROWS_WITH_AS(ParseArrival("poison:3", 0), doctest::Contains("'poison:3'"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(ParseArrival("poisson:-1", 0), doctest::Contains("-1"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(ParseArrival("concurrency:0", 0), doctest::Contains("'concurrency:0'"), std::invalid_argument);
  CHECK_THROWS_AS(ParseArrival("concurrency", 0), std::invalid_argument);
  CHECK_THROWS_AS(ParseArrival("recorded:1", 0), std::invalid_argument);
  CHECK(ArrivalName(ParseArrival("poisson:2.5", 0)) == "poisson:2.5");
  CHECK(ArrivalName(ParseArrival("concurrency:8", 0)) == "concurrency:8");
}

namespace {

// A trace with shared system prompts, a sub-agent, exact repeats of page-aligned prompts and a
// follow-up that extends an earlier prompt (tiny preset: pages of 16, W = 8).
std::string IdealTrace() {
  const std::string d = Dir("ideal");
  Write(d + "/x.json", R"({"id": "x", "requests": [
    {"t": 0, "in": 128, "out": 10, "hash_ids": [1, 2]},
    {"t": 1, "in": 200, "out": 5, "hash_ids": [1, 2, 3]},
    {"t": 1.5, "type": "subagent", "agent_id": "s", "requests": [
      {"t": 0, "in": 100, "out": 3, "hash_ids": [1, 9]}, {"t": 1, "in": 100, "out": 3, "hash_ids": [1, 9]}]},
    {"t": 2, "in": 128, "out": 4, "hash_ids": [1, 2]},
    {"t": 3, "in": 250, "out": 7, "hash_ids": [1, 2, 3, 4]}]})");
  Write(d + "/y.json", R"({"id": "y", "requests": [
    {"t": 0, "in": 64, "out": 0, "hash_ids": [1]},
    {"t": 4, "in": 64, "out": 2, "hash_ids": [1]},
    {"t": 5, "in": 90, "out": 2, "hash_ids": [1, 5]}]})");
  return d;
}

// The ideal by brute force: request i's hit is the longest page-aligned common prefix of its first
// n - 1 tokens with any earlier request's prompt + output, or n for a page-aligned prompt equal to
// an earlier prompt (no prompt here ends inside the page after such a prompt, so its snapshot keeps
// its decoder tail). Decoder-only: the whole prompt, in blocks.
struct Brute {
  std::vector<int64_t> cedar, decoder_only;
};
Brute BruteIdeal(const Trace& t, const TokenSynth& synth, size_t page) {
  std::vector<std::vector<int32_t>> prompts, fulls;
  Brute b;
  for (const TraceRequest& r : t.requests) {
    std::vector<int32_t> p, o;
    synth.Prompt(r, &p);
    synth.Output(r, &o);
    const size_t n = p.size();
    size_t best = 0, best_dec = 0;
    bool repeat = false;
    for (size_t j = 0; j < fulls.size(); ++j) {
      size_t k = 0;
      while (k < n && k < fulls[j].size() && fulls[j][k] == p[k]) ++k;
      best = std::max(best, std::min(k, n - 1) / page * page);
      best_dec = std::max(best_dec, k / page * page);
      repeat |= n % page == 0 && prompts[j] == p;
    }
    b.cedar.push_back(int64_t(repeat ? n : best));
    b.decoder_only.push_back(int64_t(best_dec));
    prompts.push_back(p);
    std::vector<int32_t> f = p;
    f.insert(f.end(), o.begin(), o.end());
    fulls.push_back(f);
  }
  return b;
}

SimConfig Unbounded() {
  SimConfig c;
  REQUIRE(PresetConfig("tiny", &c.model));
  c.ram_budget = 1ull << 40;
  c.threads = 1;
  return c;  // staircase restore, auto decoder: everything is cached
}

}  // namespace

TEST_CASE("the ideal equals a brute-force computation, and Cedar with an unbounded budget equals it request by request") {
  for (const char* arrival : {"recorded", "concurrency:1"}) {
    CAPTURE(arrival);
    Trace t = LoadTraces({IdealTrace()}, LoadOptions{});
    ApplyArrival(ParseArrival(arrival, 0), &t);
    const SimConfig cfg = Unbounded();
    const TokenSynth synth(0, cfg.model.vocab_size);
    const Brute brute = BruteIdeal(t, synth, cfg.page_tokens);
    if (std::string(arrival) == "recorded") {
      // By hand, in arrival order x0 y0 x1 x/s0 x3 x/s1 x4 y1 y2: x1 extends x0 (128 of 199), x/s0
      // shares block 1 (64), x3 repeats x0 (all 128), x/s1 repeats x/s0 but is not page-aligned
      // (99 -> 96), x4 extends x1 (192), y1 repeats y0 (64), y2 shares y's block 1 (64); y's ids
      // equal x's but live in another scope, so y0 hits nothing.
      CHECK(brute.cedar == std::vector<int64_t>{0, 0, 128, 64, 128, 96, 192, 64, 64});
    }
    IdealDriver ideal(cfg);
    Replay(t, synth, ideal);
    CHECK(ideal.cedar_hits() == brute.cedar);
    CHECK(ideal.decoder_only_hits() == brute.decoder_only);
    Simulation sim(cfg);
    Replay(t, synth, sim);
    std::vector<int64_t> cedar, dec;
    for (const Outcome& o : sim.runs()[0].outcomes) cedar.push_back(o.hit());
    for (const Outcome& o : sim.runs()[1].outcomes) dec.push_back(o.hit());
    CHECK(cedar == brute.cedar);
    CHECK(dec == brute.decoder_only);
    // The trace exercises every rule: a repeat (x's third prompt, 128 tokens), an extension, a
    // sub-agent sharing its parent's first block, and y's blocks that equal x's ids but not tokens.
    CHECK(std::count(brute.cedar.begin(), brute.cedar.end(), 128) >= 1);
    CHECK(sim.runs()[0].totals.tail_hits >= 1);
  }
}

TEST_CASE("the report's ideal hit rate equals the brute-force one, per conversation type too") {
  ProfileOptions o;
  o.traces = {IdealTrace()};
  o.preset = "tiny";
  o.out = std::string(CEDAR_BINARY_DIR) + "/profile_arrival_test/report";
  o.plots = false;
  o.progress = 0;
  o.sweep_auto = true;
  std::ostringstream log;
  const ProfileResult r = RunProfile(o, log);
  Trace t = LoadTraces({IdealTrace()}, LoadOptions{});
  ApplyArrival(ParseArrival("recorded", 0), &t);
  const Brute brute = BruteIdeal(t, TokenSynth(0, 512), 16);
  int64_t prompt = 0, hit = 0, sub_prompt = 0, sub_hit = 0;
  for (size_t i = 0; i < t.requests.size(); ++i) {
    prompt += t.requests[i].input_tokens;
    hit += brute.cedar[i];
    if (t.requests[i].subagent) {
      sub_prompt += t.requests[i].input_tokens;
      sub_hit += brute.cedar[i];
    }
  }
  CHECK(r.report["ideal"]["cedar"]["hit_tokens"] == hit);
  CHECK(r.report["ideal"]["cedar"]["hit_rate"].get<double>() == doctest::Approx(double(hit) / double(prompt)));
  CHECK(r.report["by_conversation_type"]["subagent"]["requests"] == 2);
  CHECK(r.report["by_conversation_type"]["subagent"]["ideal_hit_rate"].get<double>() ==
        doctest::Approx(double(sub_hit) / double(sub_prompt)));
  // The main budget (16 GiB) never evicts here: Cedar's hit rate is the ideal.
  CHECK(r.report["designs"]["cedar"]["hit_rate"].get<double>() == doctest::Approx(double(hit) / double(prompt)));
  // The summary says the arrival model and the ideal first.
  const std::string summary = SummaryTable(r.report);
  CHECK(summary.rfind("arrival recorded (the default", 0) == 0);
  CHECK(summary.find(fmt::format("ideal hit rate {:.3f}", double(hit) / double(prompt))) != std::string::npos);
  // --sweep-ram auto: eight powers of two, the largest at or above the ideal working set, where
  // Cedar has reached the ideal.
  const uint64_t ws = r.report["ideal"]["working_set_bytes"]["cedar"].get<uint64_t>();
  const std::vector<uint64_t> budgets = AutoSweepBudgets(ws);
  REQUIRE(budgets.size() == 8);
  CHECK(budgets.back() >= ws);
  CHECK((budgets.back() == (1ull << 20) || budgets.back() / 2 < ws));
  CHECK(!r.report["working_set"]["cedar_reaches_ideal_at"].is_null());
  CHECK(r.report["working_set"]["cedar_reaches_ideal_at"].get<uint64_t>() <= budgets.back());
}

TEST_CASE("mooncake files each get their own block-id scope: equal ids in two files never hit each other") {
  const std::string d = Dir("mooncake2");
  const std::string lines = "{\"timestamp\": 0, \"input_length\": 1024, \"output_length\": 1, \"hash_ids\": [0, 1]}\n"
                            "{\"timestamp\": 10, \"input_length\": 1100, \"output_length\": 1, \"hash_ids\": [0, 1, 2]}\n";
  Write(d + "/one.jsonl", lines);
  Write(d + "/two.jsonl", lines);
  Trace both = LoadTraces({d + "/one.jsonl", d + "/two.jsonl"}, LoadOptions{});
  Trace alone = LoadTraces({d + "/one.jsonl"}, LoadOptions{});
  REQUIRE(both.requests.size() == 4);
  CHECK(both.requests[0].scope != both.requests[1].scope);  // one@0, two@0
  const SimConfig cfg = Unbounded();
  IdealDriver i2(cfg), i1(cfg);
  Replay(both, TokenSynth(0, cfg.model.vocab_size), i2);
  Replay(alone, TokenSynth(0, cfg.model.vocab_size), i1);
  int64_t h2 = 0, h1 = 0;
  for (int64_t h : i2.cedar_hits()) h2 += h;
  for (int64_t h : i1.cedar_hits()) h1 += h;
  CHECK(h1 == 1024);  // the second request extends the first
  CHECK(h2 == 2 * h1);  // and nothing more: the files do not share blocks
}

TEST_CASE("--limit stops reading after N requests, in file order") {
  const std::string dir = ThreeConversations();
  const Trace t = LoadTraces({dir}, LoadOptions{.limit = 4});
  CHECK(t.requests.size() == 4);
  CHECK(t.files.size() == 1);  // a.json alone holds 5 requests: b.json and c.json are never opened
  for (const TraceRequest& r : t.requests) CHECK(r.session.rfind("a", 0) == 0);
  CHECK(LoadTraces({dir}, LoadOptions{.limit = 6}).files.size() == 2);
  CHECK(LoadTraces({dir}, LoadOptions{}).requests.size() == 9);
}

TEST_CASE("KV sizes as deployed: the flash preset's released precision is 890 bytes per token") {
  ModelConfig flash;
  REQUIRE(PresetConfig("flash", &flash));
  CHECK(MainEntryBytes(KvDtype::kReleased, 512) == 288);  // 256 B of FP4 + 32 E4M3 scales
  CHECK(IndexKeyBytes(KvDtype::kReleased, 128) == 68);    // 64 B of MXFP4 + 4 UE8M0 scales
  CHECK(WindowRowBytes(KvDtype::kReleased, 512) == 528);  // FP8 + 16 UE8M0 scales
  CHECK(CedarBytesPerToken(flash, KvDtype::kReleased) == 890);  // 3·½·356 + 356
  CHECK(CedarBytesPerToken(flash, KvDtype::kF32) == 6400);      // engine/info.h's F32 figure
  CHECK(DecoderOnlyBytesPerToken(flash, KvDtype::kF32) == 81920);
  CHECK(DecoderOnlyBytesPerToken(flash, KvDtype::kFp8) == 40 * 528);
  CHECK(DecoderOnlyBytesPerToken(flash, KvDtype::kBf16) == 40 * 1024);
  // A snapshot row: 20 encoder window rows of FP8 + one BF16 H_E row.
  CHECK(SnapshotRowBytes(flash, KvDtype::kReleased) == 20 * 528 + 5120 * 2);
  ProfileOptions o;  // defaults: auto
  const KvPrecision kv = ResolveKvPrecision(o, flash, "preset flash");
  CHECK(kv.cedar == KvDtype::kReleased);
  CHECK(kv.decoder_only == KvDtype::kFp8);
  ModelConfig tiny;
  REQUIRE(PresetConfig("tiny", &tiny));
  CHECK(ResolveKvPrecision(o, tiny, "preset tiny").cedar == KvDtype::kF32);  // research shapes stay F32
  CHECK(ResolveKvPrecision(o, tiny, "preset tiny").decoder_only == KvDtype::kF32);
  o.kv_dtype = "fp4";
  CHECK_THROWS_WITH_AS(ResolveKvPrecision(o, tiny, "preset tiny"), doctest::Contains("'fp4'"), std::invalid_argument);
  CHECK(FormatBudget(512ull << 20) == "512 MiB");
  CHECK(FormatBudget(16ull << 30) == "16 GiB");
  CHECK(FormatBudget(3ull << 29) == "1.5 GiB");
}

}  // namespace cedar::profile
