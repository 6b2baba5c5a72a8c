// Sampler::Sample (the selection of the ids with nonzero probability, radix-sorted when many)
// against Sampler::SampleFullSort (the definition by a full stable sort of all ids, the
// implementation before): the same token on every draw, for many seeds, temperatures and top-p
// values, on logits with many ties, grammar-style -inf masks, finite logits whose probability
// underflows to exactly 0, and signed zeros.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "engine/sampling.h"

using cedar::Sampler;
using cedar::SamplingParams;

namespace {

constexpr size_t kVocab = 129280;  // the released vocabulary
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

enum class Shape { kNormal, kTies, kMasked, kUnderflow, kZeros };

// Logits [n] of one shape, drawn from `seed`.
std::vector<float> MakeLogits(Shape shape, size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng) * 3.0f;
  switch (shape) {
    case Shape::kNormal:
      break;
    case Shape::kTies:  // a few distinct values: long runs of equal logits (ties by id)
      for (float& x : v) x = std::round(x);
      break;
    case Shape::kMasked: {  // a grammar mask: all -inf but a few ids, some of them tied
      std::vector<float> masked(n, kNegInf);
      for (int k = 0; k < 12; ++k) masked[rng() % n] = float(rng() % 4);
      v = masked;
      break;
    }
    case Shape::kUnderflow:  // a wide spread: exp((l - max) / T) is exactly 0 for most ids
      for (float& x : v) x *= 400.0f;
      break;
    case Shape::kZeros:  // -0 and +0 compare equal: ties across the sign of zero
      for (size_t i = 0; i < n; ++i) v[i] = (rng() % 3 == 0) ? ((i & 1) ? -0.0f : 0.0f) : std::round(v[i]) - 9.0f;
      break;
  }
  return v;
}

// Draws `draws` tokens with both paths from one seed; returns the first differing draw or -1.
int FirstDifference(const std::vector<float>& logits, SamplingParams params, int draws) {
  Sampler fast(params), reference(params);
  for (int d = 0; d < draws; ++d) {
    if (fast.Sample(logits) != reference.SampleFullSort(logits)) return d;
  }
  return -1;
}

}  // namespace

TEST_CASE("Sample picks the same token as the full stable sort, draw for draw") {
  const Shape shapes[] = {Shape::kNormal, Shape::kTies, Shape::kMasked, Shape::kUnderflow, Shape::kZeros};
  const char* names[] = {"normal", "ties", "masked", "underflow", "zeros"};
  const float temperatures[] = {0.3f, 1.0f, 2.5f};
  const float top_ps[] = {1.0f, 0.95f, 0.5f, 0.0f};
  int cases = 0;
  for (int s = 0; s < 5; ++s) {
    for (uint64_t seed = 1; seed <= 2; ++seed) {
      const std::vector<float> logits = MakeLogits(shapes[s], kVocab, 1000 * uint64_t(s) + seed);
      for (float t : temperatures) {
        for (float top_p : top_ps) {
          const int d = FirstDifference(logits, {t, top_p, seed * 7919 + uint64_t(t * 10)}, 3);
          INFO(names[s] << " logits seed " << seed << ", T " << t << ", top_p " << top_p << ": draw " << d);
          CHECK(d == -1);
          ++cases;
        }
      }
    }
  }
  MESSAGE(cases << " cases of 3 draws over " << kVocab << " logits");
}

TEST_CASE("Sample equals the full sort on small vocabularies, many seeds") {
  // Small vocabularies reach the edge cases often: the fallback after the walk, a top-p cut at
  // the first id, every id tied, a single allowed id.
  std::mt19937_64 rng(5);
  int differences = 0, cases = 0;
  for (uint64_t seed = 0; seed < 3000; ++seed) {
    const size_t n = 2 + rng() % 40;
    const Shape shape = Shape(rng() % 5);
    const std::vector<float> logits = MakeLogits(shape, n, seed);
    const float t = 0.05f + float(rng() % 300) / 100.0f;
    const float top_p = (rng() % 3 == 0) ? 1.0f : float(rng() % 101) / 100.0f;
    if (FirstDifference(logits, {t, top_p, seed}, 16) != -1) ++differences;
    ++cases;
  }
  CHECK(differences == 0);
  MESSAGE(cases << " small-vocabulary cases of 16 draws");
}

TEST_CASE("Sample with a single allowed id and with all ids masked") {
  std::vector<float> one(kVocab, kNegInf);
  one[77] = 1.5f;
  Sampler s({0.8f, 0.9f, 1});
  for (int i = 0; i < 4; ++i) CHECK(s.Sample(one) == 77);
  // All -inf: the definition's arithmetic is NaN; Sample takes the full-sort path literally.
  const std::vector<float> none(64, kNegInf);
  CHECK(FirstDifference(none, {0.8f, 1.0f, 2}, 4) == -1);
}

TEST_CASE("greedy is the argmax, ties toward the lower id") {
  std::vector<float> v(1000, 0.0f);
  v[10] = 3.0f;
  v[20] = 3.0f;
  Sampler greedy({0.0f, 1.0f, 0});
  CHECK(greedy.Sample(v) == 10);
}
