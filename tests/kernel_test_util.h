// Helpers the kernel tests share: seeded normal inputs and a bitwise comparison.
#pragma once
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

namespace cedar::test {

// n floats from N(0, 1), the same for the same seed.
inline std::vector<float> RandomNormal(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// a[0, n) and b[0, n) bit for bit (-0.0 differs from +0.0; a NaN equals the same NaN).
inline bool SameBits(const float* a, const float* b, size_t n) { return std::memcmp(a, b, n * sizeof(float)) == 0; }

}  // namespace cedar::test
