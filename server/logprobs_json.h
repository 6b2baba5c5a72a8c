// The wire shapes of per-token log-probabilities (issue 19): OpenAI chat's
// `logprobs: {content: [{token, logprob, bytes, top_logprobs}]}` and the legacy completions'
// `logprobs: {tokens, token_logprobs, top_logprobs, text_offset}`. Values come from
// session::TurnResult::logprobs: log_softmax of the model's logits at temperature 1.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/logprobs.h"
#include "tools_bridge/lib/tokenizer.h"

namespace cedar::server {

// One token's text as logprobs show it: its decoded text (U+FFFD for part of a character, a
// special by name) and its raw bytes.
std::string LogprobTokenText(const bridge::Tokenizer& tokenizer, int32_t id);

// Chat: the entries of `content` for these tokens (one per token).
nlohmann::json ChatLogprobEntries(const bridge::Tokenizer& tokenizer, std::span<const TokenLogprobs> lps);

// Legacy completions: `text_offset` starts at `offset` (bytes of text before these tokens).
nlohmann::json CompletionLogprobs(const bridge::Tokenizer& tokenizer, std::span<const TokenLogprobs> lps,
                                  int64_t offset = 0);

// The logprobs of the tokens a client is shown: `output` without the ids in `hidden` (stop
// ids, which no text shows). `lps` is aligned with `output`.
std::vector<TokenLogprobs> ShownLogprobs(const std::vector<int32_t>& output, const std::vector<TokenLogprobs>& lps,
                                         const std::vector<int32_t>& hidden);

}  // namespace cedar::server
