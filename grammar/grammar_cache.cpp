#include "grammar/grammar_cache.h"

#include <spdlog/spdlog.h>

namespace cedar::grammar {

std::shared_ptr<CompiledGrammar> GrammarCache::Get(const std::string& key,
                                                   const std::function<std::shared_ptr<CompiledGrammar>()>& compile) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = index_.find(key); it != index_.end()) {
      if (!it->second->second->Retired()) {
        lru_.splice(lru_.begin(), lru_, it->second);
        ++hits_;
        return it->second->second;
      }
      spdlog::debug("grammar cache: a grammar grew past {} automaton states; compiling it afresh",
                    CompiledGrammar::kMaxStates);
      lru_.erase(it->second);
      index_.erase(it);
    }
  }
  std::shared_ptr<CompiledGrammar> compiled = compile();
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = index_.find(key); it != index_.end()) {  // compiled meanwhile by another request
    lru_.erase(it->second);
    index_.erase(it);
  }
  lru_.emplace_front(key, compiled);
  index_[key] = lru_.begin();
  while (lru_.size() > capacity_) {
    index_.erase(lru_.back().first);
    lru_.pop_back();
  }
  return compiled;
}

size_t GrammarCache::size() {
  std::lock_guard<std::mutex> lock(mu_);
  return lru_.size();
}

int64_t GrammarCache::hits() {
  std::lock_guard<std::mutex> lock(mu_);
  return hits_;
}

}  // namespace cedar::grammar
