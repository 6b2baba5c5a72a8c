// Issue 21 ("one engine, not two"): with the released switches at their defaults (hc_mult 1,
// rope_factor 1, score_func sqrtsoftplus, norm_topk_prob true) the forward must stay
// BIT-IDENTICAL to the one before the switches were implemented. Each scenario below hashes
// (XXH3) the bytes of every logits vector it produces and of the whole state it leaves (every
// window store, every pool with its pending half group, H_E, positions, tokens) and compares
// with the value recorded from commit 692fc3c's code (before this work), on the build machine
// of that session (x86-64 AVX2, -march=native, OpenBLAS; kernels choose code paths per ISA, so
// another CPU family may legitimately round differently: then record that platform's digests,
// as kRecordedAvx512 below, and the test guards its bits from then on).
#include <doctest/doctest.h>
#include <xxhash.h>

#include <cstdio>
#include <map>
#include <iterator>
#include <memory>
#include <span>
#include <string>

#include "engine/init.h"
#include "kernels/hw_probe.h"
#include "tests/test_models.h"

using namespace cedar;
using cedar::test::RandomTokens;

namespace {

class Hasher {
 public:
  Hasher() { XXH3_64bits_reset(st_); }
  ~Hasher() { XXH3_freeState(st_); }
  void Bytes(const void* p, size_t n) { XXH3_64bits_update(st_, p, n); }
  void I64(int64_t v) { Bytes(&v, sizeof v); }
  void Floats(const std::vector<float>& v) {
    I64(int64_t(v.size()));
    Bytes(v.data(), v.size() * sizeof(float));
  }
  void Store(const RowStore& s) {
    I64(s.dim());
    I64(s.lo());
    I64(s.hi());
    Floats(s.raw());
  }
  void State(const SequenceState& st) {
    I64(st.pos);
    I64(st.decoder_pos);
    I64(st.replayed ? st.replayed_at : -1);
    Bytes(st.tokens.data(), st.tokens.size() * sizeof(int32_t));
    for (const RowStore& w : st.windows) Store(w);
    for (const Pool& p : st.pools) {
      I64(p.layer);
      I64(p.rows_seen);
      I64(p.has_pending);
      Floats(p.entries);
      Floats(p.keys);
      Floats(p.pending_c);
      Floats(p.pending_z);
    }
    Store(st.h_e);
  }
  uint64_t Digest() const { return XXH3_64bits_digest(st_); }

 private:
  XXH3_state_t* st_ = XXH3_createState();
};

PrefillResult Run(const Model& m, SequenceState& st, const std::vector<int32_t>& t, PrefillMode mode, int chunk = 0) {
  PrefillOptions o;
  o.mode = mode;
  o.chunk_size = chunk;
  return Prefill(m, st, t, o);
}

// The scenarios: every mode, chunked prefill, decode, batched decode, both restores. Each
// returns the digest of everything it produced.
uint64_t Scenario(const Model& m, int which, int n) {
  const ModelConfig& c = m.config();
  Hasher h;
  const auto t = RandomTokens(n, c.vocab_size, 4100 + uint64_t(which) * 31 + uint64_t(n));
  const auto more = RandomTokens(3, c.vocab_size, 9100 + uint64_t(which));
  SequenceState st(c);
  switch (which) {
    case 0:  // full prefill, then decode
      h.Floats(Run(m, st, t, PrefillMode::kFull).logits);
      for (int32_t tok : more) h.Floats(DecodeStep(m, st, tok));
      break;
    case 1:  // exact, chunked, then a second exact prefill on top, then decode
      h.Floats(Run(m, st, t, PrefillMode::kExact, 5).logits);
      h.State(st);
      h.Floats(Run(m, st, more, PrefillMode::kExact).logits);
      h.Floats(DecodeStep(m, st, more[0]));
      break;
    case 2:  // bounded and bounded-paper
      h.Floats(Run(m, st, t, PrefillMode::kBounded).logits);
      h.State(st);
      {
        SequenceState p(c);
        h.Floats(Run(m, p, t, PrefillMode::kBoundedPaper).logits);
        h.State(p);
      }
      break;
    case 3: {  // batched decode of two sequences
      SequenceState b(c);
      Run(m, st, t, PrefillMode::kFull);
      Run(m, b, std::vector<int32_t>(t.begin(), t.begin() + n / 2), PrefillMode::kExact);
      SequenceState* both[] = {&st, &b};
      for (int32_t tok : more) {
        const int32_t toks[] = {tok, int32_t((tok + 7) % c.vocab_size)};
        for (const auto& lg : DecodeBatch(m, both, toks)) h.Floats(lg);
      }
      h.State(b);
      break;
    }
    case 4: {  // encoder replay, exact encoder restore, layer E rebuild, then prefill on top
      Run(m, st, t, PrefillMode::kExact);
      SequenceState r = CopyState(st, c), x = CopyState(st, c);
      EncoderReplay(m, r);
      h.State(r);
      h.Floats(Run(m, r, more, PrefillMode::kBounded).logits);
      h.State(r);
      ExactEncoderRestore(m, x);
      h.State(x);
      RebuildLayerEWindow(m, x);
      h.State(x);
      h.Floats(Run(m, x, more, PrefillMode::kExact).logits);
      break;
    }
  }
  h.State(st);
  return h.Digest();
}

struct Recorded {
  const char* preset;
  int which, n;
  uint64_t digest;
};

// Recorded from commit 692fc3c's code (before issue 21's forward work), with this file's
// scenarios; RE-RECORDED when the AVX2 one-row product (MatVec, decode) changed from OpenBLAS
// sgemv to the lane-16 summation order (kernels/gemm_rowinv.h) that the AVX-512 path already
// used and the row-invariant GEMM reproduces: every decode logit's low bits moved on AVX2
// builds (the forward itself did not change; AVX-512 builds keep their bits); RE-RECORDED again
// when the AVX2 SinkAttention for head counts divisible by 4 moved to the tiled kernel
// (kernels/attention_tiled.cpp: 8-lane FMA chains per dot with a hadd tree, vector softmax sums,
// a different order than the per-entry loop it replaced, ~1.5x its rate); RE-RECORDED when
// the many-row F32 products (prefill, above 16 rows) moved from OpenBLAS sgemm to
// kernels/gemm_prefill.h (one FMA chain per output over all of K, where sgemm summed K in
// blocks: the low bits of every prefill product moved; decode's products did not change); and
// RE-RECORDED when the AVX2 SwiGLU moved from std::exp to the vectorised ExpNonPositive8 (e^-|g|,
// ~1 ulp, kernels/exp_avx2.h: every SwiGLU output's low bits, prefill and decode alike); seeds: model seed 1, tokens as in Scenario. (small was checked too, by hand, with
// the row {"small", 1, 150, 0x0c9e9e64780e5ec0ull}: equal before and after issue 21's forward
// work; making its 130M-parameter model takes ~15 s here, too long for a test.)
const Recorded kRecordedAvx2[] = {
    {"tiny", 0, 37, 0x5c1c5db77c6cccbeull},
    {"tiny", 1, 37, 0x8f9590236268e82bull},
    {"tiny", 2, 37, 0xabb0b7ef23a44451ull},
    {"tiny", 3, 37, 0x1389d614e8bc9ab3ull},
    {"tiny", 4, 37, 0x27afba06be015155ull},
    {"tiny", 0, 150, 0x5d2e8d9730c1afdaull},
    {"tiny", 1, 150, 0x02b67c4b3abee5abull},
    {"tiny", 2, 150, 0xd7217f9da94c3715ull},
    {"tiny", 3, 150, 0x870e786a9f1f80c1ull},
    {"tiny", 4, 150, 0xbcff6bfbaec7e218ull},
};

// The same scenarios on the AVX-512 EPYC (Zen 5, -march=native: AVX-512 F, BW, VBMI, VNNI and BF16
// kernels), recorded from 91fe3d1's code (session 49), not from 692fc3c: from then on they hold
// this platform's bits as kRecordedAvx2 holds the AVX2 machine's. Identical with OpenBLAS on its
// Haswell kernels (OPENBLAS_CORETYPE=Haswell, set in that machine's shell) and on the Cooperlake
// ones it picks itself, and with 1 or 2 OpenBLAS threads (checked there): prefill's products are
// Cedar's own (kernels/gemm_prefill.h), so OpenBLAS's kernel does not reach these digests.
const Recorded kRecordedAvx512[] = {
    {"tiny", 0, 37, 0x796f83d181faa25aull},
    {"tiny", 1, 37, 0xa8c045b3baec5d7cull},
    {"tiny", 2, 37, 0xbc717d880ee4a718ull},
    {"tiny", 3, 37, 0x5b4eed8d6fc5dc50ull},
    {"tiny", 4, 37, 0x3321971335d75641ull},
    {"tiny", 0, 150, 0xd8c2030f73291e89ull},
    {"tiny", 1, 150, 0x4c444967794886beull},
    {"tiny", 2, 150, 0xf6da10494d3ad819ull},
    {"tiny", 3, 150, 0x89a4706bc34b5d4bull},
    {"tiny", 4, 150, 0xc507975f8d16bd18ull},
};

// The code paths the recorded digests depend on: the ISA the kernels were compiled for
// (-march=native), the kernel OpenBLAS picked at run time for this CPU, and whether the build is
// sanitised (-DCEDAR_SANITIZE=ON, -DCEDAR_TSAN=ON): the recorded digests differ under both (sessions
// 47, 48) while the paths the engine tests compare still agree. The instrumentation changes code
// generation; the likely cause is inlining, and with it where GNU mode contracts a * b + c into
// one FMA (not isolated).
std::string PlatformSignature() {
  std::string s;
#ifdef __SANITIZE_ADDRESS__
  s += "asan ";
#endif
#ifdef __SANITIZE_THREAD__
  s += "tsan ";
#endif
#ifdef __AVX512F__
  s += "avx512f ";
#endif
#ifdef __AVX512BW__
  s += "avx512bw ";
#endif
#ifdef __AVX512VBMI__
  s += "avx512vbmi ";
#endif
#ifdef __AVX512VNNI__
  s += "avx512vnni ";
#endif
#ifdef __AVX512BF16__
  s += "avx512bf16 ";
#endif
#ifdef __AVX2__
  s += "avx2 ";
#endif
#ifdef __FMA__
  s += "fma ";
#endif
  return s + "openblas:" + kernels::BlasCore();
}
// Where each table was measured: kRecordedAvx2 on the build machine of 692fc3c's session (AMD
// EPYC, Zen kernels), kRecordedAvx512 on the AVX-512 EPYC of session 49 (both OpenBLAS kernels).
struct RecordedOn {
  const char* signature;  // PlatformSignature() there
  const Recorded* rows;
  size_t n;
};
const RecordedOn kPlatforms[] = {
    {"avx2 fma openblas:Zen", kRecordedAvx2, std::size(kRecordedAvx2)},
    {"avx512f avx512bw avx512vbmi avx512vnni avx512bf16 avx2 fma openblas:Haswell", kRecordedAvx512, std::size(kRecordedAvx512)},
    {"avx512f avx512bw avx512vbmi avx512vnni avx512bf16 avx2 fma openblas:Cooperlake", kRecordedAvx512, std::size(kRecordedAvx512)},
};

}  // namespace

TEST_CASE("with the released switches at their defaults the forward is bit-identical to before issue 21") {
  // Bits are only comparable on the code paths they were recorded on; elsewhere the test says
  // so and checks nothing (record that platform's digests in kPlatforms to cover it).
  const RecordedOn* on = nullptr;
  std::string where;
  for (const RecordedOn& p : kPlatforms) {
    if (PlatformSignature() == p.signature) on = &p;
    where += std::string(where.empty() ? "'" : ", '") + p.signature + "'";
  }
  if (!on) {
    MESSAGE("recorded on " << where << "; this build runs '" << PlatformSignature() << "': not comparable, skipped");
    return;
  }
  std::map<std::string, std::unique_ptr<const Model>> models;
  int mismatches = 0;
  for (const Recorded& r : std::span(on->rows, on->n)) {
    if (!models.count(r.preset)) {
      ModelConfig c;
      REQUIRE(PresetConfig(r.preset, &c));
      models[r.preset] = test::MakeModel(c, 1);
    }
    const uint64_t got = Scenario(*models[r.preset], r.which, r.n);
    char line[160];
    std::snprintf(line, sizeof line, "    {\"%s\", %d, %d, 0x%016llxull},", r.preset, r.which, r.n, (unsigned long long)got);
    MESSAGE(line);
    if (got != r.digest) ++mismatches;
  }
  CHECK(mismatches == 0);
}
