// Model-level parity of the CUDA backend (label gpu; exits 77 without a device): the engine's
// path tests (exact = full, chunked = whole, prefill + decode = longer prefill, batched =
// single decode, encoder replay), the golden files, CPU <-> device state copies, all on the
// tiny model; F32 device weights against the CPU engine within F32 tolerance, and BF16
// weights (what --device cuda uses) against the CPU within a tolerance derived from BF16.
// CEDAR_GPU_QUICK=1 runs fewer lengths (tests/gpu_emu/run.sh sets it: the emulator is slow).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "engine/backend.h"
#include "engine/golden_check.h"
#include "tests/state_checks.h"
#include "tests/test_models.h"

using namespace cedar;
using cedar::test::RandomTokens;
using cedar::test::ExpectStatesMatch;
using cedar::test::RelError;
using cedar::test::TinyModel;

namespace {

// F32 tolerance between paths that sum in another order (CPU BLAS vs cuBLAS, batched rows):
// the CPU engine's own kPathTol (tests/engine_test.cpp). Seen under the emulator: 2e-7 to 4e-7.
constexpr double kF32Tol = 2e-5;

bool Quick() { return std::getenv("CEDAR_GPU_QUICK") != nullptr; }

std::vector<int> Lengths() {
  if (Quick()) return {1, 9, 30, 101};
  return {1, 2, 7, 8, 9, 16, 17, 29, 30, 45, 97, 101, 150};
}

const Backend& Cuda(bool f32) {
  static std::unique_ptr<Backend> b32, b16;
  std::unique_ptr<Backend>& b = f32 ? b32 : b16;
  if (!b) {
    BackendOptions o;
    o.device = "cuda";
    o.f32_weights = f32;
    b = MakeBackend(TinyModel(), o);
  }
  return *b;
}
const Backend& Cpu() {
  static std::unique_ptr<Backend> b = MakeBackend(TinyModel(), BackendOptions{});
  return *b;
}

PrefillResult Run(const Backend& b, Sequence& s, const std::vector<int32_t>& t, PrefillMode mode, int chunk = 0) {
  PrefillOptions o;
  o.mode = mode;
  o.chunk_size = chunk;
  return b.Prefill(s, t, o);
}

}  // namespace

TEST_CASE("cuda F32: every mode equals the CPU engine in logits and every piece of state") {
  const ModelConfig& c = TinyModel().config();
  for (int n : Lengths()) {
    for (PrefillMode mode : {PrefillMode::kFull, PrefillMode::kExact, PrefillMode::kBounded, PrefillMode::kBoundedPaper}) {
      if (Quick() && mode == PrefillMode::kBoundedPaper) continue;
      CAPTURE(n);
      const std::string mn = ModeName(mode);
      CAPTURE(mn);
      auto t = RandomTokens(n, c.vocab_size, 100 + n);
      auto cs = Cpu().NewSequence(), gs = Cuda(true).NewSequence();
      const PrefillResult rc = Run(Cpu(), *cs, t, mode), rg = Run(Cuda(true), *gs, t, mode);
      const double e = RelError(rg.logits, rc.logits);
      MESSAGE("n=" << n << " " << mn << ": logits relative error " << e);
      CHECK(e <= kF32Tol);
      CHECK(rg.stats.layer_token_units == rc.stats.layer_token_units);
      CHECK(rg.stats.decoder_rows == rc.stats.decoder_rows);
      ExpectStatesMatch(c, Cuda(true).Download(*gs), Cpu().Download(*cs), kF32Tol);
    }
  }
}

TEST_CASE("cuda: exact equals full, chunked equals whole, prefill + decode equals a longer prefill") {
  const Backend& g = Cuda(true);
  const ModelConfig& c = g.model().config();
  for (int n : Lengths()) {
    CAPTURE(n);
    auto t = RandomTokens(n, c.vocab_size, 200 + n);
    auto full = g.NewSequence(), exact = g.NewSequence();
    const PrefillResult rf = Run(g, *full, t, PrefillMode::kFull), re = Run(g, *exact, t, PrefillMode::kExact);
    CHECK(RelError(re.logits, rf.logits) <= kF32Tol);
    ExpectStatesMatch(c, g.Download(*exact), g.Download(*full), kF32Tol);
    for (int chunk : {3, 8}) {
      if (chunk >= n || (Quick() && n != 30)) continue;
      CAPTURE(chunk);
      for (PrefillMode mode : {PrefillMode::kExact, PrefillMode::kBounded}) {
        auto whole = g.NewSequence(), chunked = g.NewSequence();
        CHECK(RelError(Run(g, *chunked, t, mode, chunk).logits, Run(g, *whole, t, mode).logits) <= kF32Tol);
        ExpectStatesMatch(c, g.Download(*chunked), g.Download(*whole), kF32Tol);
      }
    }
  }
  // Prefill of n then decode of 3 tokens == prefill of n + 3 (full mode) at every step's logits.
  const int n = Quick() ? 21 : 45;
  auto t = RandomTokens(n + 3, c.vocab_size, 300);
  auto dec = g.NewSequence();
  Run(g, *dec, std::vector<int32_t>(t.begin(), t.begin() + n), PrefillMode::kExact);
  for (int i = 0; i < 3; ++i) {
    CAPTURE(i);
    StepStats s;
    const std::vector<float> step = g.DecodeStep(*dec, t[size_t(n + i)], &s);
    CHECK(s.layer_token_units == c.n_layers);
    auto longer = g.NewSequence();
    CHECK(RelError(step, Run(g, *longer, std::vector<int32_t>(t.begin(), t.begin() + n + i + 1), PrefillMode::kFull).logits) <= kF32Tol);
  }
}

TEST_CASE("cuda: batched decode equals one sequence at a time, and equals the CPU's") {
  const Backend& g = Cuda(true);
  const ModelConfig& c = g.model().config();
  const std::vector<int> lens = Quick() ? std::vector<int>{1, 30, 77} : std::vector<int>{1, 9, 30, 77, 150};
  std::vector<std::unique_ptr<Sequence>> a, b, cpu;
  for (int n : lens) {
    auto t = RandomTokens(n, c.vocab_size, 800 + n);
    const PrefillMode mode = n % 2 ? PrefillMode::kBounded : PrefillMode::kExact;
    a.push_back(g.NewSequence());
    b.push_back(g.NewSequence());
    cpu.push_back(Cpu().NewSequence());
    Run(g, *a.back(), t, mode);
    Run(g, *b.back(), t, mode);
    Run(Cpu(), *cpu.back(), t, mode);
  }
  std::vector<Sequence*> ptrs, cpu_ptrs;
  for (auto& s : a) ptrs.push_back(s.get());
  for (auto& s : cpu) cpu_ptrs.push_back(s.get());
  for (int step = 0; step < 2; ++step) {
    std::vector<int32_t> toks;
    for (size_t i = 0; i < a.size(); ++i) toks.push_back(int32_t((step * 31 + i * 7) % c.vocab_size));
    std::vector<StepStats> stats;
    auto batch = g.DecodeBatch(ptrs, toks, &stats);
    auto cpu_batch = Cpu().DecodeBatch(cpu_ptrs, toks);
    for (size_t i = 0; i < a.size(); ++i) {
      CAPTURE(i);
      CHECK(RelError(batch[i], g.DecodeStep(*b[i], toks[i])) <= kF32Tol);
      CHECK(RelError(batch[i], cpu_batch[i]) <= kF32Tol);
      CHECK(stats[i].layer_token_units == c.n_layers);
      ExpectStatesMatch(c, g.Download(*a[i]), g.Download(*b[i]), kF32Tol);
    }
  }
}

TEST_CASE("cuda: Download and Upload carry a state exactly, between devices too") {
  const Backend& g = Cuda(true);
  const ModelConfig& c = g.model().config();
  for (int n : {Quick() ? 21 : 45, 30}) {  // odd: a pending half group crosses the copies
    CAPTURE(n);
    auto t = RandomTokens(n + 2, c.vocab_size, 400 + n);
    const std::vector<int32_t> prompt(t.begin(), t.begin() + n);
    auto orig = g.NewSequence();
    Run(g, *orig, prompt, PrefillMode::kBounded);
    const SequenceState host = g.Download(*orig);
    CHECK(host.pools[0].has_pending == (n % 2 == 1));
    auto copy = g.Upload(host);
    ExpectStatesMatch(c, g.Download(*copy), host, 0.0);
    // The copy continues exactly as the original (same device, same arithmetic: bit-identical).
    for (int i = 0; i < 2; ++i) CHECK(g.DecodeStep(*copy, t[size_t(n + i)]) == g.DecodeStep(*orig, t[size_t(n + i)]));
    // A CPU state continued on the device equals the CPU continuing it (F32 tolerance).
    auto cs = Cpu().NewSequence();
    Run(Cpu(), *cs, prompt, PrefillMode::kBounded);
    auto moved = g.Upload(Cpu().Download(*cs));
    for (int i = 0; i < 2; ++i) CHECK(RelError(g.DecodeStep(*moved, t[size_t(n + i)]), Cpu().DecodeStep(*cs, t[size_t(n + i)])) <= kF32Tol);
    ExpectStatesMatch(c, g.Download(*moved), Cpu().Download(*cs), kF32Tol);
  }
}

TEST_CASE("cuda: encoder replay from an evicted state equals the CPU's") {
  const Backend& g = Cuda(true);
  const ModelConfig& c = g.model().config();
  for (int P : {Quick() ? 5 : 3, 21}) {
    CAPTURE(P);
    auto t = RandomTokens(P + 4, c.vocab_size, 700 + P);
    const std::vector<int32_t> prefix(t.begin(), t.begin() + P), suffix(t.begin() + P, t.end());
    auto cs = Cpu().NewSequence();
    Run(Cpu(), *cs, prefix, PrefillMode::kFull);
    SequenceState evicted = Cpu().Download(*cs);
    evicted.DropWindowsAndResidual();
    auto gs = g.Upload(evicted);
    cs = Cpu().Upload(evicted);
    const StepStats sg = g.EncoderReplay(*gs), sc = Cpu().EncoderReplay(*cs);
    CHECK(sg.replay_rows == sc.replay_rows);
    CHECK(sg.layer_token_units == sc.layer_token_units);
    ExpectStatesMatch(c, g.Download(*gs), Cpu().Download(*cs), kF32Tol);
    CHECK(RelError(Run(g, *gs, suffix, PrefillMode::kBounded).logits, Run(Cpu(), *cs, suffix, PrefillMode::kBounded).logits) <= kF32Tol);
  }
}

TEST_CASE("cuda F32: the golden files of the reference") {
  const std::filesystem::path root = std::filesystem::path(CEDAR_SOURCE_DIR) / "tests" / "golden";
  int cases = 0;
  for (const auto& entry : std::filesystem::directory_iterator(root)) {
    if (!std::filesystem::exists(entry.path() / "golden.safetensors")) continue;
    if (Quick() && entry.path().filename() != "tiny") continue;
    ++cases;
    auto m = Model::Load(entry.path().string());
    BackendOptions o;
    o.device = "cuda";
    o.f32_weights = true;
    auto b = MakeBackend(*m, o);
    GoldenReport r = CheckGolden(*b, (entry.path() / "golden.safetensors").string(), 1e-4);
    MESSAGE(entry.path().filename().string() << " on " << b->Describe() << ": worst relative logit error "
                                             << r.worst_logit_rel_error << " at " << r.worst_where);
    CAPTURE(r.checks.dump());
    CHECK(r.ok);
    CHECK(r.topk_checked > 0);
  }
  CHECK(cases >= 1);
}

// BF16 weights: every product rounds its weights and its F32 activations to BF16 (relative
// error 2^-9 each, so about 2^-8 per product). The logits pass through about six products in
// series per layer (wq_a, wq_b, wo_a, wo_b, W1/W3, W2) and L = 8 layers, and the residual
// stream carries the errors forward additively: 6 · 8 · 2^-8 ≈ 0.19 is the worst-case sum; the
// errors are independent roundings, so their typical sum is about its square root over the 48
// terms, sqrt(48) · 2^-8 ≈ 0.027. The bound is twice that: 0.054.
constexpr double kBf16Tol = 2 * 6.93 / 256;

TEST_CASE("cuda BF16: logits within the BF16 bound and the greedy tokens of the CPU") {
  const Backend& g = Cuda(false);
  const ModelConfig& c = g.model().config();
  for (int n : {Quick() ? 30 : 45, 101}) {
    CAPTURE(n);
    auto t = RandomTokens(n, c.vocab_size, 900 + n);
    auto cs = Cpu().NewSequence(), gs = g.NewSequence();
    std::vector<float> lc = Run(Cpu(), *cs, t, PrefillMode::kBounded).logits, lg = Run(g, *gs, t, PrefillMode::kBounded).logits;
    int agree = 0, decided = 0;
    for (int step = 0; step < 4; ++step) {
      CAPTURE(step);
      const double e = RelError(lg, lc);
      MESSAGE("n=" << n << " step " << step << ": BF16 logits relative error " << e << " (bound " << kBf16Tol << ")");
      CHECK(e <= kBf16Tol);
      // Greedy tokens must agree wherever the CPU's top-two margin exceeds twice the error bound.
      int best = 0, second = -1;
      float scale = 0;
      for (int v = 0; v < c.vocab_size; ++v) {
        scale = std::max(scale, std::fabs(lc[size_t(v)]));
        if (lc[size_t(v)] > lc[size_t(best)]) second = best, best = v;
        else if (v != best && (second < 0 || lc[size_t(v)] > lc[size_t(second)])) second = v;
      }
      const int gbest = int(std::max_element(lg.begin(), lg.end()) - lg.begin());
      agree += gbest == best;
      if (lc[size_t(best)] - lc[size_t(second)] > 2 * kBf16Tol * scale) {
        ++decided;
        CHECK(gbest == best);
      }
      // Teacher-forced with the CPU's token, so one flip does not change every later step.
      lc = Cpu().DecodeStep(*cs, int32_t(best));
      lg = g.DecodeStep(*gs, int32_t(best));
    }
    MESSAGE("n=" << n << ": greedy agreement " << agree << "/4, " << decided << " steps past the margin");
  }
}
