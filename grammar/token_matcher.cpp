#include "grammar/token_matcher.h"

#include <algorithm>
#include <bit>
#include <limits>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

namespace cedar::grammar {

TokenMatcher::TokenMatcher(std::shared_ptr<CompiledGrammar> compiled) : compiled_(std::move(compiled)) {
  history_.push_back(compiled_->Start());
}

TokenMatcher::TokenMatcher(std::shared_ptr<Automaton> automaton, std::shared_ptr<const TokenVocab> vocab,
                           std::vector<int32_t> end_ids, MatcherOptions options)
    : TokenMatcher(std::make_shared<CompiledGrammar>(std::move(automaton), std::move(vocab), std::move(end_ids), options)) {}

const TokenMask& TokenMatcher::Mask() {
  mask_ = ended_ ? compiled_->Nothing() : compiled_->Mask(history_.back(), &stats_);
  return *mask_;
}

int64_t TokenMatcher::ApplyMask(std::span<float> logits) {
  const TokenMask& m = Mask();
  const float ninf = -std::numeric_limits<float>::infinity();
  const size_t v = std::min(logits.size(), size_t(compiled_->vocab().size()));
  float* out = logits.data();
  int64_t allowed = 0;
  for (size_t w = 0; w * 64 < v; ++w) {
    const uint64_t bits = m.words[w];
    allowed += std::popcount(bits);
    if (bits == ~0ull) continue;
    const size_t end = std::min(v, w * 64 + 64);
    if (bits == 0) {  // most words outside strings: a plain fill the compiler vectorises
      std::fill(out + w * 64, out + end, ninf);
      continue;
    }
    size_t i = w * 64;
#if defined(__AVX2__)
    // 8 logits per step: each lane tests its bit of the byte, and -inf goes where it is clear.
    const __m256i lane_bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    const __m256 minus_inf = _mm256_set1_ps(ninf);
    for (; i + 8 <= end; i += 8) {
      const int byte = int((bits >> (i - w * 64)) & 0xff);
      if (byte == 0xff) continue;
      const __m256i set = _mm256_and_si256(_mm256_set1_epi32(byte), lane_bit);
      const __m256 keep = _mm256_castsi256_ps(_mm256_cmpeq_epi32(set, lane_bit));
      _mm256_storeu_ps(out + i, _mm256_blendv_ps(minus_inf, _mm256_loadu_ps(out + i), keep));
    }
#endif
    for (; i < end; ++i)
      if (!((bits >> (i - w * 64)) & 1)) out[i] = ninf;
  }
  for (size_t i = v; i < logits.size(); ++i) out[i] = ninf;
  return allowed;
}

bool TokenMatcher::AcceptToken(int32_t id) {
  if (ended_ || id < 0 || id >= compiled_->vocab().size()) return false;
  const StateId s = history_.back();
  if (compiled_->IsEndId(id)) {
    if (!compiled_->Accepting(s)) return false;
    ended_ = true;
    history_.push_back(s);
    ended_at_ = history_.size();
    return true;
  }
  const StateId next = compiled_->Advance(s, id);
  if (next == kDeadState) return false;
  history_.push_back(next);
  return true;
}

void TokenMatcher::Rollback(size_t n) {
  n = std::min(n, accepted());
  history_.resize(history_.size() - n);
  if (ended_ && history_.size() < ended_at_) ended_ = false;
}

}  // namespace cedar::grammar
