// Execution paths that must agree: exact == full, chunked == whole, prefill+decode ==
// longer prefill; and the layer-token counts equal the formulas.
#include <doctest/doctest.h>

#include <cmath>

#include "tests/state_checks.h"
#include "tests/test_models.h"

using namespace cedar;
using cedar::test::RandomTokens;
using cedar::test::ExpectStatesMatch;
using cedar::test::RelError;
using cedar::test::TinyModel;

namespace {

// Float tolerance for paths that batch rows differently (BLAS may sum in another order).
constexpr double kPathTol = 2e-5;

PrefillResult Run(const Model& m, SequenceState& st, const std::vector<int32_t>& t, PrefillMode mode, int chunk = 0) {
  PrefillOptions o;
  o.mode = mode;
  o.chunk_size = chunk;
  return Prefill(m, st, t, o);
}


const int kLengths[] = {1, 2, 7, 8, 9, 15, 16, 17, 28, 29, 30, 31, 45, 64, 97, 101, 150};

}  // namespace

TEST_CASE_TEMPLATE("exact equals full in logits and every piece of state, around and past W and the staircase", V, CEDAR_MODEL_VARIANTS) {
  const Model& m = cedar::test::PresetModel(V::kName);
  const ModelConfig& c = m.config();
  CAPTURE(c.kv_dtype);
  REQUIRE(c.StaircaseLength() == 29);
  for (int n : kLengths) {
    CAPTURE(n);
    auto t = RandomTokens(n, c.vocab_size, 100 + n);
    SequenceState full(c), exact(c);
    auto rf = Run(m, full, t, PrefillMode::kFull);
    auto re = Run(m, exact, t, PrefillMode::kExact);
    CHECK(RelError(re.logits, rf.logits) <= kPathTol);
    ExpectStatesMatch(c, exact, full, kPathTol);
    // And the next tokens continue identically from both states.
    auto d = RandomTokens(3, c.vocab_size, 7 + n);
    for (int32_t tok : d) CHECK(RelError(DecodeStep(m, exact, tok), DecodeStep(m, full, tok)) <= kPathTol);
  }
}

TEST_CASE_TEMPLATE("chunked prefill with any chunk size equals one-shot prefill in full and exact", V, CEDAR_MODEL_VARIANTS) {
  const Model& m = cedar::test::PresetModel(V::kName);
  const ModelConfig& c = m.config();
  CAPTURE(c.kv_dtype);
  for (int n : {45, 101}) {
    auto t = RandomTokens(n, c.vocab_size, 200 + n);
    for (PrefillMode mode : {PrefillMode::kFull, PrefillMode::kExact, PrefillMode::kBounded}) {
      SequenceState whole(c);
      auto rw = Run(m, whole, t, mode);
      for (int chunk : {1, 2, 3, 5, 8, 13, 64}) {
        CAPTURE(n);
        CAPTURE(ModeName(mode));
        CAPTURE(chunk);
        SequenceState st(c);
        auto rc = Run(m, st, t, mode, chunk);
        CHECK(RelError(rc.logits, rw.logits) <= kPathTol);
        CHECK(rc.stats.layer_token_units == rw.stats.layer_token_units);
        ExpectStatesMatch(c, st, whole, kPathTol);
      }
    }
  }
}

TEST_CASE_TEMPLATE("prefill of N tokens then decode of K equals prefill of N+K in full mode", V, CEDAR_MODEL_VARIANTS) {
  const Model& m = cedar::test::PresetModel(V::kName);
  const ModelConfig& c = m.config();
  CAPTURE(c.kv_dtype);
  for (int n : {1, 9, 30, 60}) {
    const int K = 12;
    auto t = RandomTokens(n + K, c.vocab_size, 300 + n);
    SequenceState a(c);
    Run(m, a, std::vector<int32_t>(t.begin(), t.begin() + n), PrefillMode::kFull);
    std::vector<float> last;
    for (int i = 0; i < K; ++i) last = DecodeStep(m, a, t[size_t(n + i)]);
    SequenceState b(c);
    auto rb = Run(m, b, t, PrefillMode::kFull);
    CAPTURE(n);
    CHECK(RelError(last, rb.logits) <= kPathTol);
    ExpectStatesMatch(c, a, b, kPathTol);
  }
}

TEST_CASE("layer-token units of every mode equal the formulas") {
  const Model& m = TinyModel();  // the schedule: the same whatever the layer computes
  const ModelConfig& c = m.config();
  const int64_t L = c.n_layers, E = c.n_encoder_layers, W = c.window;
  for (int n : kLengths) {
    auto t = RandomTokens(n, c.vocab_size, 400 + n);
    for (PrefillMode mode : {PrefillMode::kFull, PrefillMode::kExact, PrefillMode::kBounded, PrefillMode::kBoundedPaper}) {
      SequenceState st(c);
      auto r = Run(m, st, t, mode, 7);
      CAPTURE(n);
      CAPTURE(ModeName(mode));
      CHECK(r.stats.layer_token_units == ExpectedUnits(c, mode, n));
      CHECK(r.stats.encoder_units == n * E);
    }
  }
  // Spelled-out formulas for one length past the staircase (n = 101):
  CHECK(ExpectedUnits(c, PrefillMode::kFull, 101) == 101 * L);
  CHECK(ExpectedUnits(c, PrefillMode::kBounded, 101) == 101 * E + W * (L - E));
  CHECK(ExpectedUnits(c, PrefillMode::kExact, 101) == 101 * E + (W + 3 * (W - 1)) + (W + 2 * (W - 1)) + (W + (W - 1)) + W);
  StepStats s;
  SequenceState st(c);
  Run(m, st, RandomTokens(20, c.vocab_size, 1), PrefillMode::kBounded);
  DecodeStep(m, st, 5, &s);
  CHECK(s.layer_token_units == L);
}

TEST_CASE_TEMPLATE("DecodeBatch over several sequences equals DecodeStep on each", V, CEDAR_MODEL_VARIANTS) {
  const Model& m = cedar::test::PresetModel(V::kName);
  const ModelConfig& c = m.config();
  std::vector<SequenceState> a, b;
  const int lens[] = {1, 9, 30, 77, 150};
  for (int n : lens) {
    auto t = RandomTokens(n, c.vocab_size, 800 + n);
    a.emplace_back(c);
    b.emplace_back(c);
    Run(m, a.back(), t, n % 2 ? PrefillMode::kBounded : PrefillMode::kExact);
    Run(m, b.back(), t, n % 2 ? PrefillMode::kBounded : PrefillMode::kExact);
  }
  std::vector<SequenceState*> ptrs;
  for (auto& s : a) ptrs.push_back(&s);
  for (int step = 0; step < 4; ++step) {
    std::vector<int32_t> toks;
    for (size_t i = 0; i < a.size(); ++i) toks.push_back(int32_t((step * 31 + i * 7) % c.vocab_size));
    std::vector<StepStats> stats;
    auto batch = DecodeBatch(m, ptrs, toks, &stats);
    for (size_t i = 0; i < a.size(); ++i) {
      CAPTURE(i);
      CHECK(RelError(batch[i], DecodeStep(m, b[i], toks[i])) <= kPathTol);
      CHECK(stats[i].layer_token_units == c.n_layers);
      ExpectStatesMatch(c, a[i], b[i], kPathTol);
    }
  }
}
