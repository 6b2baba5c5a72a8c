// The LogitsProcessor (engine/sampling.h) of grammar-constrained decoding: masks each step's
// logits with a TokenMatcher and advances it with the sampled token.
#pragma once
#include <memory>

#include "engine/sampling.h"
#include "grammar/token_matcher.h"

namespace cedar::grammar {

class GrammarLogitsProcessor final : public LogitsProcessor {
 public:
  explicit GrammarLogitsProcessor(std::unique_ptr<TokenMatcher> matcher) : matcher_(std::move(matcher)) {}
  bool Process(std::vector<float>& logits) override;
  // A token outside the mask (only possible if the caller sampled without Process) is logged
  // and leaves the matcher where it was.
  void Accept(int32_t token) override;
  const TokenMatcher& matcher() const { return *matcher_; }

 private:
  std::unique_ptr<TokenMatcher> matcher_;
};

}  // namespace cedar::grammar
