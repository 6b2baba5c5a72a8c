#include "engine/pcg64.h"

#include <limits>
#include <set>
#include <stdexcept>
#include <string>

namespace cedar {

namespace {
// SeedSequence constants (numpy/random/bit_generator.pyx).
constexpr uint32_t kInitA = 0x43b0d7e5, kMultA = 0x931e8875, kInitB = 0x8b51f9dd, kMultB = 0x58f38ded;
constexpr uint32_t kMixMultL = 0xca01f9dd, kMixMultR = 0x4973f715;
constexpr int kXShift = 16;  // 4 bytes * 8 / 2

uint32_t HashMix(uint32_t value, uint32_t& hash_const) {
  value ^= hash_const;
  hash_const *= kMultA;
  value *= hash_const;
  value ^= value >> kXShift;
  return value;
}

uint32_t Mix(uint32_t x, uint32_t y) {
  uint32_t r = kMixMultL * x - kMixMultR * y;
  r ^= r >> kXShift;
  return r;
}

// PCG's default 128-bit multiplier (pcg64.h PCG_DEFAULT_MULTIPLIER_128).
const unsigned __int128 kPcgMult = (static_cast<unsigned __int128>(0x2360ED051FC65DA4ULL) << 64) | 0x4385DF649FCCF645ULL;
}  // namespace

SeedSequence::SeedSequence(uint64_t entropy) {
  // _int_to_uint32_array: 0 -> [0]; otherwise 32-bit words, least significant first.
  std::vector<uint32_t> words;
  if (entropy == 0) words.push_back(0);
  while (entropy > 0) {
    words.push_back(uint32_t(entropy & 0xFFFFFFFFu));
    entropy >>= 32;
  }
  uint32_t hash_const = kInitA;
  for (int i = 0; i < 4; ++i) pool_[i] = HashMix(i < int(words.size()) ? words[i] : 0u, hash_const);
  for (int src = 0; src < 4; ++src)
    for (int dst = 0; dst < 4; ++dst)
      if (src != dst) pool_[dst] = Mix(pool_[dst], HashMix(pool_[src], hash_const));
  for (size_t src = 4; src < words.size(); ++src)
    for (int dst = 0; dst < 4; ++dst) pool_[dst] = Mix(pool_[dst], HashMix(words[src], hash_const));
}

std::vector<uint64_t> SeedSequence::GenerateState64(int n_words) const {
  std::vector<uint32_t> s32(static_cast<size_t>(n_words) * 2);
  uint32_t hash_const = kInitB;
  for (size_t i = 0; i < s32.size(); ++i) {
    uint32_t v = pool_[i % 4];
    v ^= hash_const;
    hash_const *= kMultB;
    v *= hash_const;
    v ^= v >> kXShift;
    s32[i] = v;
  }
  std::vector<uint64_t> out(static_cast<size_t>(n_words));
  for (int i = 0; i < n_words; ++i) out[i] = uint64_t(s32[2 * i]) | (uint64_t(s32[2 * i + 1]) << 32);
  return out;
}

Pcg64::Pcg64(uint64_t seed) {
  const std::vector<uint64_t> v = SeedSequence(seed).GenerateState64(4);
  const unsigned __int128 initstate = (static_cast<unsigned __int128>(v[0]) << 64) | v[1];
  const unsigned __int128 initseq = (static_cast<unsigned __int128>(v[2]) << 64) | v[3];
  // pcg_setseq_128_srandom_r
  state_ = 0;
  inc_ = (initseq << 1) | 1;
  state_ = state_ * kPcgMult + inc_;
  state_ += initstate;
  state_ = state_ * kPcgMult + inc_;
}

uint64_t Pcg64::Next64() {
  // Step, then output XSL-RR of the new state (pcg_setseq_128_xsl_rr_64_random_r).
  state_ = state_ * kPcgMult + inc_;
  const uint64_t hi = uint64_t(state_ >> 64), lo = uint64_t(state_);
  const unsigned rot = unsigned(hi >> 58);
  const uint64_t x = hi ^ lo;
  return (x >> rot) | (x << ((64 - rot) & 63));
}

uint32_t Pcg64::Next32() {
  if (has_u32_) {
    has_u32_ = false;
    return u32_;
  }
  const uint64_t v = Next64();
  has_u32_ = true;
  u32_ = uint32_t(v >> 32);
  return uint32_t(v & 0xFFFFFFFFu);
}

uint64_t Pcg64::BoundedLemire64(uint64_t rng) {
  const uint64_t rng_excl = rng + 1;
  unsigned __int128 m = static_cast<unsigned __int128>(Next64()) * rng_excl;
  uint64_t leftover = uint64_t(m);
  if (leftover < rng_excl) {
    const uint64_t threshold = (std::numeric_limits<uint64_t>::max() - rng) % rng_excl;
    while (leftover < threshold) {
      m = static_cast<unsigned __int128>(Next64()) * rng_excl;
      leftover = uint64_t(m);
    }
  }
  return uint64_t(m >> 64);
}

uint32_t Pcg64::BoundedLemire32(uint32_t rng) {
  const uint32_t rng_excl = rng + 1;
  uint64_t m = uint64_t(Next32()) * rng_excl;
  uint32_t leftover = uint32_t(m);
  if (leftover < rng_excl) {
    const uint32_t threshold = (std::numeric_limits<uint32_t>::max() - rng) % rng_excl;
    while (leftover < threshold) {
      m = uint64_t(Next32()) * rng_excl;
      leftover = uint32_t(m);
    }
  }
  return uint32_t(m >> 32);
}

std::vector<int64_t> Pcg64::IntegersInt64(int64_t low, int64_t high, int n) {
  if (low >= high)
    throw std::invalid_argument("integers: expected low < high, found low " + std::to_string(low) + " high " + std::to_string(high));
  // random_bounded_uint64_fill with off = low, rng = (high - 1) - low, use_masked = false.
  const uint64_t rng = uint64_t(high - 1) - uint64_t(low);
  std::vector<int64_t> out(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    uint64_t v;
    if (rng == 0) v = 0;
    else if (rng <= 0xFFFFFFFFull) v = (rng == 0xFFFFFFFFull) ? Next32() : BoundedLemire32(uint32_t(rng));
    else v = (rng == std::numeric_limits<uint64_t>::max()) ? Next64() : BoundedLemire64(rng);
    out[i] = int64_t(uint64_t(low) + v);
  }
  return out;
}

namespace {
bool IsPrime(int64_t v) {
  if (v < 2) return false;
  if (v % 2 == 0) return v == 2;
  for (int64_t d = 3; d * d <= v; d += 2)
    if (v % d == 0) return false;
  return true;
}
}  // namespace

EngramHashConstants ComputeEngramHashConstants(const std::vector<int>& layer_ids, int max_ngram, int n_heads,
                                               int64_t vocab_size, int64_t compressed_vocab_size) {
  if (max_ngram < 2 || n_heads < 1 || vocab_size < 1 || compressed_vocab_size < 1)
    throw std::invalid_argument("engram: expected max_ngram >= 2, n_heads >= 1 and positive vocab sizes, found " +
                                std::to_string(max_ngram) + ", " + std::to_string(n_heads) + ", " + std::to_string(vocab_size) +
                                ", " + std::to_string(compressed_vocab_size));
  EngramHashConstants k;
  std::set<int64_t> seen;
  for (size_t l = 0; l < layer_ids.size(); ++l) {
    std::vector<std::vector<int64_t>> per_order;
    int64_t rows = 0;
    for (int order = 0; order < max_ngram - 1; ++order) {
      std::vector<int64_t> heads;
      int64_t candidate = vocab_size - 1;
      for (int h = 0; h < n_heads; ++h) {
        ++candidate;
        while (!IsPrime(candidate) || seen.count(candidate)) ++candidate;
        seen.insert(candidate);
        heads.push_back(candidate);
        rows += candidate;
      }
      per_order.push_back(heads);
    }
    k.primes.push_back(per_order);
    k.table_rows.push_back(rows);
    const int64_t bound = std::max<int64_t>(1, (std::numeric_limits<int64_t>::max() / compressed_vocab_size) / 2);
    Pcg64 g(uint64_t(10007) * uint64_t(layer_ids[l]));
    std::vector<int64_t> m = g.IntegersInt64(0, bound, max_ngram);
    for (int64_t& v : m) v = v * 2 + 1;
    k.multipliers.push_back(m);
  }
  return k;
}

}  // namespace cedar
