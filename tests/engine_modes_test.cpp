// The approximations: bounded (Decoder SWA Bounded Replay) and Encoder SWA Bounded Replay.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>

#include "engine/sampling.h"
#include "tests/test_models.h"

using namespace cedar;
using cedar::test::KlDivergence;
using cedar::test::RandomTokens;
using cedar::test::RelError;
using cedar::test::TinyModel;

namespace {
PrefillResult Run(const Model& m, SequenceState& st, std::span<const int32_t> t, PrefillMode mode) {
  PrefillOptions o;
  o.mode = mode;
  return Prefill(m, st, t, o);
}
}  // namespace

TEST_CASE_TEMPLATE("bounded differs from full, by less than a last-W-tokens-only prompt, and keeps layer E's pool bit-identical", V, CEDAR_MODEL_VARIANTS) {
  const Model& m = cedar::test::PresetModel(V::kName);
  const ModelConfig& c = m.config();
  const int W = c.window;
  int lengths = 0, wins = 0;
  double kl_bounded_sum = 0, kl_trunc_sum = 0;
  for (int n = W + 1; lengths < 24; n += 5) {  // non-multiples of W included
    auto t = RandomTokens(n, c.vocab_size, 500 + n);
    SequenceState full(c), bounded(c), trunc(c);
    auto rf = Run(m, full, t, PrefillMode::kFull);
    auto rb = Run(m, bounded, t, PrefillMode::kBounded);
    auto rt = Run(m, trunc, std::span<const int32_t>(t.data() + (n - W), size_t(W)), PrefillMode::kFull);
    const double kb = KlDivergence(rf.logits, rb.logits), kt = KlDivergence(rf.logits, rt.logits);
    MESSAGE("n=" << n << " KL(full||bounded)=" << kb << " KL(full||last-W-only)=" << kt);
    CHECK(kb > 0);  // it is an approximation: it must differ
    kl_bounded_sum += kb;
    kl_trunc_sum += kt;
    wins += kb < kt;
    ++lengths;
    const Pool& pf = full.PoolOfLayer(c, c.n_encoder_layers);
    const Pool& pb = bounded.PoolOfLayer(c, c.n_encoder_layers);
    CHECK(pf.entries == pb.entries);  // bit-identical: a projection of H_E in both modes
    CHECK(pf.keys == pb.keys);
  }
  MESSAGE("mean KL bounded " << kl_bounded_sum / lengths << " vs truncated " << kl_trunc_sum / lengths << "; bounded closer at "
                             << wins << "/" << lengths << " lengths");
  CHECK(wins == lengths);
}

TEST_CASE_TEMPLATE("bounded equals full when the prompt fits in the window", V, CEDAR_MODEL_VARIANTS) {
  const Model& m = cedar::test::PresetModel(V::kName);
  const ModelConfig& c = m.config();
  CAPTURE(c.kv_dtype);
  for (int n = 1; n <= c.window; ++n) {
    auto t = RandomTokens(n, c.vocab_size, 600 + n);
    SequenceState full(c), bounded(c);
    CHECK(RelError(Run(m, bounded, t, PrefillMode::kBounded).logits, Run(m, full, t, PrefillMode::kFull).logits) <= 2e-5);
  }
}

TEST_CASE_TEMPLATE("encoder replay never rewrites pools, is exact for P <= W, and is a small approximation past W", V, CEDAR_MODEL_VARIANTS) {
  const Model& m = cedar::test::PresetModel(V::kName);
  const ModelConfig& c = m.config();
  const int E = c.n_encoder_layers;
  for (int P : {3, 8, 21, 40, 77}) {
    CAPTURE(P);
    auto t = RandomTokens(P + 6, c.vocab_size, 700 + P);
    std::span<const int32_t> prefix(t.data(), size_t(P)), suffix(t.data() + P, 6);
    SequenceState ref(c);
    Run(m, ref, prefix, PrefillMode::kFull);
    SequenceState st = CopyState(ref, c);
    st.DropWindowsAndResidual();
    StepStats s = EncoderReplay(m, st);
    CHECK(s.replay_rows == std::min(P, c.window));
    CHECK(s.layer_token_units == std::min(P, c.window) * E);
    for (size_t p = 0; p < st.pools.size(); ++p) {
      CHECK(st.pools[p].entries == ref.pools[p].entries);
      CHECK(st.pools[p].keys == ref.pools[p].keys);
    }
    for (int l = 0; l <= E; ++l) CHECK(st.windows[size_t(l)].hi() == P);
    if (P <= c.window) {
      for (int l = 0; l < E; ++l) CHECK(RelError(st.windows[size_t(l)].raw(), ref.windows[size_t(l)].raw()) <= 2e-5);
      CHECK(RelError(st.h_e.raw(), ref.h_e.raw()) <= 2e-5);
    }
    // Continue both with a bounded prefill of the suffix: the replayed one stays close.
    SequenceState cont = CopyState(ref, c);
    auto exact_next = Run(m, cont, suffix, PrefillMode::kBounded);
    auto replay_next = Run(m, st, suffix, PrefillMode::kBounded);
    const double kl = KlDivergence(exact_next.logits, replay_next.logits);
    MESSAGE("P=" << P << " KL(exact state || replayed state) = " << kl);
    if (P <= c.window) CHECK(kl < 1e-8);
    CHECK(std::isfinite(kl));
  }
}

namespace {
// Max relative error of a's rows against b's over b's positions; fails when a lacks one.
double StoreErrorOver(const RowStore& a, const RowStore& b) {
  if (b.size() == 0) return 0;
  if (a.lo() > b.lo() || a.hi() < b.hi()) return 1e30;
  std::vector<float> ra, rb;
  for (int64_t p = b.lo(); p < b.hi(); ++p) {
    ra.insert(ra.end(), a.Row(p), a.Row(p) + a.dim());
    rb.insert(rb.end(), b.Row(p), b.Row(p) + b.dim());
  }
  return RelError(ra, rb);
}
}  // namespace

TEST_CASE_TEMPLATE("exact encoder restore rebuilds the window state from the pools alone, equal to a full prefill", V, CEDAR_MODEL_VARIANTS) {
  const Model& m = cedar::test::PresetModel(V::kName);
  const ModelConfig& c = m.config();
  CAPTURE(c.kv_dtype);
  const int E = c.n_encoder_layers;
  for (int P : {3, 8, 30, 77, 150, 301}) {
    CAPTURE(P);
    auto t = RandomTokens(P + 7, c.vocab_size, 900 + P);
    std::span<const int32_t> prefix(t.data(), size_t(P)), suffix(t.data() + P, 7);
    SequenceState ref(c);
    ref.keep_extra_rows = 16;  // as the session keeps them
    ref.keep_h_e_rows = c.StaircaseLength() + c.window - 1;
    Run(m, ref, prefix, PrefillMode::kFull);
    SequenceState st = CopyState(ref, c);
    st.DropWindowsAndResidual();
    const StepStats s = ExactEncoderRestore(m, st);
    const int64_t R = ExactRestoreRows(c, P, ref.keep_h_e_rows, ref.keep_extra_rows);
    CHECK(s.replay_rows == R);
    CHECK(s.layer_token_units == R * E);
    if (P > 200) CHECK(R < P);  // the point: a long prefix restores from a fraction of its rows
    CHECK_FALSE(st.replayed);
    for (size_t p = 0; p < st.pools.size(); ++p) {
      CHECK(st.pools[p].entries == ref.pools[p].entries);
      CHECK(st.pools[p].keys == ref.pools[p].keys);
    }
    // Every row a full prefill keeps, the restore has, equal up to float reordering.
    for (int l = 0; l <= E; ++l) CHECK(StoreErrorOver(st.windows[size_t(l)], ref.windows[size_t(l)]) <= 2e-5);
    CHECK(StoreErrorOver(st.h_e, ref.h_e) <= 2e-5);
    // An exact continuation from both agrees, and so does the next decoded token.
    PrefillOptions o;
    o.mode = PrefillMode::kExact;
    auto a = Prefill(m, ref, suffix, o), b = Prefill(m, st, suffix, o);
    CHECK(RelError(b.logits, a.logits) <= 2e-5);
    CHECK(RelError(DecodeStep(m, st, 5), DecodeStep(m, ref, 5)) <= 2e-5);
  }
}

TEST_CASE("sampling: greedy is argmax with ties to the lower id; seeded sampling repeats; tiny top-p is greedy") {
  std::vector<float> logits{0.5f, 2.0f, 2.0f, -1.0f};
  Sampler greedy({0.0f, 1.0f, 0});
  CHECK(greedy.Sample(logits) == 1);
  Sampler a({1.0f, 1.0f, 42}), b({1.0f, 1.0f, 42});
  std::vector<int32_t> xa, xb;
  for (int i = 0; i < 50; ++i) {
    xa.push_back(a.Sample(logits));
    xb.push_back(b.Sample(logits));
  }
  CHECK(xa == xb);
  bool saw_other = false;
  for (int32_t x : xa) saw_other |= (x != 1);
  CHECK(saw_other);
  Sampler nucleus({1.0f, 0.01f, 3});
  for (int i = 0; i < 20; ++i) CHECK(nucleus.Sample(logits) == 1);
}

TEST_CASE("a token outside the vocabulary or past max_seq_len is refused and the state is unchanged") {
  const Model& m = TinyModel();
  const ModelConfig& c = m.config();
  SequenceState st(c);
  std::vector<int32_t> ok{1, 2, 3}, bad{1, c.vocab_size, 3};
  Run(m, st, ok, PrefillMode::kFull);
  CHECK_THROWS_AS(Run(m, st, bad, PrefillMode::kFull), std::invalid_argument);
  CHECK(st.pos == 3);
  std::vector<int32_t> huge(size_t(c.max_seq_len), 1);
  CHECK_THROWS_AS(Run(m, st, huge, PrefillMode::kBounded), std::invalid_argument);
  CHECK(st.pos == 3);
}
