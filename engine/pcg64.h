// NumPy's default generator, reproduced bit for bit: `np.random.default_rng(seed)` is PCG64
// (XSL-RR 128/64) seeded through SeedSequence, and `Generator.integers(low, high, dtype=int64)`
// draws with Lemire's bounded method. The released Engram (engram.py) draws its n-gram hash
// multipliers this way, so the hashes (and hence which table rows a token reads) depend on it.
// Checked against /usr/bin/python3's numpy in tests/v41_python_parity_test.cpp.
#pragma once
#include <cstdint>
#include <vector>

namespace cedar {

// numpy.random.SeedSequence(entropy) with no spawn key, pool size 4: the mixed 32-bit pool.
// `entropy` is the non-negative integer given to default_rng (split into 32-bit words, low first).
class SeedSequence {
 public:
  explicit SeedSequence(uint64_t entropy);
  // generate_state(n_words, np.uint64): n_words 64-bit words (pairs of 32-bit words, low first).
  std::vector<uint64_t> GenerateState64(int n_words) const;

 private:
  uint32_t pool_[4];
};

class Pcg64 {
 public:
  // As np.random.default_rng(seed) / PCG64(seed): SeedSequence(seed).generate_state(4, uint64)
  // gives the 128-bit initial state (words 0, 1: high, low) and increment (words 2, 3).
  explicit Pcg64(uint64_t seed);
  uint64_t Next64();
  // NumPy buffers the upper half of a 64-bit draw: low 32 bits first, then the high 32 bits.
  uint32_t Next32();
  // Generator.integers(low, high, size=n, dtype=np.int64) with endpoint=False (high exclusive).
  // Throws std::invalid_argument when low >= high, as numpy raises ValueError.
  std::vector<int64_t> IntegersInt64(int64_t low, int64_t high, int n);

 private:
  uint64_t BoundedLemire64(uint64_t rng);  // uniform in [0, rng] inclusive
  uint32_t BoundedLemire32(uint32_t rng);
  unsigned __int128 state_ = 0, inc_ = 0;
  bool has_u32_ = false;
  uint32_t u32_ = 0;
};

// The released Engram hash constants of one config (see docs/v41-contract.md, "Engram"):
//   multipliers[layer][k] = 2 * integers(0, max(1, (INT64_MAX // compressed_vocab) // 2)) + 1 for
//     k < max_ngram, from default_rng(10007 * layer_id), in engram_layer_ids order;
//   primes[layer][order-2][head] = the next unused prime above engram_vocab_size - 1, drawn in
//     (layer, order, head) order and never reused across layers.
struct EngramHashConstants {
  std::vector<std::vector<int64_t>> multipliers;                   // [n_engram_layers][max_ngram]
  std::vector<std::vector<std::vector<int64_t>>> primes;           // [n_engram_layers][max_ngram-1][n_heads]
  std::vector<int64_t> table_rows;                                 // sum of a layer's primes
};
EngramHashConstants ComputeEngramHashConstants(const std::vector<int>& layer_ids, int max_ngram, int n_heads,
                                               int64_t vocab_size, int64_t compressed_vocab_size);

}  // namespace cedar
