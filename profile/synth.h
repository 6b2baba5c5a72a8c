// Token ids for trace requests, which carry only block ids and lengths. Every (scope, block id)
// maps to one fixed block of token ids drawn from a generator seeded by (seed, scope, id), so
// equal ids give equal tokens and different ids (almost surely) different pages. Tokens that no
// block covers (past the last block) and the output tokens are drawn from a generator seeded by
// the request's source, so they are deterministic and unique to the request.
#pragma once

#include <cstdint>
#include <vector>

#include "profile/trace.h"

namespace cedar::profile {

class TokenSynth {
 public:
  // REQUIRES: vocab_size >= 2.
  TokenSynth(uint64_t seed, int vocab_size) : seed_(seed), vocab_(uint64_t(vocab_size)) {}

  // The first `count` tokens of block `id` in `scope` (count <= the block size it is used with;
  // a block's tokens do not depend on the block size).
  void AppendBlock(uint32_t scope, int64_t id, size_t count, std::vector<int32_t>* out) const;

  // The prompt: the request's blocks, cut to input_tokens, then unique tokens up to input_tokens.
  void Prompt(const TraceRequest& r, std::vector<int32_t>* out) const;

  // output_tokens tokens unique to the request (the trace gives only the count).
  void Output(const TraceRequest& r, std::vector<int32_t>* out) const;

 private:
  void AppendRandom(uint64_t stream, size_t count, std::vector<int32_t>* out) const;

  uint64_t seed_;
  uint64_t vocab_;
};

}  // namespace cedar::profile
