// Sampling from logits (docs/spec-readings.md #7): greedy, temperature, top-p, seeded.
#pragma once
#include <cstdint>
#include <random>
#include <vector>

namespace cedar {

struct SamplingParams {
  float temperature = 0.0f;  // 0 = greedy (argmax, ties toward the lower id)
  float top_p = 1.0f;        // nucleus mass in (0, 1]
  uint64_t seed = 0;         // seeds the generator of a Sampler
};

class Sampler {
 public:
  explicit Sampler(const SamplingParams& p) : params_(p), rng_(p.seed) {}
  // One token from `logits` [V] (definition in sampling.cpp); orders only the ids with
  // nonzero probability, by an O(V) radix sort when they are many.
  int32_t Sample(const std::vector<float>& logits);
  // The same definition by a full stable sort of all V ids (the implementation before the
  // selection above; 129,280 ids per token): the reference that tests compare Sample with
  // token for token, and Sample's own path for NaN logits or a non-finite maximum.
  int32_t SampleFullSort(const std::vector<float>& logits);

 private:
  SamplingParams params_;
  std::mt19937_64 rng_;
};

int32_t Argmax(const std::vector<float>& logits);

// The distribution Sampler::Sample draws from at temperature > 0: softmax(logits / T) cut to the
// top-p nucleus (ties in the sort toward the lower id) and renormalised; [V], sums to 1.
// Speculative rejection sampling (engine/speculative.h) needs it as a vector.
std::vector<double> SamplingProbs(const std::vector<float>& logits, const SamplingParams& p);
// One draw from probs [V] (non-negative, any positive sum) with `rng`.
int32_t SampleFrom(const std::vector<double>& probs, std::mt19937_64& rng);

// A per-turn hook that edits the logits right before each sampling step and hears which token
// was sampled: grammar-constrained decoding (grammar/logits_processor.h) implements it. Lives
// here, below every user of it, so the session loop can call it without knowing grammars.
// Thread contract: one per turn, called on the engine thread only.
class LogitsProcessor {
 public:
  virtual ~LogitsProcessor() = default;
  // Masks `logits` [V] for the next token (disallowed ids to -inf). Returns false when no
  // token may follow (the constrained output is complete and no end id is allowed).
  virtual bool Process(std::vector<float>& logits) = 0;
  // The token sampled from the processed logits.
  virtual void Accept(int32_t token) = 0;
};

}  // namespace cedar
