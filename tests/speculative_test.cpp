// Speculative decoding on v41-tiny written by `cedar init --arch v41` code (engine/v41_init.h) into a
// temp dir (vocabulary cut to 1024 ids, as v41_load_test does, so writing takes a fraction of a second).
#include <doctest/doctest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/dspark.h"
#include "engine/engine.h"
#include "engine/model.h"
#include "engine/speculative.h"
#include "engine/v41_init.h"
#include "tests/speculative_fixture.h"


using namespace spec_test;

namespace {

// Drafts the model's own greedy continuation (from a copy of the state), with every third draft
// (by position) replaced by another token: passes see full acceptance, rejection at every draft
// index and everything between.
class OracleDrafter final : public Drafter {
 public:
  explicit OracleDrafter(const Model& m) : m_(m) {}
  void Propose(const SequenceState& st, int32_t anchor, int k, const SamplingParams&, std::mt19937_64&, std::vector<int32_t>* drafts,
               std::vector<std::vector<double>>*) override {
    SequenceState c = CopyState(st, m_.config());
    int32_t t = anchor;
    for (int i = 0; i < k; ++i) {
      t = Argmax(DecodeStep(m_, c, t));
      const bool corrupt = (st.pos + i * 7) % 3 == 0;
      drafts->push_back(corrupt ? (t + 1) % m_.config().vocab_size : t);
    }
  }

 private:
  const Model& m_;
};

}  // namespace

TEST_CASE("VerifyPass rows equal DecodeStep one token at a time, bit for bit, at every position parity") {
  const Model& m = Tiny();
  const ModelConfig& c = m.config();
  for (int n0 : {9, 10, 17}) {
    for (int n : {1, 2, 5, 16}) {
      const auto prompt = Tokens(n0, c.vocab_size, 100 + uint64_t(n0));
      const auto more = Tokens(n, c.vocab_size, 200 + uint64_t(n));
      SequenceState a(c), b(c);
      PrefillBounded(m, a, prompt);
      PrefillBounded(m, b, prompt);
      VerifyMark mark;
      const auto rows = VerifyPass(m, a, more, &mark);
      RollbackVerify(m, a, mark, n);
      REQUIRE(rows.size() == size_t(n));
      for (int i = 0; i < n; ++i) {
        CAPTURE(n0);
        CAPTURE(n);
        CAPTURE(i);
        CHECK(SameBits(rows[size_t(i)], DecodeStep(m, b, more[size_t(i)])));
      }
      CHECK(StateHash(a) == StateHash(b));
    }
  }
}

TEST_CASE("RollbackVerify to any row count leaves the state of feeding only those tokens (state hash)") {
  const Model& m = Tiny();
  const ModelConfig& c = m.config();
  int checked = 0;
  for (int n0 : {6, 7, 30, 31}) {
    const auto prompt = Tokens(n0, c.vocab_size, 300 + uint64_t(n0));
    const auto more = Tokens(6, c.vocab_size, 400 + uint64_t(n0));
    for (int keep = 0; keep <= 6; ++keep) {
      SequenceState a(c), b(c);
      PrefillBounded(m, a, prompt);
      PrefillBounded(m, b, prompt);
      VerifyMark mark;
      VerifyPass(m, a, more, &mark);
      RollbackVerify(m, a, mark, keep);
      for (int i = 0; i < keep; ++i) DecodeStep(m, b, more[size_t(i)]);
      CAPTURE(n0);
      CAPTURE(keep);
      CHECK(StateHash(a) == StateHash(b));
      // And the rolled-back state goes on like the plain one.
      CHECK(SameBits(DecodeStep(m, a, 5), DecodeStep(m, b, 5)));
      CHECK(StateHash(a) == StateHash(b));
      ++checked;
    }
  }
  CHECK(checked == 28);
  // The hash sees a difference in one pending float (so equal hashes above mean something).
  SequenceState a(c);
  PrefillBounded(m, a, Tokens(7, c.vocab_size, 1));
  const uint64_t h = StateHash(a);
  for (Pool& p : a.pools)
    if (p.has_pending) p.pending_z[0] += 1.0f;
  CHECK(StateHash(a) != h);
}

TEST_CASE("speculative greedy equals plain greedy token for token over 50 seeded prompts (oracle and DSpark drafters)") {
  const Model& m = Tiny();
  const ModelConfig& c = m.config();
  REQUIRE(m.dspark() != nullptr);
  int64_t drafted = 0, accepted = 0, dspark_drafted = 0, dspark_accepted = 0;
  for (int seed = 0; seed < 50; ++seed) {
    const auto prompt = Tokens(5 + seed % 23, c.vocab_size, 1000 + uint64_t(seed));
    GenerateOptions o;
    o.max_tokens = 12 + seed % 5;
    if (seed % 4 == 1) o.stops = {int32_t(seed % 7)};
    SequenceState plain(c);
    const auto lp = PrefillBounded(m, plain, prompt).logits;
    const GenerateResult want = Generate(m, plain, lp, o, nullptr);
    for (int drafter_kind = 0; drafter_kind < 2; ++drafter_kind) {
      SequenceState spec(c);
      OracleDrafter oracle(m);
      DSparkDrafter dspark(m);
      // The DSpark drafter sees the prompt: its target rows captured by the (bounded) prefill.
      HiddenCapture cap = PrefillCaptureFor(m, dspark);
      PrefillOptions po;
      po.mode = PrefillMode::kBounded;
      if (drafter_kind == 1) po.hidden = &cap;
      const auto ls = Prefill(m, spec, prompt, po).logits;
      if (drafter_kind == 1) {
        ObservePrefill(dspark, cap);
        CHECK(dspark.context_rows() == std::min<int64_t>(c.window, int64_t(prompt.size())));
      }
      o.spec_tokens = 1 + (seed + drafter_kind) % 5;
      Drafter* d = drafter_kind == 0 ? static_cast<Drafter*>(&oracle) : &dspark;
      const GenerateResult got = Generate(m, spec, ls, o, d);
      CAPTURE(seed);
      CAPTURE(drafter_kind);
      CHECK(got.tokens == want.tokens);
      CHECK(got.finish == want.finish);
      CHECK(SameBits(got.logits, want.logits));
      CHECK(StateHash(spec) == StateHash(plain));
      if (drafter_kind == 0) {
        drafted += got.drafted;
        accepted += got.accepted;
      } else {
        dspark_drafted += got.drafted;
        dspark_accepted += got.accepted;
      }
      o.spec_tokens = 0;
    }
  }
  MESSAGE("oracle drafter: " << accepted << " of " << drafted << " drafts accepted; DSpark (random weights) " << dspark_accepted << " of " << dspark_drafted);
  // The oracle's acceptance is partial by construction: both paths of the verify were exercised.
  CHECK(accepted > 0);
  CHECK(accepted < drafted);
  CHECK(dspark_drafted > 0);
}

