// Speculative sampling keeps the model's distribution (engine/speculative.h): the rejection rule on
// a tiny vocabulary against a deliberately wrong variant, and sampled generation on v41-tiny.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "engine/dspark.h"
#include "engine/sampling.h"
#include "engine/speculative.h"
#include "tests/speculative_fixture.h"

using namespace spec_test;

namespace {

// Pearson chi-square of `counts` against probabilities p (cells with p = 0 must stay empty).
double ChiSquare(const std::vector<int64_t>& counts, const std::vector<double>& p, int64_t n, bool* zero_cell_hit) {
  double x2 = 0;
  *zero_cell_hit = false;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] == 0) {
      if (counts[i] != 0) *zero_cell_hit = true;
      continue;
    }
    const double e = p[i] * double(n);
    x2 += (double(counts[i]) - e) * (double(counts[i]) - e) / e;
  }
  return x2;
}

// A deliberately wrong variant: on rejection it resamples from p itself (not the residual).
int32_t WrongSample(const std::vector<double>& p, const std::vector<double>& q, int32_t d, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> u(0.0, 1.0);
  if (u(rng) < std::min(1.0, p[size_t(d)] / q[size_t(d)])) return d;
  return SampleFrom(p, rng);
}

}  // namespace

TEST_CASE("speculative rejection sampling keeps the target distribution (chi-square); a wrong variant fails") {
  // A 6-token vocabulary, p and q far apart (q puts mass where p has none).
  const std::vector<double> p = {0.40, 0.25, 0.15, 0.10, 0.10, 0.00};
  const std::vector<double> q = {0.10, 0.10, 0.30, 0.20, 0.10, 0.20};
  const int64_t N = 200000;
  std::mt19937_64 rng(12345);
  std::vector<int64_t> good(6, 0), bad(6, 0);
  int64_t acc = 0;
  for (int64_t i = 0; i < N; ++i) {
    const int32_t d = SampleFrom(q, rng);
    bool a;
    good[size_t(SpeculativeSample(p, q, d, rng, &a))]++;
    acc += a;
    bad[size_t(WrongSample(p, q, SampleFrom(q, rng), rng))]++;
  }
  bool zero_good, zero_bad;
  const double x2_good = ChiSquare(good, p, N, &zero_good), x2_bad = ChiSquare(bad, p, N, &zero_bad);
  // 4 degrees of freedom (5 cells with p > 0): the 0.999 quantile is 18.47.
  MESSAGE("chi-square: speculative " << x2_good << ", wrong variant " << x2_bad << "; acceptance " << double(acc) / N);
  CHECK_FALSE(zero_good);
  CHECK(x2_good < 18.47);
  CHECK(x2_bad > 18.47);
  // The acceptance rate is sum_i min(p_i, q_i) = 0.1 + 0.1 + 0.15 + 0.1 + 0.1 = 0.55.
  CHECK(std::abs(double(acc) / N - 0.55) < 0.01);
}

TEST_CASE("sampled speculative generation on v41-tiny: the first tokens follow the model's distribution") {
  // The distribution of the 2nd produced token given a fixed prompt, by plain and by speculative
  // sampling (DSpark drafts, k = 2), at temperature 1 on a 1024-id vocabulary: compared on the
  // model's own p for token 1 conditioned on token 0 being the most likely one.
  const Model& m = Tiny();
  const ModelConfig& c = m.config();
  const auto prompt = Tokens(9, c.vocab_size, 77);
  SequenceState base(c);
  const auto l0 = PrefillBounded(m, base, prompt).logits;
  // Temperature 0.35: a few tokens carry the mass, so the chi-square cells stay populated.
  SamplingParams sp{0.35f, 1.0f, 0};
  const std::vector<double> p0 = SamplingProbs(l0, sp);
  const int32_t t0 = int32_t(std::max_element(p0.begin(), p0.end()) - p0.begin());
  SequenceState s1 = CopyState(base, c);
  const std::vector<double> p1 = SamplingProbs(DecodeStep(m, s1, t0), sp);
  // Token 0 is forced (logits -inf but at t0), so every trial samples token 1 | t0.
  std::vector<float> forced(l0.size(), -INFINITY);
  forced[size_t(t0)] = 0.0f;
  const int trials = 1200;
  std::vector<int64_t> counts(size_t(c.vocab_size), 0);
  int64_t n = 0;
  for (int i = 0; i < trials; ++i) {
    SequenceState s = CopyState(base, c);
    GenerateOptions o;
    o.max_tokens = 3;
    o.sampling = sp;
    o.sampling.seed = 5000 + uint64_t(i);
    o.spec_tokens = 2;
    DSparkDrafter d(m);
    const GenerateResult r = Generate(m, s, forced, o, &d);
    REQUIRE(r.tokens.size() == 3);
    REQUIRE(r.tokens[0] == t0);
    counts[size_t(r.tokens[1])]++;
    ++n;
  }
  // Merge cells with expected count < 5 into one.
  std::vector<double> pp;
  std::vector<int64_t> cc;
  double rest_p = 0;
  int64_t rest_c = 0;
  for (int v = 0; v < c.vocab_size; ++v) {
    if (p1[size_t(v)] * double(n) >= 5) {
      pp.push_back(p1[size_t(v)]);
      cc.push_back(counts[size_t(v)]);
    } else {
      rest_p += p1[size_t(v)];
      rest_c += counts[size_t(v)];
    }
  }
  pp.push_back(rest_p);
  cc.push_back(rest_c);
  bool zero;
  const double x2 = ChiSquare(cc, pp, n, &zero);
  MESSAGE("token 1 | token 0 = " << t0 << ": " << n << " samples over " << pp.size() << " cells, chi-square " << x2);
  REQUIRE(n == trials);
  REQUIRE(pp.size() >= 3);
  // The 0.999 quantile of chi-square with cells - 1 degrees of freedom (Wilson-Hilferty).
  const double dof = double(pp.size() - 1), z = 3.0902;
  const double q999 = dof * std::pow(1 - 2 / (9 * dof) + z * std::sqrt(2 / (9 * dof)), 3);
  MESSAGE("0.999 quantile " << q999);
  CHECK(x2 < q999);
}
