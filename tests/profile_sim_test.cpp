// cedar profile, simulation mode: on a trace whose answer is known by construction, the hit
// counts, evictions and layer-token units of every design equal numbers worked out by hand.
#include <doctest/doctest.h>

#include <filesystem>

#include "engine/engine.h"
#include "profile/simulator.h"

namespace cedar::profile {
namespace {

const std::string kData = std::string(CEDAR_SOURCE_DIR) + "/tests/data/profile/";

// tests/data/profile/known.json, in arrival order (blocks of 64 tokens, "+k" = k tokens past the
// last block, unique to the request; outputs are unique too):
//   A0  t=0   in 128 = B1 B2          out 16
//   S0  t=5   in  64 = B7             out 16   (a sub-agent: another session)
//   A1  t=10  in 220 = B1 B2 B3 +28   out 16
//   A2  t=20  in 256 = B1 B2 B3 B4    out 0
//   A3  t=30  in 300 = B1 B2 B3 B4 +44 out 0
//
// Model: preset tiny, L = 8, E = 4, W = 8, c = 32, d = 64, index_head_dim = 16. Cedar pages of
// 16 tokens hold 16 * 384 = 6144 bytes (pools 96 + 96 + 192 bytes per token) and every snapshot
// (P >= W) holds (E*W*c + W*d) * 4 = 6144 bytes: one "slot" each. A decoder-only block of 16
// tokens holds 16 * L * c * 4 = 16384 bytes. RAM budget: 20 slots = 122880 bytes for both caches
// (7.5 decoder-only blocks). The decoder-only cache keeps one block per node (vLLM's LRU).
SimConfig KnownConfig() {
  SimConfig c;
  REQUIRE(PresetConfig("tiny", &c.model));
  c.page_tokens = 16;
  c.block_tokens = 16;
  c.block_node_blocks = 1;
  c.ram_budget = 20 * 6144;
  c.cost.units_per_s = 1000;  // so TTFT = units / 1000 s
  // The hand-computed numbers below are for Encoder SWA Bounded Replay (min(W, hit)·E units)
  // with everything cached afterwards; the staircase default has its own case.
  c.restore = RestorePolicy::kOptimistic;
  return c;
}

struct Ran {
  Trace trace;
  std::unique_ptr<Simulation> sim;
};

Ran RunKnown(SimConfig config) {
  Ran r;
  r.trace = LoadTraces({kData + "known.json"}, LoadOptions{});
  REQUIRE(r.trace.requests.size() == 5);
  r.sim = std::make_unique<Simulation>(config);
  Replay(r.trace, TokenSynth(0, config.model.vocab_size), *r.sim);
  return r;
}

}  // namespace

TEST_CASE("unit formulas of each design") {
  ModelConfig c;
  REQUIRE(PresetConfig("tiny", &c));  // L 8, E 4, W 8
  CHECK(CedNoCacheUnits(c, 100) == 100 * 4 + 8 * 4);
  CHECK(CedNoCacheUnits(c, 5) == 5 * 4 + 5 * 4);
  CHECK(DecoderOnlyUnits(c, 100, 0) == 800);
  CHECK(DecoderOnlyUnits(c, 100, 64) == 36 * 8);
  CHECK(DecoderOnlyUnits(c, 64, 64) == 8);  // a full hit still runs the last token
  const CedarUnits hit_with_snapshot = CedarPrefillUnits(c, 100, 64, true);
  CHECK(hit_with_snapshot.encoder == 36 * 4);
  CHECK(hit_with_snapshot.decoder == 8 * 4);
  CHECK(hit_with_snapshot.replay == 0);
  CHECK(CedarPrefillUnits(c, 100, 64, false).replay == 8 * 4);  // Encoder SWA Bounded Replay
  CHECK(CedarPrefillUnits(c, 100, 0, false).total() == CedNoCacheUnits(c, 100));
  const StateBytes b = ComputeStateBytes(c, 16, 16);
  CHECK(b.cedar_page == 6144);
  CHECK(b.decoder_only_page == 16384);
  CHECK(b.Snapshot(c, 16) == 6144);
  CHECK(b.Snapshot(c, 4) == (4 * 4 * 32 + 4 * 64) * 4);  // P < W: min(W, P) rows
}

TEST_CASE("known trace under the staircase restore: the same hits and evictions, ExactRestoreRows·E per restore") {
  SimConfig config = KnownConfig();
  config.restore = RestorePolicy::kStaircase;
  const Ran r = RunKnown(config);
  const auto& o = r.sim->runs()[0].outcomes;
  REQUIRE(o.size() == 5);
  // tiny: E = 4, W = 8, L = 8; the server keeps 16 rows of slack and H_E for the decoder
  // staircase W + (L-E-1)(W-1) = 29 plus W - 1: 36 rows. A restore reruns
  // min(hit, E(W-1) + max(W, 36, 2W-1) + 16) = min(hit, 28 + 52) = 80 rows: 320 units.
  CHECK(cedar::ExactRestoreRows(config.model, 192, 36, 16) == 80);
  // Everything is cached as under the optimistic model, so hits and evictions are the ones of
  // the case below; only A2's restore costs more: 64*4 + 32 + 320. A3 finds the snapshot A2 cut
  // at 256 (the insert made room for it), so it restores nothing: 44*4 + 32 = 208, as below.
  CHECK(o[3].hit_ram == 192);
  CHECK(o[3].replay_units == 320);
  CHECK(o[3].units == 608);
  CHECK(o[4].hit_ram == 256);
  CHECK(o[4].replay_units == 0);
  CHECK(o[4].units == 208);
  CHECK(r.sim->runs()[0].totals.units == 544 + 288 + 400 + 608 + 208);
  CHECK(r.sim->runs()[0].counters.snapshots_dropped == 6);
}

TEST_CASE("known trace: Cedar's hits, replays, evictions and units equal the hand-computed ones") {
  const Ran r = RunKnown(KnownConfig());
  const DesignRun& cedar = r.sim->runs()[0];
  REQUIRE(cedar.design == Design::kCedar);
  REQUIRE(cedar.outcomes.size() == 5);
  const auto& o = cedar.outcomes;

  // A0: miss. units = 128*E + min(W,128)*(L-E) = 512 + 32. Inserts 144 tokens = 9 pages and
  // snapshots at 128 (prompt end) and 144 (output end): 11 slots.
  CHECK(o[0].hit() == 0);
  CHECK(o[0].units == 544);
  CHECK(o[0].ram_bytes == 11 * 6144);
  // S0: miss. 64*4 + 8*4 = 288. Inserts 5 pages + snapshots at 64 and 80: 18 slots.
  CHECK(o[1].hit() == 0);
  CHECK(o[1].units == 288);
  CHECK(o[1].ram_bytes == 18 * 6144);
  // A1: hits B1 B2 = 128 tokens in RAM, with the snapshot A0 left at 128: no replay.
  // units = (220-128)*4 + 8*4 = 400. Inserts 6 pages [128,224) + snapshots at 208 and 224.
  // Admission (cache/prefix_cache.cpp, Insert): pinned = [0,128) and its snapshot = 9 slots, so
  // room = 11: all 6 pages are admitted (room 5 left) and the 2 snapshots get room too: 8 slots
  // come in, so RAM is first brought down to 20 - 8 = 12 from 18, by older unpinned state:
  // snapshots first, least recently used first (A0's 144; S0's 80, 64 -> 15 slots), then page
  // leaves, least recently used first (A0's output page [128,144) -> 14; S0's [64,80) -> 13;
  // S0's [0,64), now a leaf, 4 pages -> 9). Then 8 slots come in: 17 slots, under the budget.
  CHECK(o[2].hit_ram == 128);
  CHECK(o[2].hit_disk == 0);
  CHECK(o[2].snapshot_position == 128);
  CHECK(o[2].replay == ReplayKind::kNone);
  CHECK(o[2].units == 400);
  CHECK(o[2].ram_bytes == 17 * 6144);
  // A2: B1 B2 B3 = 192 tokens hit (page [192,208) is A1's tail); the deepest snapshot is at 128
  // and none was ever stored at 192: Encoder SWA Bounded Replay, min(W,192)*E = 32 units.
  // units = (256-192)*4 + 32 + 32 = 320. No exact repeat: the whole prompt is not cached.
  // Inserts B4 (4 pages) + a snapshot at 256. Pinned: [0,192) and the snapshot at 128 = 13
  // slots, room 7: 4 pages admitted (room 3), the snapshot gets 1: RAM goes from 17 to
  // 20 - 5 = 15 by dropping A1's unpinned snapshots, deepest first (224, 208). Then 5 slots
  // come in: 20 slots, and the snapshot at 256 survives.
  CHECK(o[3].hit_ram == 192);
  CHECK(o[3].matched == 192);
  CHECK(o[3].snapshot_position == 128);
  CHECK(o[3].replay == ReplayKind::kNoSnapshotStored);
  CHECK(o[3].replay_units == 32);
  CHECK(o[3].units == 320);
  CHECK(o[3].ram_bytes == 20 * 6144);
  // A3: B1..B4 = 256 tokens hit with A2's snapshot at 256: no replay.
  // units = (300-256)*4 + 8*4 = 208. Inserts [256,288) (2 pages) + a snapshot at 288. Pinned:
  // [0,256) and the snapshots at 128 and 256 = 18 slots, room 2: the 2 pages are admitted and
  // the snapshot gets no room. No unpinned snapshot is left, so RAM goes from 20 to 18 by A1's
  // page leaves [208,224) then [192,208); the pages come in (20) and the snapshot at 288 (21) is
  // the one the settle after the insert drops: 20 slots.
  CHECK(o[4].hit_ram == 256);
  CHECK(o[4].snapshot_position == 256);
  CHECK(o[4].replay == ReplayKind::kNone);
  CHECK(o[4].units == 208);
  CHECK(o[4].ram_bytes == 20 * 6144);
  CHECK(o[4].ttft_s == doctest::Approx(0.208));

  const Totals& t = cedar.totals;
  CHECK(t.prompt_tokens == 968);
  CHECK(t.hit_ram == 128 + 192 + 256);
  CHECK(t.hit_disk == 0);
  CHECK(t.units == 544 + 288 + 400 + 320 + 208);
  CHECK(t.replays_no_snapshot_stored == 1);
  CHECK(t.replays_snapshot_evicted == 0);
  CHECK(cedar.counters.snapshots_dropped == 6);  // 3 (A1) + 2 (A2) + 1 (A3)
  CHECK(cedar.counters.pages_dropped == 8);      // 6 (A1: 1 + 1 + 4) + 2 (A3)
  for (const Outcome& x : o) CHECK_FALSE(x.tail_hit);  // no prompt repeats a cached one whole
  CHECK(cedar.counters.pages_spilled == 0);      // no disk tier
}

TEST_CASE("known trace: the decoder-only LRU baseline and the no-cache designs") {
  const Ran r = RunKnown(KnownConfig());
  const DesignRun& dec = r.sim->runs()[1];
  REQUIRE(dec.design == Design::kDecoderOnlyLru);
  const auto& o = dec.outcomes;
  // The budget holds 7 blocks (7 * 16384 <= 122880 < 8 * 16384); each new block is its own node.
  // Insert admits only the blocks that fit beside the pinned ones (after evicting older unpinned
  // ones); the rest are refused (not stored, so not counted as dropped).
  // A0: miss, 128*8 = 1024; of 9 blocks 7 are admitted, 2 refused: keeps [0,112).
  CHECK(o[0].units == 1024);
  CHECK(o[0].ram_bytes == 7 * 16384);
  // S0: miss, 512; room is made for its 5 blocks: A0's 5 deepest are dropped: keeps A0's [0,32).
  CHECK(o[1].units == 512);
  // A1: hits [0,32) (pinned: 2 blocks, room 5.5): 5 of its 12 new blocks are admitted, 7
  // refused; room is made by dropping S0's 5 blocks. (220-32)*8 = 1504.
  CHECK(o[2].hit_ram == 32);
  CHECK(o[2].units == 1504);
  // A2: hits [0,112); (256-112)*8 = 1152. A2, A3 pin all 7 cached blocks: room 0.5 block, so
  // every new block is refused and nothing is dropped.
  CHECK(o[3].hit_ram == 112);
  CHECK(o[3].units == 1152);
  CHECK(o[4].hit_ram == 112);
  CHECK(o[4].units == 1504);
  CHECK(dec.totals.units == 1024 + 512 + 1504 + 1152 + 1504);
  CHECK(dec.totals.hit_ram == 256);
  CHECK(dec.counters.pages_dropped == 0 + 5 + 5 + 0 + 0);
  CHECK(dec.counters.snapshots_dropped == 0);

  // No cache: CED = sum(n*E + min(W,n)*(L-E)) = 968*4 + 5*32; decoder-only = 968*8.
  CHECK(r.sim->runs()[2].totals.units == 4032);
  CHECK(r.sim->runs()[3].totals.units == 7744);
  CHECK(r.sim->runs()[3].outcomes[0].ttft_s == doctest::Approx(1.024));
}

TEST_CASE("exact repeats of page-aligned prompts resume from the decoder tail; a replayed prompt leaves none") {
  // tests/data/profile_sim/repeat.json (not in profile/, whose file count profile_trace_test
  // checks): R0 256 = B1..B4 out 0; R1 = R0's prompt again, out 16;
  // R2 192 = B1 B2 B3 out 0; R3 = R2's prompt again. tiny: L 8, E 4, W 8. The budget holds
  // everything (nothing is evicted).
  SimConfig config = KnownConfig();
  config.ram_budget = 1000 * 6144;
  for (RestorePolicy policy : {RestorePolicy::kStaircase, RestorePolicy::kReplay}) {
    CAPTURE(RestorePolicyName(policy));
    config.restore = policy;
    const Trace trace = LoadTraces({std::string(CEDAR_SOURCE_DIR) + "/tests/data/profile_sim/repeat.json"}, LoadOptions{});
    Simulation sim(config);
    Replay(trace, TokenSynth(0, config.model.vocab_size), sim);
    const auto& o = sim.runs()[0].outcomes;
    REQUIRE(o.size() == 4);
    // R0: a miss, 256*4 + 8*4. Cached whole with a snapshot at 256 whose tail is bounded (the
    // decoder policy is auto and 256 > W).
    CHECK(o[0].hit() == 0);
    CHECK(o[0].units == 1056);
    // R1: the whole prompt is cached with a usable tail at its end: all 256 tokens, no units.
    CHECK(o[1].tail_hit);
    CHECK(o[1].matched == 256);
    CHECK(o[1].hit_ram == 256);
    CHECK(o[1].units == 0);
    CHECK(o[1].replay == ReplayKind::kNone);
    // R2: no snapshot at 192, so no repeat; the n - 1 match stops at 176 with no snapshot there.
    CHECK_FALSE(o[2].tail_hit);
    CHECK(o[2].hit_ram == 176);
    CHECK(o[2].replay == ReplayKind::kNoSnapshotStored);
    if (policy == RestorePolicy::kStaircase) {
      // Exact: (192-176)*4 + 8*4 + ExactRestoreRows = min(176, 80) rows * 4 = 416. The prompt is
      // cached with a snapshot and tail at 192, so R3 resumes from it.
      CHECK(o[2].units == 64 + 32 + 320);
      CHECK(o[3].tail_hit);
      CHECK(o[3].hit_ram == 192);
      CHECK(o[3].units == 0);
      CHECK(sim.runs()[0].totals.tail_hits == 2);  // R1 and R3
    } else {
      // Encoder SWA Bounded Replay: 64 + 32 + 32; the state past 176 is approximate, so nothing
      // past it and no snapshot is cached: R3 finds the same 176 and replays again.
      CHECK(o[2].units == 128);
      CHECK_FALSE(o[3].tail_hit);
      CHECK(o[3].hit_ram == 176);
      CHECK(o[3].units == 128);
      CHECK(sim.runs()[0].totals.tail_hits == 1);  // R1 only
    }
  }
}

TEST_CASE("results do not depend on the number of worker threads; sweep points are separate caches") {
  SimConfig one = KnownConfig();
  one.threads = 1;
  one.sweep_ram = {10 * 6144, 40 * 6144};
  SimConfig many = one;
  many.threads = 5;
  const Ran a = RunKnown(one);
  const Ran b = RunKnown(many);
  for (size_t d = 0; d < 4; ++d) {
    CHECK(a.sim->runs()[d].totals.units == b.sim->runs()[d].totals.units);
    CHECK(a.sim->runs()[d].totals.hit_ram == b.sim->runs()[d].totals.hit_ram);
  }
  REQUIRE(a.sim->sweep().size() == 3);
  CHECK(a.sim->sweep()[1].ram_budget == 20 * 6144);  // the main budget is a point
  CHECK(a.sim->sweep()[1].cedar.units == a.sim->runs()[0].totals.units);
  // With 40 slots nothing useful is evicted: every later request hits its full cached prefix
  // and every snapshot stays, so A3 resumes from A2's snapshot at 256 without a replay.
  const Totals& big = a.sim->sweep()[2].cedar;
  CHECK(big.replays_snapshot_evicted == 0);
  CHECK(big.hit_ram == 128 + 192 + 256);
  CHECK(big.units == 544 + 288 + 400 + 320 + (300 - 256) * 4 + 32);
  for (size_t p = 0; p < 3; ++p) {
    CHECK(a.sim->sweep()[p].cedar.units == b.sim->sweep()[p].cedar.units);
    CHECK(a.sim->sweep()[p].decoder_only.units == b.sim->sweep()[p].decoder_only.units);
  }
}

TEST_CASE("--payload-scale divides payloads and budgets alike: RAM decisions and reported bytes are unchanged") {
  SimConfig scaled = KnownConfig();
  scaled.payload_scale = 2;  // 6144 / 2, 16384 / 2 and the budget / 2 are all exact
  const Ran a = RunKnown(KnownConfig());
  const Ran b = RunKnown(scaled);
  for (size_t d = 0; d < 2; ++d) {
    const auto& x = a.sim->runs()[d].outcomes;
    const auto& y = b.sim->runs()[d].outcomes;
    REQUIRE(x.size() == y.size());
    for (size_t i = 0; i < x.size(); ++i) {
      CHECK(x[i].units == y[i].units);
      CHECK(x[i].hit() == y[i].hit());
      CHECK(x[i].ram_bytes == y[i].ram_bytes);
    }
    CHECK(a.sim->runs()[d].counters.pages_dropped == b.sim->runs()[d].counters.pages_dropped);
  }
}

TEST_CASE("a disk tier keeps what RAM evicts: later hits come from disk") {
  SimConfig ram_only = KnownConfig();
  ram_only.ram_budget = 10 * 6144;
  SimConfig with_disk = ram_only;
  with_disk.disk_budget = 64ull << 20;
  const std::string dir = std::string(CEDAR_BINARY_DIR) + "/profile_sim_test_disk";
  std::filesystem::remove_all(dir);
  with_disk.disk_dir = dir;
  const Ran small = RunKnown(ram_only);
  {
    const Ran r = RunKnown(with_disk);
    const DesignRun& cedar = r.sim->runs()[0];
    CHECK(cedar.totals.hit_disk > 0);
    CHECK(cedar.counters.pages_spilled > 0);
    CHECK(cedar.totals.peak_disk_bytes > 0);
    CHECK(cedar.totals.peak_ram_bytes <= 10 * 6144);
    CHECK(cedar.totals.hit_ram + cedar.totals.hit_disk > small.sim->runs()[0].totals.hit_ram);
  }
  // Each cache's folder is removed when the simulation ends.
  CHECK(std::filesystem::is_empty(dir));
  std::filesystem::remove_all(dir);
}

}  // namespace cedar::profile
