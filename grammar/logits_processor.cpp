#include "grammar/logits_processor.h"

#include <spdlog/spdlog.h>

namespace cedar::grammar {

bool GrammarLogitsProcessor::Process(std::vector<float>& logits) {
  return matcher_->ApplyMask(logits) > 0;
}

void GrammarLogitsProcessor::Accept(int32_t token) {
  if (!matcher_->AcceptToken(token)) spdlog::warn("grammar: sampled token {} is outside the grammar; ignored", token);
}

}  // namespace cedar::grammar
