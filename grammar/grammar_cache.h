// The compiled grammars of recent requests, by what they were compiled from, so that a schema
// or a set of tools sent again (an agent sends the same tools every turn) reuses the compiled
// grammar and every mask it has computed (compiled_grammar.h) instead of walking the
// vocabulary's trie again.
//
// Bounded: at most `capacity` grammars (least recently used dropped); a grammar whose automaton
// has grown past CompiledGrammar::kMaxStates is compiled afresh for the next request. Each
// holds at most MatcherOptions::max_cache_bytes (24 MiB) of masks (plus ~1 KiB of automaton table per
// state, at most kMaxStates), so the cache holds at most about capacity x 40 MiB; generations
// still running keep a dropped grammar alive until they end.
//
// Thread contract: thread-safe. The compile runs outside the lock (two requests compiling the
// same new key both compile; the later one is kept).
#pragma once
#include <cstddef>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>

#include "grammar/compiled_grammar.h"

namespace cedar::grammar {

class GrammarCache {
 public:
  explicit GrammarCache(size_t capacity) : capacity_(capacity) {}
  // The grammar stored under `key` (what it was compiled from, vocabulary included), or
  // compile()'s, then stored. compile()'s exceptions pass through and store nothing.
  std::shared_ptr<CompiledGrammar> Get(const std::string& key,
                                       const std::function<std::shared_ptr<CompiledGrammar>()>& compile);
  size_t size();
  int64_t hits();  // Get calls answered from the cache

 private:
  using Entry = std::pair<std::string, std::shared_ptr<CompiledGrammar>>;
  std::mutex mu_;
  size_t capacity_;
  int64_t hits_ = 0;
  std::list<Entry> lru_;  // most recent first
  std::unordered_map<std::string, std::list<Entry>::iterator> index_;
};

}  // namespace cedar::grammar
