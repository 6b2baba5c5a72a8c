// What the mixed scheduler (session/, issue 14) relies on in the engine, bit for bit:
//  - chunked prefill in separate calls (PrefillEncode per chunk, then PrefillFinish) equals
//    Prefill with the same chunk boundaries, so a turn's prefill may be spread over steps;
//  - a decode row batched with up to 15 others equals the same row decoded alone, so a
//    decoding turn's tokens do not depend on which other turns decode in the same step.
#include <doctest/doctest.h>

#include <cstring>

#include "engine/backend.h"
#include "tests/state_checks.h"
#include "tests/test_models.h"

using namespace cedar;
using cedar::test::ExpectStatesMatch;
using cedar::test::RandomTokens;
using cedar::test::TinyModel;

namespace {

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("PrefillEncode chunk by chunk then PrefillFinish equals Prefill with the same chunks, bit for bit") {
  const Model& m = TinyModel();
  const ModelConfig& c = m.config();
  for (PrefillMode mode : {PrefillMode::kExact, PrefillMode::kBounded}) {
    for (int n : {1, 7, 30, 97, 150}) {
      for (int chunk : {1, 8, 13, 64}) {
        CAPTURE(ModeName(mode));
        CAPTURE(n);
        CAPTURE(chunk);
        auto toks = RandomTokens(n, c.vocab_size, 4000 + n);
        // A live prefix first (so the decoder phase has a live decoder state below it), then the chunks.
        auto head = RandomTokens(20, c.vocab_size, 17);
        SequenceState a(c), b(c);
        PrefillOptions o;
        o.mode = mode;
        o.chunk_size = chunk;
        Prefill(m, a, head, o);
        Prefill(m, b, head, o);
        const PrefillResult whole = Prefill(m, a, toks, o);
        int64_t units = 0;
        for (int c0 = 0; c0 < n; c0 += chunk) {
          const int len = std::min(chunk, n - c0);
          units += PrefillEncode(m, b, std::span<const int32_t>(toks.data() + c0, size_t(len))).layer_token_units;
        }
        const PrefillResult fin = PrefillFinish(m, b, mode);
        CHECK(SameBits(whole.logits, fin.logits));
        CHECK(units + fin.stats.layer_token_units == whole.stats.layer_token_units);
        CHECK(fin.stats.decoder_rows == whole.stats.decoder_rows);
        ExpectStatesMatch(c, a, b, 0.0);
      }
    }
  }
}

TEST_CASE("PrefillFinish refuses full mode and a state with nothing encoded") {
  const Model& m = TinyModel();
  SequenceState st(m.config());
  CHECK_THROWS_AS(PrefillFinish(m, st, PrefillMode::kFull), std::invalid_argument);
  CHECK_THROWS_AS(PrefillFinish(m, st, PrefillMode::kExact), std::invalid_argument);
}

TEST_CASE("a decode row batched with up to 15 others equals the row decoded alone, bit for bit") {
  const Model& m = TinyModel();
  const ModelConfig& c = m.config();
  constexpr int B = 16;
  std::vector<SequenceState> a, b;
  for (int i = 0; i < B; ++i) {
    auto t = RandomTokens(3 + 11 * i, c.vocab_size, 900 + i);
    PrefillOptions o;
    o.mode = i % 2 ? PrefillMode::kBounded : PrefillMode::kExact;
    a.emplace_back(c);
    b.emplace_back(c);
    Prefill(m, a.back(), t, o);
    Prefill(m, b.back(), t, o);
  }
  for (int step = 0; step < 3; ++step) {
    // Batches of every size from 1 to 16 across the steps' turns.
    const int size = step == 0 ? B : step == 1 ? 5 : 1;
    std::vector<SequenceState*> ptrs;
    std::vector<int32_t> toks;
    for (int i = 0; i < size; ++i) {
      ptrs.push_back(&a[size_t(i)]);
      toks.push_back(int32_t((step * 37 + i * 5) % c.vocab_size));
    }
    auto batch = DecodeBatch(m, ptrs, toks);
    for (int i = 0; i < size; ++i) {
      CAPTURE(step);
      CAPTURE(i);
      CHECK(SameBits(batch[size_t(i)], DecodeStep(m, b[size_t(i)], toks[size_t(i)])));
      ExpectStatesMatch(c, a[size_t(i)], b[size_t(i)], 0.0);
    }
  }
}

TEST_CASE("the CPU backend offers chunked prefill") {
  auto be = MakeBackend(TinyModel(), BackendOptions{});
  CHECK(be->SupportsChunkedPrefill());
  auto s = be->NewSequence();
  auto t = RandomTokens(40, TinyModel().config().vocab_size, 3);
  be->PrefillEncode(*s, std::span<const int32_t>(t.data(), 25));
  be->PrefillEncode(*s, std::span<const int32_t>(t.data() + 25, 15));
  CHECK(s->pos() == 40);
  CHECK(s->decoder_pos() == 0);
  auto r = be->PrefillFinish(*s, PrefillMode::kExact);
  CHECK(s->decoder_pos() == 40);
  CHECK(r.logits.size() == size_t(TinyModel().config().vocab_size));
}
