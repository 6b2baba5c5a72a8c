// Batched prefill (issue 14, engine/batch_prefill.h): the chunks of several sequences in one
// engine pass leave every sequence bit for bit where its own PrefillEncode / PrefillFinish
// calls would (logits, StateHash, layer-token units), on our family and on the released
// architecture's switches (mHC, softmax router, released KV precision); with
// kernels::SetRowInvariantMatmul(true) (rows share products) and without it (each chunk's rows
// get products of their own, decode rows theirs: engine/row_groups.h).
#include <doctest/doctest.h>

#include <cstring>
#include <optional>

#include "engine/backend.h"
#include "engine/batch_prefill.h"
#include "kernels/ops.h"
#include "tests/state_checks.h"
#include "tests/test_models.h"

using namespace cedar;
using cedar::test::ExpectStatesMatch;
using cedar::test::RandomTokens;

namespace {

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Row invariance set for one run of a test body, off again after it (a process-wide switch).
struct RowInvariant {
  explicit RowInvariant(bool on) { kernels::SetRowInvariantMatmul(on); }
  ~RowInvariant() { kernels::SetRowInvariantMatmul(false); }
};

}  // namespace

TEST_CASE_TEMPLATE("batched encode and finish equal each sequence's own calls, bit for bit", T, CEDAR_MODEL_VARIANTS) {
  for (const bool rowinv : {true, false}) {
    CAPTURE(rowinv);
    RowInvariant on(rowinv);
    const Model& m = cedar::test::PresetModel(T::kName);
    const ModelConfig& c = m.config();
    // Six sequences: some with a live prefix (a decoder state below the new rows), prompts of
    // different lengths cut into different chunk sizes, both decoder modes.
    constexpr int S = 6;
    const int heads[S] = {0, 20, 0, 33, 5, 70};
    const int lens[S] = {150, 7, 97, 64, 30, 121};
    const int chunks[S] = {64, 13, 40, 64, 8, 50};
    std::vector<SequenceState> alone, batched;
    std::vector<std::vector<int32_t>> prompt(S);
    for (int i = 0; i < S; ++i) {
      alone.emplace_back(c);
      batched.emplace_back(c);
      prompt[size_t(i)] = RandomTokens(lens[i], c.vocab_size, 500 + uint64_t(i));
      if (heads[i] > 0) {
        PrefillOptions o;
        o.mode = PrefillMode::kExact;
        auto head = RandomTokens(heads[i], c.vocab_size, 40 + uint64_t(i));
        Prefill(m, alone.back(), head, o);
        Prefill(m, batched.back(), head, o);
      }
    }
    auto mode_of = [](int i) { return i % 2 ? PrefillMode::kBounded : PrefillMode::kExact; };
    // Alone: each sequence's chunks then its finish.
    std::vector<PrefillResult> want(S);
    std::vector<int64_t> want_units(S, 0);
    for (int i = 0; i < S; ++i) {
      for (int c0 = 0; c0 < lens[i]; c0 += chunks[i]) {
        const int len = std::min(chunks[i], lens[i] - c0);
        want_units[size_t(i)] +=
            PrefillEncode(m, alone[size_t(i)], std::span<const int32_t>(prompt[size_t(i)].data() + c0, size_t(len))).layer_token_units;
      }
      want[size_t(i)] = PrefillFinish(m, alone[size_t(i)], mode_of(i));
    }
    // Batched: pass k holds the k-th chunk of every sequence that has one; a sequence finishes
    // in the pass after its last chunk, together with the others finishing then.
    std::vector<int64_t> next(S, 0), units(S, 0);
    std::vector<PrefillResult> got(S);
    std::vector<bool> finished(S, false);
    int passes = 0;
    for (bool any = true; any; ++passes) {
      any = false;
      std::vector<EncodeChunk> enc;
      std::vector<int> who;
      for (int i = 0; i < S; ++i) {
        if (next[size_t(i)] >= lens[i]) continue;
        const int len = int(std::min<int64_t>(chunks[i], lens[i] - next[size_t(i)]));
        enc.push_back(EncodeChunk{&batched[size_t(i)], std::span<const int32_t>(prompt[size_t(i)].data() + next[size_t(i)], size_t(len))});
        who.push_back(i);
        next[size_t(i)] += len;
        any = true;
      }
      auto st = PrefillEncodeBatch(m, enc);
      REQUIRE(st.size() == enc.size());
      for (size_t j = 0; j < who.size(); ++j) units[size_t(who[j])] += st[j].layer_token_units;
      std::vector<FinishJob> fin;
      std::vector<int> fwho;
      for (int i = 0; i < S; ++i)
        if (!finished[size_t(i)] && next[size_t(i)] >= lens[i]) {
          fin.push_back(FinishJob{&batched[size_t(i)], mode_of(i)});
          fwho.push_back(i);
          finished[size_t(i)] = true;
        }
      auto res = PrefillFinishBatch(m, fin);
      for (size_t j = 0; j < fwho.size(); ++j) got[size_t(fwho[j])] = std::move(res[j]);
    }
    CHECK(passes > 2);
    for (int i = 0; i < S; ++i) {
      CAPTURE(i);
      CHECK(SameBits(got[size_t(i)].logits, want[size_t(i)].logits));
      CHECK(units[size_t(i)] == want_units[size_t(i)]);
      CHECK(got[size_t(i)].stats.layer_token_units == want[size_t(i)].stats.layer_token_units);
      CHECK(got[size_t(i)].stats.decoder_rows == want[size_t(i)].stats.decoder_rows);
      CHECK(StateHash(batched[size_t(i)]) == StateHash(alone[size_t(i)]));
      ExpectStatesMatch(c, batched[size_t(i)], alone[size_t(i)], 0.0);
    }
    // And decoding on from there agrees too (the states are the same, bit for bit).
    for (int i = 0; i < S; ++i) CHECK(SameBits(DecodeStep(m, batched[size_t(i)], 3), DecodeStep(m, alone[size_t(i)], 3)));
  }
}

TEST_CASE_TEMPLATE("decode rows riding in a batched encode equal DecodeStep, and the chunks PrefillEncode, bit for bit", T,
                   CEDAR_MODEL_VARIANTS) {
  for (const bool rowinv : {true, false}) {
    CAPTURE(rowinv);
    RowInvariant on(rowinv);
    const Model& m = cedar::test::PresetModel(T::kName);
    const ModelConfig& c = m.config();
    // Four decoding sequences (prefilled, both decoder modes) and three prefilling ones.
    constexpr int D = 4, P = 3;
    std::vector<SequenceState> da, db, pa, pb;
    for (int i = 0; i < D; ++i) {
      PrefillOptions o;
      o.mode = i % 2 ? PrefillMode::kBounded : PrefillMode::kExact;
      auto t = RandomTokens(9 + 17 * i, c.vocab_size, 60 + uint64_t(i));
      da.emplace_back(c);
      db.emplace_back(c);
      Prefill(m, da.back(), t, o);
      Prefill(m, db.back(), t, o);
    }
    for (int i = 0; i < P; ++i) {
      pa.emplace_back(c);
      pb.emplace_back(c);
    }
    for (int step = 0; step < 3; ++step) {
      CAPTURE(step);
      std::vector<std::vector<int32_t>> ch(P);
      std::vector<EncodeChunk> enc;
      for (int i = 0; i < P; ++i) {
        ch[size_t(i)] = RandomTokens(5 + 23 * i + step, c.vocab_size, 700 + uint64_t(10 * step + i));
        enc.push_back(EncodeChunk{&pb[size_t(i)], ch[size_t(i)]});
      }
      std::vector<DecodeRow> rows;
      for (int i = 0; i < D; ++i) rows.push_back(DecodeRow{&db[size_t(i)], int32_t((step * 31 + i * 7) % c.vocab_size)});
      const EncodeDecodeResult r = EncodeDecodeBatch(m, enc, rows);
      for (int i = 0; i < P; ++i) {
        CAPTURE(i);
        CHECK(r.encode[size_t(i)].layer_token_units == PrefillEncode(m, pa[size_t(i)], ch[size_t(i)]).layer_token_units);
        CHECK(StateHash(pb[size_t(i)]) == StateHash(pa[size_t(i)]));
      }
      for (int i = 0; i < D; ++i) {
        CAPTURE(i);
        StepStats s;
        CHECK(SameBits(r.logits[size_t(i)], DecodeStep(m, da[size_t(i)], rows[size_t(i)].token, &s)));
        CHECK(r.decode[size_t(i)].layer_token_units == s.layer_token_units);
        CHECK(StateHash(db[size_t(i)]) == StateHash(da[size_t(i)]));
      }
    }
    // The prefilling sequences finish as they would have alone.
    for (int i = 0; i < P; ++i)
      CHECK(SameBits(PrefillFinish(m, pb[size_t(i)], PrefillMode::kBounded).logits, PrefillFinish(m, pa[size_t(i)], PrefillMode::kBounded).logits));
  }
}

TEST_CASE("batched prefill refuses the same state twice, bad tokens and full mode, touching nothing") {
  const Model& m = cedar::test::TinyModel();
  const ModelConfig& c = m.config();
  SequenceState a(c), b(c);
  auto t = RandomTokens(10, c.vocab_size, 1);
  std::vector<EncodeChunk> twice{{&a, t}, {&a, t}};
  CHECK_THROWS_AS(PrefillEncodeBatch(m, twice), std::invalid_argument);
  std::vector<int32_t> bad{1, c.vocab_size};
  std::vector<EncodeChunk> one_bad{{&a, t}, {&b, bad}};
  CHECK_THROWS_AS(PrefillEncodeBatch(m, one_bad), std::invalid_argument);
  CHECK(a.pos == 0);
  CHECK(b.pos == 0);
  std::vector<EncodeChunk> ok{{&a, t}};
  PrefillEncodeBatch(m, ok);
  std::vector<DecodeRow> dup{{&a, 1}};
  CHECK_THROWS_AS(EncodeDecodeBatch(m, ok, dup), std::invalid_argument);  // a state both encoding and decoding
  std::vector<FinishJob> full{{&a, PrefillMode::kFull}};
  CHECK_THROWS_AS(PrefillFinishBatch(m, full), std::invalid_argument);
  std::vector<FinishJob> nothing{{&a, PrefillMode::kExact}, {&b, PrefillMode::kExact}};  // b has nothing encoded
  CHECK_THROWS_AS(PrefillFinishBatch(m, nothing), std::invalid_argument);
  CHECK(a.decoder_pos == 0);
}

TEST_CASE("the CPU backend offers batched prefill; its default loops over the single calls") {
  RowInvariant on(false);
  const Model& m = cedar::test::TinyModel();
  auto be = MakeBackend(m, BackendOptions{});
  CHECK(be->SupportsBatchedPrefill());
  auto s1 = be->NewSequence(), s2 = be->NewSequence();
  auto t1 = RandomTokens(40, m.config().vocab_size, 3), t2 = RandomTokens(25, m.config().vocab_size, 4);
  std::vector<Sequence*> seqs{s1.get(), s2.get()};
  std::vector<std::span<const int32_t>> ch{t1, t2};
  be->PrefillEncodeBatch(seqs, ch);
  CHECK(s1->pos() == 40);
  CHECK(s2->pos() == 25);
  std::vector<PrefillMode> modes{PrefillMode::kExact, PrefillMode::kBounded};
  auto r = be->PrefillFinishBatch(seqs, modes);
  SequenceState lone(m.config());
  PrefillEncode(m, lone, t2);
  CHECK(SameBits(r[1].logits, PrefillFinish(m, lone, PrefillMode::kBounded).logits));
  CHECK(s2->decoder_pos() == 25);
}

TEST_CASE_TEMPLATE("a decoder phase run in parts equals PrefillFinish bit for bit, wherever it pauses", T, CEDAR_MODEL_VARIANTS) {
  for (const bool rowinv : {true, false}) {
    CAPTURE(rowinv);
    RowInvariant on(rowinv);
    const Model& m = cedar::test::PresetModel(T::kName);
    const ModelConfig& c = m.config();
    const int D = c.n_layers - c.n_encoder_layers;  // decoder layers
    REQUIRE(D >= 2);
    constexpr int S = 4;
    const int heads[S] = {0, 20, 33, 0};
    const int lens[S] = {150, 9, 97, 40};
    auto mode_of = [](int i) { return i % 2 ? PrefillMode::kBounded : PrefillMode::kExact; };
    std::vector<SequenceState> alone, parts;
    for (int i = 0; i < S; ++i) {
      alone.emplace_back(c);
      parts.emplace_back(c);
      if (heads[i] > 0) {
        PrefillOptions o;
        o.mode = PrefillMode::kExact;
        auto head = RandomTokens(heads[i], c.vocab_size, 70 + uint64_t(i));
        Prefill(m, alone.back(), head, o);
        Prefill(m, parts.back(), head, o);
      }
      auto prompt = RandomTokens(lens[i], c.vocab_size, 900 + uint64_t(i));
      PrefillEncode(m, alone.back(), prompt);
      PrefillEncode(m, parts.back(), prompt);
    }
    std::vector<PrefillResult> want(S);
    for (int i = 0; i < S; ++i) want[size_t(i)] = PrefillFinish(m, alone[size_t(i)], mode_of(i));
    // Calls of 1..3 layers per job; a job sits out some calls, so the jobs of a call stand at
    // different layers and run some layers together, some alone.
    std::vector<std::optional<PrefillResult>> got(S);
    std::vector<int> results(S, 0);
    uint64_t rng = 12345;
    auto next = [&rng](int n) { rng = rng * 6364136223846793005ull + 1442695040888963407ull; return int((rng >> 33) % uint64_t(n)); };
    int calls = 0, paused_checks = 0;
    for (bool any = true; any; ++calls) {
      any = false;
      std::vector<FinishJob> jobs;
      std::vector<int> who;
      for (int i = 0; i < S; ++i) {
        if (got[size_t(i)] || (calls > 0 && next(4) == 0)) continue;
        jobs.push_back(FinishJob{&parts[size_t(i)], mode_of(i), 1 + next(3)});
        who.push_back(i);
      }
      auto res = PrefillFinishLayers(m, jobs);
      REQUIRE(res.size() == jobs.size());
      for (size_t j = 0; j < who.size(); ++j) {
        SequenceState& st = parts[size_t(who[j])];
        if (res[j]) {
          results[size_t(who[j])]++;
          got[size_t(who[j])] = std::move(res[j]);
          CHECK(!st.decoder_run);
        } else if (paused_checks++ < 3) {  // paused between layers: nothing else may touch it
          REQUIRE(st.decoder_run);
          CHECK(st.decoder_pos < st.pos);
          CHECK_THROWS_AS(CopyState(st, c), std::logic_error);
          CHECK_THROWS_AS(PrefillEncode(m, st, RandomTokens(3, c.vocab_size, 1)), std::logic_error);
          CHECK_THROWS_AS(PrefillFinish(m, st, mode_of(who[j])), std::logic_error);
          std::vector<FinishJob> other{{&st, mode_of(who[j]) == PrefillMode::kExact ? PrefillMode::kBounded : PrefillMode::kExact, 1}};
          CHECK_THROWS_AS(PrefillFinishLayers(m, other), std::invalid_argument);
          std::vector<FinishJob> zero{{&st, mode_of(who[j]), 0}};
          CHECK_THROWS_AS(PrefillFinishLayers(m, zero), std::invalid_argument);
          std::vector<FinishJob> whole{{&st, mode_of(who[j])}};
          CHECK_THROWS_AS(PrefillFinishBatch(m, whole), std::invalid_argument);
        }
      }
      for (int i = 0; i < S; ++i) any = any || !got[size_t(i)];
      REQUIRE(calls < 100);
    }
    CHECK(calls > 2);
    CHECK(paused_checks > 0);
    for (int i = 0; i < S; ++i) {
      CAPTURE(i);
      CHECK(results[size_t(i)] == 1);
      REQUIRE(got[size_t(i)]);
      CHECK(SameBits(got[size_t(i)]->logits, want[size_t(i)].logits));
      CHECK(got[size_t(i)]->stats.layer_token_units == want[size_t(i)].stats.layer_token_units);
      CHECK(got[size_t(i)]->stats.decoder_rows == want[size_t(i)].stats.decoder_rows);
      CHECK(StateHash(parts[size_t(i)]) == StateHash(alone[size_t(i)]));
      ExpectStatesMatch(c, parts[size_t(i)], alone[size_t(i)], 0.0);
      CHECK(SameBits(DecodeStep(m, parts[size_t(i)], 5), DecodeStep(m, alone[size_t(i)], 5)));
    }
  }
}

TEST_CASE_TEMPLATE("Reserve: a prompt's chunks fill the reserved state in place, with the same bits", T, CEDAR_MODEL_VARIANTS) {
  const Model& m = cedar::test::PresetModel(T::kName);
  const ModelConfig& c = m.config();
  const int n = 300, chunk = 40;
  const auto prompt = RandomTokens(n, c.vocab_size, 4242);
  SequenceState plain(c), reserved(c);
  reserved.Reserve(c, n);
  const float* h_e = reserved.h_e.raw().data();
  const float* win_e = reserved.windows[size_t(c.n_encoder_layers)].raw().data();
  std::vector<const float*> entries, keys;
  for (const Pool& p : reserved.pools) {
    entries.push_back(p.entries.data());
    keys.push_back(p.keys.data());
  }
  const int32_t* tokens = reserved.tokens.data();
  for (int c0 = 0; c0 < n; c0 += chunk) {
    const std::span<const int32_t> part(prompt.data() + c0, size_t(std::min(chunk, n - c0)));
    PrefillEncode(m, plain, part);
    PrefillEncode(m, reserved, part);
    // Nothing the chunks append to moved (no reallocation mid-prompt).
    CHECK(reserved.h_e.raw().data() == h_e);
    CHECK(reserved.windows[size_t(c.n_encoder_layers)].raw().data() == win_e);
    for (size_t i = 0; i < reserved.pools.size(); ++i) {
      CHECK(reserved.pools[i].entries.data() == entries[i]);
      CHECK(reserved.pools[i].keys.data() == keys[i]);
    }
    CHECK(reserved.tokens.data() == tokens);
  }
  REQUIRE(reserved.h_e.size() == n);  // the chunks did fill it
  const PrefillResult a = PrefillFinish(m, plain, PrefillMode::kBounded);
  const PrefillResult b = PrefillFinish(m, reserved, PrefillMode::kBounded);
  CHECK(SameBits(a.logits, b.logits));
  CHECK(StateHash(plain) == StateHash(reserved));
}

TEST_CASE("Reserve grows a full store at least twofold, so a reserve per turn does not copy it every turn") {
  RowStore r(4);
  r.Reserve(10);
  const size_t cap = r.raw().capacity();
  CHECK(cap >= 40);
  for (int64_t p = 0; p < 10; ++p) r.Append(p)[0] = float(p);
  r.Reserve(0);
  CHECK(r.raw().capacity() == cap);  // room enough: nothing moves
  r.Reserve(1);
  CHECK(r.raw().capacity() >= 2 * cap);
  CHECK(r.Row(9)[0] == 9.0f);
}
