// What OpenAI's sampling fields do to a step's logits, and the log-probabilities a client can
// ask to see (issue 19): logit_bias, presence_penalty and frequency_penalty edit the logits the
// sampler draws from; logprobs / top_logprobs report the model's own distribution.
#pragma once
#include <cstdint>
#include <unordered_map>
#include <utility>
#include <vector>

namespace cedar {

// OpenAI's semantics (platform.openai.com "parameter details"), over the tokens this turn
// generated so far: logit[j] -= count[j] * frequency_penalty + (count[j] > 0) * presence_penalty,
// then logit[j] += bias[j].
struct LogitAdjustments {
  std::vector<std::pair<int32_t, float>> bias;  // (token id, added to its logit); ids < vocab
  float presence_penalty = 0.0f;                // in [-2, 2]
  float frequency_penalty = 0.0f;               // in [-2, 2]
  bool empty() const { return bias.empty() && presence_penalty == 0.0f && frequency_penalty == 0.0f; }
};

// Applies `adj` to `logits` [V] given how often each token was generated so far (`counts`).
void ApplyAdjustments(const LogitAdjustments& adj, const std::unordered_map<int32_t, int>& counts,
                      std::vector<float>& logits);

struct TokenLogprob {
  int32_t id = 0;
  float logprob = 0.0f;  // natural log
};
// One generated token's log-probability and the `top_n` most likely tokens at that step.
struct TokenLogprobs {
  TokenLogprob chosen;
  std::vector<TokenLogprob> top;  // most likely first (ties: lower id first); top_n entries
};

// log_softmax of `logits` [V] (temperature 1) at `chosen` and at the top_n largest logits.
// Computed in double; O(V) plus a partial sort of top_n.
TokenLogprobs LogprobsOf(const std::vector<float>& logits, int32_t chosen, int top_n);

}  // namespace cedar
