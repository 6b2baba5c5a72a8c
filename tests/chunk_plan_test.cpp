// PlanChunks (session/chunk_plan.h): how one mixed step's budget is shared among prefilling
// turns. Pure function: exact expected plans for small cases, and invariants over random ones.
#include <doctest/doctest.h>

#include <algorithm>
#include <limits>
#include <random>

#include "session/chunk_plan.h"
#include "session/step_cost.h"

using namespace cedar::session;
using Chunks = std::vector<std::vector<int64_t>>;

namespace {

// The chunk lengths of a plan (the decoder phases apart).
Chunks ChunksOf(const std::vector<StepShare>& p) {
  Chunks c;
  for (const StepShare& s : p) c.push_back(s.chunks);
  return c;
}
std::vector<bool> FinishOf(const std::vector<StepShare>& p) {
  std::vector<bool> f;
  for (const StepShare& s : p) f.push_back(s.finish);
  return f;
}
// Demands whose decoder phase costs `finish` rows (a large value keeps it out of the step).
std::vector<ChunkDemand> With(std::vector<ChunkDemand> d, int64_t finish) {
  for (ChunkDemand& x : d) x.finish_rows = finish;
  return d;
}

constexpr double kNoMs = std::numeric_limits<double>::infinity();

}  // namespace

TEST_CASE("fcfs: the first turn takes every chunk that fits before the next gets any") {
  const auto d = With({{0, 4096, 0}, {0, 100, 0}}, 1 << 20);
  CHECK(ChunksOf(PlanChunks(d, 512, 256, PrefillOrder::kFcfs)) == Chunks{{256, 256}, {}});
  // A later turn's smaller chunk still fills what the first one's next chunk cannot.
  CHECK(ChunksOf(PlanChunks(d, 400, 256, PrefillOrder::kFcfs)) == Chunks{{256}, {100}});
}

TEST_CASE("round-robin: one chunk each per round among equal priorities") {
  const auto d = With({{0, 4096, 0}, {0, 100, 0}, {40, 300, 0}}, 1 << 20);
  // Round 1: 256 + 100 + 256 (the third turn's chunk is cut from row 40) = 612 rows.
  CHECK(ChunksOf(PlanChunks(d, 612, 256, PrefillOrder::kRoundRobin)) == Chunks{{256}, {100}, {256}});
  // Round 2 goes on while chunks fit: 88 rows left, the third turn's last 4 rows fit.
  CHECK(ChunksOf(PlanChunks(d, 700, 256, PrefillOrder::kRoundRobin)) == Chunks{{256}, {100}, {256, 4}});
  CHECK(ChunksOf(PlanChunks(d, 2000, 256, PrefillOrder::kRoundRobin)) ==
        Chunks{{256, 256, 256, 256, 256, 256}, {100}, {256, 4}});
  // Chunks are cut from each turn's own position, whatever the order.
  const auto e = With({{1000, 1300, 0}}, 1 << 20);
  CHECK(ChunksOf(PlanChunks(e, 1000, 256, PrefillOrder::kRoundRobin)) == Chunks{{256, 44}});
}

TEST_CASE("round-robin: the turn that opens the rounds rotates from step to step") {
  // Budget 0: only a step's first item runs. Were the rounds always opened by the oldest turn,
  // the other two would wait for all of its chunks.
  const auto d = With({{0, 4096, 0}, {0, 100, 0}, {0, 300, 0}}, 1 << 20);
  CHECK(ChunksOf(PlanChunks(d, 0, 256, PrefillOrder::kRoundRobin, kNoMs, 0)) == Chunks{{256}, {}, {}});
  CHECK(ChunksOf(PlanChunks(d, 0, 256, PrefillOrder::kRoundRobin, kNoMs, 1)) == Chunks{{}, {100}, {}});
  CHECK(ChunksOf(PlanChunks(d, 0, 256, PrefillOrder::kRoundRobin, kNoMs, 5)) == Chunks{{}, {}, {256}});
  // A round goes on from there, wrapping: 100 + 256 + 256 rows fit in 700; in the next round the
  // third turn's last 44 rows fit and the first turn's next 256 do not.
  CHECK(ChunksOf(PlanChunks(d, 700, 256, PrefillOrder::kRoundRobin, kNoMs, 1)) == Chunks{{256}, {100}, {256, 44}});
  // A decoder phase priced above what its turn's chunk leaves still runs when its turn opens.
  const std::vector<ChunkDemand> e = {{0, 4096, 0, 1 << 20}, {100, 100, 0, 400}};
  CHECK(PlanChunks(e, 300, 256, PrefillOrder::kRoundRobin, kNoMs, 0) == std::vector<StepShare>{{{256}, false}, {{}, false}});
  CHECK(PlanChunks(e, 300, 256, PrefillOrder::kRoundRobin, kNoMs, 1) == std::vector<StepShare>{{{}, false}, {{}, true}});
  // Each priority group rotates on its own; a lower value is still planned first.
  const std::vector<ChunkDemand> p = With({{0, 50, -1}, {0, 4096, 0}, {0, 100, 0}}, 1 << 20);
  CHECK(ChunksOf(PlanChunks(p, 60, 256, PrefillOrder::kRoundRobin, kNoMs, 1)) == Chunks{{50}, {}, {}});
  CHECK(ChunksOf(PlanChunks(p, 150, 256, PrefillOrder::kRoundRobin, kNoMs, 1)) == Chunks{{50}, {}, {100}});
  // fcfs ignores it.
  CHECK(ChunksOf(PlanChunks(d, 0, 256, PrefillOrder::kFcfs, kNoMs, 1)) == Chunks{{256}, {}, {}});
}

TEST_CASE("the first item of a step always runs; nothing else past the budget") {
  const auto d = With({{0, 4096, 0}, {0, 10, 0}}, 1 << 20);
  for (PrefillOrder o : {PrefillOrder::kFcfs, PrefillOrder::kRoundRobin}) {
    CAPTURE(PrefillOrderName(o));
    CHECK(ChunksOf(PlanChunks(d, 0, 256, o)) == Chunks{{256}, {}});
    CHECK(ChunksOf(PlanChunks(d, -8, 256, o)) == Chunks{{256}, {}});
    CHECK(ChunksOf(PlanChunks(d, 100, 256, o)) == Chunks{{256}, {}});
    // A decoder phase larger than the budget runs when it is the step's first item.
    const std::vector<ChunkDemand> done = {{500, 500, 0, 900}, {0, 10, 0, 5}};
    const auto p = PlanChunks(done, 100, 256, o);
    CHECK(FinishOf(p) == std::vector<bool>{true, false});
    CHECK(ChunksOf(p) == Chunks{{}, {}});
  }
  CHECK(PlanChunks(std::vector<ChunkDemand>{}, 100, 16, PrefillOrder::kRoundRobin).empty());
}

TEST_CASE("the decoder phase follows the last chunk in the same step only if it fits") {
  for (PrefillOrder o : {PrefillOrder::kFcfs, PrefillOrder::kRoundRobin}) {
    CAPTURE(PrefillOrderName(o));
    // 300 rows left: 256 + 44, then a 128-row decoder phase: 428 rows.
    const std::vector<ChunkDemand> d = {{0, 300, 0, 128}};
    CHECK(PlanChunks(d, 428, 256, o) == std::vector<StepShare>{{{256, 44}, true}});
    CHECK(PlanChunks(d, 427, 256, o) == std::vector<StepShare>{{{256, 44}, false}});
    // The next step: nothing left to encode, the decoder phase alone.
    const std::vector<ChunkDemand> next = {{300, 300, 0, 128}};
    CHECK(PlanChunks(next, 10, 256, o) == std::vector<StepShare>{{{}, true}});
  }
  // Round-robin: the phase is a turn's item like a chunk (round 1: 100 + 256; round 2: the
  // first turn's 50-row phase does not fit in the 44 rows left, the second's last 44 do); fcfs
  // runs it before the next turn gets anything (then 256 does not fit in 250).
  const std::vector<ChunkDemand> two = {{0, 100, 0, 50}, {0, 300, 0, 50}};
  CHECK(PlanChunks(two, 400, 256, PrefillOrder::kRoundRobin) ==
        std::vector<StepShare>{{{100}, false}, {{256, 44}, false}});
  CHECK(PlanChunks(two, 400, 256, PrefillOrder::kFcfs) == std::vector<StepShare>{{{100}, true}, {{}, false}});
  CHECK(PlanChunks(two, 460, 256, PrefillOrder::kRoundRobin) == std::vector<StepShare>{{{100}, true}, {{256, 44}, false}});
}

TEST_CASE("a decoder phase in parts: a step takes as many of its layers as fit") {
  for (PrefillOrder o : {PrefillOrder::kFcfs, PrefillOrder::kRoundRobin}) {
    CAPTURE(PrefillOrderName(o));
    // Nothing left to encode; four layers of 10 rows each.
    const std::vector<ChunkDemand> d = {{300, 300, 0, 40, 0, 0, {10, 10, 10, 10}}};
    CHECK(PlanChunks(d, 25, 256, o) == std::vector<StepShare>{{{}, false, 2}});
    CHECK(PlanChunks(d, 40, 256, o) == std::vector<StepShare>{{{}, true, 4}});
    CHECK(PlanChunks(d, 0, 256, o) == std::vector<StepShare>{{{}, false, 1}});  // the first item always runs
    // After the last chunk, in the same step: 100 + 10 + 10 fit in 125, a third layer does not.
    const std::vector<ChunkDemand> end = {{0, 100, 0, 40, 0, 0, {10, 10, 10, 10}}};
    CHECK(PlanChunks(end, 125, 100, o) == std::vector<StepShare>{{{100}, false, 2}});
    // Predicted ms: 400 ms over 40 rows is 100 ms a layer; 250 ms take two.
    std::vector<ChunkDemand> timed = d;
    timed[0].finish_ms = 400;
    CHECK(PlanChunks(timed, 1000, 256, o, 250.0) == std::vector<StepShare>{{{}, false, 2}});
    // Layers of unequal cost (an exact staircase): 30 then 5 + 5 fit in 40 only from the front.
    const std::vector<ChunkDemand> stair = {{300, 300, 0, 45, 0, 0, {30, 5, 5, 5}}};
    CHECK(PlanChunks(stair, 40, 256, o) == std::vector<StepShare>{{{}, false, 3}});
  }
  // fcfs: the next turn gets what the phase's layers leave.
  const std::vector<ChunkDemand> two = {{300, 300, 0, 40, 0, 0, {10, 10, 10, 10}}, {0, 500, 0, 1 << 20}};
  CHECK(PlanChunks(two, 70, 30, PrefillOrder::kFcfs) == std::vector<StepShare>{{{}, true, 4}, {{30}, false, 0}});
}

TEST_CASE("round-robin: a lower priority value is planned whole before the next priority") {
  const auto d = With({{0, 600, -1}, {0, 600, 0}, {0, 50, 0}}, 1 << 20);
  CHECK(ChunksOf(PlanChunks(d, 700, 256, PrefillOrder::kRoundRobin)) == Chunks{{256, 256, 88}, {}, {50}});
  CHECK(ChunksOf(PlanChunks(d, 1000, 256, PrefillOrder::kRoundRobin)) == Chunks{{256, 256, 88}, {256}, {50}});
}

TEST_CASE("a budget in predicted ms: a costlier row (a longer prefix) takes fewer chunks per step") {
  for (PrefillOrder o : {PrefillOrder::kFcfs, PrefillOrder::kRoundRobin}) {
    // 2 ms a row early in a prompt, 2.5 late in it; 470 ms for the prefill items of the step.
    std::vector<ChunkDemand> early = With({{0, 16384, 0}}, 128), late = With({{15000, 16384, 0}}, 128);
    early[0].ms_per_row = 2.0;
    late[0].ms_per_row = 2.5;
    CHECK(ChunksOf(PlanChunks(early, 216, 96, o, 470.0)) == Chunks{{96, 96}});
    CHECK(ChunksOf(PlanChunks(late, 216, 96, o, 470.0)) == Chunks{{96}});
    CHECK(ChunksOf(PlanChunks(late, 216, 96, o)) == Chunks{{96, 96}});  // rows alone: both
    // The first item runs whatever the budget; a rate not measured yet (0) leaves rows to bind.
    CHECK(ChunksOf(PlanChunks(late, 216, 96, o, -5.0)) == Chunks{{96}});
    late[0].ms_per_row = 0;
    CHECK(ChunksOf(PlanChunks(late, 216, 96, o, 1.0)) == Chunks{{96, 96}});
    // The decoder phase after the last chunk: its own predicted ms.
    std::vector<ChunkDemand> end = With({{16300, 16384, 0}}, 128);
    end[0].ms_per_row = 2.0;
    end[0].finish_ms = 400;
    CHECK(PlanChunks(end, 216, 96, o, 480.0) == std::vector<StepShare>{{{84}, false}});
    CHECK(PlanChunks(end, 216, 96, o, 568.0) == std::vector<StepShare>{{{84}, true}});
  }
}

TEST_CASE("random demands: boundaries, budget and progress hold for both orders") {
  std::mt19937_64 rng(7);
  for (int it = 0; it < 2000; ++it) {
    const int n = int(rng() % 6);
    std::vector<ChunkDemand> d;
    int prio = -2;
    for (int i = 0; i < n; ++i) {
      prio += int(rng() % 3 == 0);
      const int64_t end = 1 + int64_t(rng() % 3000), next = int64_t(rng() % uint64_t(end + 1));
      d.push_back({next, end, prio, 1 + int64_t(rng() % 400), double(rng() % 4) * 0.5, double(rng() % 800)});
      if (rng() % 2) {  // a phase in parts: 1-12 layers that sum to finish_rows
        const int64_t k = 1 + int64_t(rng() % 12);
        d.back().finish_rows = std::max(d.back().finish_rows, k);
        for (int64_t j = 0; j < k; ++j) d.back().finish_layer_rows.push_back(d.back().finish_rows / k + (j < d.back().finish_rows % k));
      }
    }
    const int64_t chunk = 1 + int64_t(rng() % 600), budget = int64_t(rng() % 2000) - 100;
    // Every other case has a budget in ms too (as many as the rows, up to about 4x).
    const double budget_ms = it % 2 ? double(rng() % 6000) - 100 : std::numeric_limits<double>::infinity();
    const auto item_ms = [&](size_t i, int64_t len) { return len > 0 ? double(len) * d[i].ms_per_row : d[i].finish_ms; };
    const auto layer_ms = [&](size_t i, int k) {
      return d[i].finish_ms * double(d[i].finish_layer_rows[size_t(k)]) / double(d[i].finish_rows);
    };
    for (PrefillOrder o : {PrefillOrder::kFcfs, PrefillOrder::kRoundRobin}) {
      CAPTURE(it);
      const std::vector<StepShare> p = PlanChunks(d, budget, chunk, o, budget_ms, uint64_t(it) % 7);  // any rotation
      REQUIRE(p.size() == d.size());
      int64_t rows = 0, items = 0;
      double ms = 0;
      for (size_t i = 0; i < d.size(); ++i) {
        int64_t at = d[i].next;
        for (int64_t len : p[i].chunks) {
          CHECK(len == std::min(chunk, d[i].end - at));  // boundaries: every `chunk` rows from `next`
          at += len;
          rows += len;
          ms += item_ms(i, len);
          items++;
        }
        CHECK(at <= d[i].end);
        const bool in_parts = !d[i].finish_layer_rows.empty();
        if (in_parts) {
          CHECK(p[i].finish == (p[i].finish_layers == int(d[i].finish_layer_rows.size())));
          if (p[i].finish_layers > 0) CHECK(at == d[i].end);  // the decoder phase only after the last chunk
          for (int k = 0; k < p[i].finish_layers; ++k) {
            rows += d[i].finish_layer_rows[size_t(k)];
            ms += layer_ms(i, k);
            items++;
          }
        } else if (p[i].finish) {
          CHECK(p[i].finish_layers == 0);
          CHECK(at == d[i].end);  // the decoder phase only after the last chunk
          rows += d[i].finish_rows;
          ms += item_ms(i, 0);
          items++;
        }
      }
      if (n > 0) CHECK(items >= 1);  // a prompt always advances
      if (items > 1) {
        CHECK(rows <= budget);
        CHECK(ms <= budget_ms + 1e-9);
      }
      // Nothing left that would fit: every turn's next item is over what the budget has left.
      if (items >= 1)
        for (size_t i = 0; i < d.size(); ++i) {
          int64_t at = d[i].next;
          for (int64_t len : p[i].chunks) at += len;
          if (at < d[i].end) {
            const int64_t len = std::min(chunk, d[i].end - at);
            CHECK((len > budget - rows || item_ms(i, len) > budget_ms - ms + 1e-9));
          } else if (!p[i].finish && !d[i].finish_layer_rows.empty()) {
            const int k = p[i].finish_layers;
            CHECK((d[i].finish_layer_rows[size_t(k)] > budget - rows || layer_ms(i, k) > budget_ms - ms + 1e-9));
          } else if (!p[i].finish) {
            CHECK((d[i].finish_rows > budget - rows || item_ms(i, 0) > budget_ms - ms + 1e-9));
          }
        }
    }
  }
}

TEST_CASE("the step cost model prices a decoder-phase row in chunk rows, by the chunks' own rate") {
  StepCostModel m;
  CHECK(m.FinishRowCost() == 1.0);  // nothing measured
  m.ObserveFinish(50, 100.0);       // 2 ms a phase row
  CHECK(m.FinishRowCost() == 1.0);  // no chunk rate yet
  m.ObserveChunks(100, 100.0);      // 1 ms a chunk row with decode rows riding
  CHECK(m.FinishRowCost() == doctest::Approx(2.0));
  m.ObservePureChunks(100, 50.0);   // 0.5 ms a chunk row alone: the rate phases compare with
  CHECK(m.FinishRowCost() == doctest::Approx(4.0));
  CHECK(m.ChunkMsPerRow() == doctest::Approx(1.0));  // the step's own rate keeps the riding rows
}
