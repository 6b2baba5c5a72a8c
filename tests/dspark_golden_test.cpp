// The DSpark drafter against the independent float64 reference (tools/reference/v41/dspark.py,
// written from docs/v41-contract.md §10, not from engine/dspark.cpp). tests/golden/v41_dspark/
// holds a v41-tiny model in the released layout (vocabulary cut to 1024, as the speculative
// tests' fixture) and dspark_golden.safetensors: a prompt, the anchor, and the reference's k
// draft rows (logits [k, V] = base logits + Markov bias, and the greedy drafts). Cedar prefills
// the prompt (full mode) capturing the target layers' input streams, hands them to the drafter
// (ObservePrefill) and drafts from the anchor: the logits must agree within the golden checks'
// relative error 1e-4 (engine/golden_check.h: max |engine - golden| / max |golden|, float32
// against float64) and the drafts exactly.
//
// Regenerating (the model files are Cedar's writer's output; the reference only reads them):
//   CEDAR_WRITE_DSPARK_MODEL=tests/golden/v41_dspark build/tests/dspark_golden_test -tc='*write*'
//   /usr/bin/python3 tools/reference/v41/dspark.py --model tests/golden/v41_dspark
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>

#include "engine/dspark.h"
#include "engine/engine.h"
#include "engine/expert_cache.h"
#include "engine/safetensors.h"
#include "engine/v41_init.h"

using namespace cedar;
namespace fs = std::filesystem;

namespace {

const fs::path kDir = fs::path(CEDAR_SOURCE_DIR) / "tests" / "golden" / "v41_dspark";

double RelError(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::fabs(double(a[i]) - double(b[i])));
    scale = std::max(scale, std::fabs(double(b[i])));
  }
  return diff / std::max(scale, 1e-30);
}

}  // namespace

TEST_CASE("write the golden model (only with CEDAR_WRITE_DSPARK_MODEL=DIR)") {
  const char* out = std::getenv("CEDAR_WRITE_DSPARK_MODEL");
  if (!out) return;
  V41Config c;
  REQUIRE(V41PresetConfig("v41-tiny", &c));
  c.vocab_size = 1024;
  c.dspark_noise_token_id = 1000;  // the preset's 128799 lies past the cut vocabulary
  WriteReleasedModel(c, 7, out);
  MESSAGE("wrote " << out);
}

TEST_CASE("DSpark draft logits equal the float64 reference's (prompt context from the prefill)") {
  REQUIRE(fs::exists(kDir / "dspark_golden.safetensors"));
  auto m = Model::Load(kDir.string());
  REQUIRE(m->dspark() != nullptr);
  SafetensorsFile g((kDir / "dspark_golden.safetensors").string());
  const std::vector<int32_t> prompt = g.ReadInts("prompt");
  const int32_t anchor = g.ReadInts("anchor").at(0);
  const std::vector<int32_t> want_drafts = g.ReadInts("drafts");
  const std::vector<float> want = g.ReadFloats("draft_logits");  // [k, V]
  const int V = m->config().vocab_size, k = int(want_drafts.size());
  REQUIRE(want.size() == size_t(k) * size_t(V));

  SequenceState st(m->config());
  DSparkDrafter d(*m);
  HiddenCapture cap = PrefillCaptureFor(*m, d);
  PrefillOptions po;
  po.mode = PrefillMode::kFull;
  po.hidden = &cap;
  const std::vector<float> logits = Prefill(*m, st, prompt, po).logits;
  ObservePrefill(d, cap);
  // The context is the prompt's last `window` positions (the first drafts see the prompt).
  CHECK(d.context_rows() == std::min<int64_t>(m->config().window, int64_t(prompt.size())));
  CHECK(Argmax(logits) == anchor);  // the golden's anchor is the reference's greedy next token

  std::mt19937_64 rng(1);
  std::vector<int32_t> drafts;
  d.Propose(st, anchor, k, SamplingParams{}, rng, &drafts, nullptr);
  CHECK(drafts == want_drafts);
  REQUIRE(d.draft_logits().size() == size_t(k));
  double worst = 0;
  for (int i = 0; i < k; ++i) {
    const std::vector<float> row(want.begin() + size_t(i) * V, want.begin() + size_t(i + 1) * V);
    const double e = RelError(d.draft_logits()[size_t(i)], row);
    CAPTURE(i);
    CHECK(e <= 1e-4);
    worst = std::max(worst, e);
  }
  MESSAGE("DSpark draft logits: worst relative error " << worst << " over " << k << " rows; reference " << g.Metadata().at("generator"));

  // Without the prompt's context the drafts are computed from the block alone: different logits,
  // so the comparison above depends on the captured prompt rows (it cannot pass without them).
  DSparkDrafter blind(*m);
  blind.Propose(st, anchor, k, SamplingParams{}, rng, &drafts, nullptr);
  CHECK(RelError(blind.draft_logits()[0], std::vector<float>(want.begin(), want.begin() + V)) > 1e-3);
}

TEST_CASE("DSpark's expert bank is read through the --max-ram expert cache: drafts bit-identical to resident") {
  auto all = Model::Load(kDir.string());
  const int64_t dense = all->released_load()->dense_bytes;
  const int64_t one_expert = 3 * int64_t(all->config().moe_inter_dim) * all->config().dim * 4;
  LoadOptions o;
  o.max_ram_bytes = dense + 3 * one_expert;  // 3 experts resident at a time: misses and evictions
  auto lazy = Model::Load(kDir.string(), o);
  REQUIRE(lazy->expert_cache() != nullptr);
  // The stages' banks are not in the arena any more (read when routed).
  CHECK(lazy->dspark()->stages[0].experts[0].w1.data == nullptr);
  SafetensorsFile g((kDir / "dspark_golden.safetensors").string());
  const std::vector<int32_t> prompt = g.ReadInts("prompt");
  const int32_t anchor = g.ReadInts("anchor").at(0);
  std::vector<std::vector<float>> out[2];
  std::vector<int32_t> drafts[2];
  int64_t misses_before_propose = 0;
  for (int i = 0; i < 2; ++i) {
    const Model& m = i == 0 ? *all : *lazy;
    SequenceState st(m.config());
    DSparkDrafter d(m);
    HiddenCapture cap = PrefillCaptureFor(m, d);
    PrefillOptions po;
    po.hidden = &cap;
    Prefill(m, st, prompt, po);
    ObservePrefill(d, cap);
    if (i == 1) misses_before_propose = lazy->expert_cache()->stats().misses;
    std::mt19937_64 rng(1);
    d.Propose(st, anchor, 5, SamplingParams{}, rng, &drafts[i], nullptr);
    out[i] = d.draft_logits();
  }
  CHECK(drafts[0] == drafts[1]);
  REQUIRE(out[0].size() == out[1].size());
  for (size_t r = 0; r < out[0].size(); ++r) CHECK(std::memcmp(out[0][r].data(), out[1][r].data(), out[0][r].size() * 4) == 0);
  // The drafter itself read experts through the cache (the stages' misses come after the prefill's).
  CHECK(lazy->expert_cache()->stats().misses > misses_before_propose);
}
