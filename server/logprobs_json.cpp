#include "server/logprobs_json.h"

#include <algorithm>
#include <cmath>

namespace cedar::server {

using nlohmann::json;

namespace {
// -inf (a token no distribution allows) has no JSON number: OpenAI's clients read -9999.0.
double Finite(float lp) { return std::isfinite(lp) ? double(lp) : -9999.0; }

json Bytes(const bridge::Tokenizer& tokenizer, int32_t id) {
  json b = json::array();
  std::string_view raw = tokenizer.InVocab(id) ? tokenizer.TokenBytes(id) : std::string_view();
  std::string named;
  if (raw.empty()) {
    if (auto name = tokenizer.SpecialName(id)) named = std::string(*name);
    raw = named;
  }
  for (unsigned char c : raw) b.push_back(int(c));
  return b;
}

json Entry(const bridge::Tokenizer& tokenizer, const TokenLogprob& t) {
  return {{"token", LogprobTokenText(tokenizer, t.id)}, {"logprob", Finite(t.logprob)}, {"bytes", Bytes(tokenizer, t.id)}};
}
}  // namespace

std::string LogprobTokenText(const bridge::Tokenizer& tokenizer, int32_t id) {
  if (!tokenizer.InVocab(id)) return "";
  const int32_t ids[1] = {id};
  return tokenizer.Decode(ids, bridge::SpecialText::kName);
}

json ChatLogprobEntries(const bridge::Tokenizer& tokenizer, std::span<const TokenLogprobs> lps) {
  json content = json::array();
  for (const TokenLogprobs& lp : lps) {
    json e = Entry(tokenizer, lp.chosen);
    json top = json::array();
    for (const TokenLogprob& t : lp.top) top.push_back(Entry(tokenizer, t));
    e["top_logprobs"] = std::move(top);
    content.push_back(std::move(e));
  }
  return content;
}

json CompletionLogprobs(const bridge::Tokenizer& tokenizer, std::span<const TokenLogprobs> lps, int64_t offset) {
  json tokens = json::array(), token_logprobs = json::array(), top = json::array(), offsets = json::array();
  for (const TokenLogprobs& lp : lps) {
    const std::string text = LogprobTokenText(tokenizer, lp.chosen.id);
    tokens.push_back(text);
    token_logprobs.push_back(Finite(lp.chosen.logprob));
    json alts = json::object();
    for (const TokenLogprob& t : lp.top) alts[LogprobTokenText(tokenizer, t.id)] = Finite(t.logprob);
    top.push_back(std::move(alts));
    offsets.push_back(offset);
    offset += int64_t(text.size());
  }
  return {{"tokens", tokens}, {"token_logprobs", token_logprobs}, {"top_logprobs", top}, {"text_offset", offsets}};
}

std::vector<TokenLogprobs> ShownLogprobs(const std::vector<int32_t>& output, const std::vector<TokenLogprobs>& lps,
                                         const std::vector<int32_t>& hidden) {
  std::vector<TokenLogprobs> out;
  for (size_t i = 0; i < output.size() && i < lps.size(); ++i)
    if (std::find(hidden.begin(), hidden.end(), output[i]) == hidden.end()) out.push_back(lps[i]);
  return out;
}

}  // namespace cedar::server
