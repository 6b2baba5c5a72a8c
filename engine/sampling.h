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
  int32_t Sample(const std::vector<float>& logits);

 private:
  SamplingParams params_;
  std::mt19937_64 rng_;
};

int32_t Argmax(const std::vector<float>& logits);

}  // namespace cedar
