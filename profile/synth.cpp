#include "profile/synth.h"

#include <algorithm>

#include <xxhash.h>

namespace cedar::profile {

namespace {

uint64_t SplitMix(uint64_t* state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Stream ids of the three kinds of token runs, so they never share a generator state.
constexpr uint64_t kBlockTag = 0x426c6f636bull;   // "Block"
constexpr uint64_t kTailTag = 0x5461696cull;      // "Tail"
constexpr uint64_t kOutputTag = 0x4f7574ull;      // "Out"

uint64_t Mix(uint64_t a, uint64_t b, uint64_t c, uint64_t d) {
  const uint64_t words[4] = {a, b, c, d};
  return XXH3_64bits(words, sizeof(words));
}

}  // namespace

void TokenSynth::AppendRandom(uint64_t stream, size_t count, std::vector<int32_t>* out) const {
  uint64_t state = stream;
  for (size_t i = 0; i < count; ++i) {
    // Multiply-shift maps 64 random bits onto [0, vocab) without a division.
    out->push_back(int32_t((static_cast<unsigned __int128>(SplitMix(&state)) * vocab_) >> 64));
  }
}

void TokenSynth::AppendBlock(uint32_t scope, int64_t id, size_t count, std::vector<int32_t>* out) const {
  AppendRandom(Mix(seed_, kBlockTag, scope, uint64_t(id)), count, out);
}

void TokenSynth::Prompt(const TraceRequest& r, std::vector<int32_t>* out) const {
  out->clear();
  out->reserve(size_t(r.input_tokens));
  const int64_t b = r.block_size;
  for (size_t i = 0; i < r.block_ids.size() && int64_t(out->size()) < r.input_tokens; ++i) {
    const int64_t take = std::min<int64_t>(b, r.input_tokens - int64_t(out->size()));
    AppendBlock(r.scope, r.block_ids[i], size_t(take), out);
  }
  const int64_t rest = r.input_tokens - int64_t(out->size());
  if (rest > 0) AppendRandom(Mix(seed_, kTailTag, XXH3_64bits(r.source.data(), r.source.size()), 0), size_t(rest), out);
}

void TokenSynth::Output(const TraceRequest& r, std::vector<int32_t>* out) const {
  out->clear();
  AppendRandom(Mix(seed_, kOutputTag, XXH3_64bits(r.source.data(), r.source.size()), 0), size_t(r.output_tokens), out);
}

}  // namespace cedar::profile
