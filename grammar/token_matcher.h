// Token-level matching: which ids of a tokenizer's vocabulary keep the output inside a grammar.
//
// The vocabulary's trie is token_vocab.h; the masks, computed once per automaton state and
// shared by every generation of the same compiled grammar, are compiled_grammar.h (its header
// explains the fast mask). TokenMatcher (per generation) keeps the state history: AcceptToken
// advances, Rollback(n) forgets the last n tokens (states are immutable, so this is O(n); for
// speculative decoding).
//
// Thread contract: TokenVocab is immutable and shared; a CompiledGrammar is shared and
// thread-safe; a TokenMatcher belongs to one turn.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "grammar/automaton.h"
#include "grammar/compiled_grammar.h"
#include "grammar/token_vocab.h"

namespace cedar::grammar {

class TokenMatcher {
 public:
  // A generation of `compiled` (shared with other generations, e.g. through grammar_cache.h).
  explicit TokenMatcher(std::shared_ptr<CompiledGrammar> compiled);
  // A generation with its own CompiledGrammar over `automaton` (CompiledGrammar's errors).
  TokenMatcher(std::shared_ptr<Automaton> automaton, std::shared_ptr<const TokenVocab> vocab,
               std::vector<int32_t> end_ids, MatcherOptions options = {});

  // The ids allowed next (valid until the next call of Mask or ApplyMask).
  const TokenMask& Mask();
  // Sets logits of disallowed ids to -inf. logits: [vocab] (a longer vector's tail, e.g. a
  // padded vocab, is disallowed too). Returns the number of allowed ids (0: nothing may
  // follow, e.g. the grammar is complete and there are no end ids).
  int64_t ApplyMask(std::span<float> logits);
  // Consumes one id; false (and no change) when the grammar does not allow it.
  bool AcceptToken(int32_t id);
  void Rollback(size_t n);           // forgets the last n accepted ids (n <= accepted())
  size_t accepted() const { return history_.size() - 1; }
  bool Accepting() const { return compiled_->Accepting(history_.back()); }
  bool Ended() const { return ended_; }  // an end id was accepted
  StateId state() const { return history_.back(); }
  // Whether the next Mask() is a cache hit (for benchmarks: a miss walks the trie).
  bool Cached() const { return ended_ || compiled_->Cached(history_.back()); }
  // Work this generation did computing masks (for benchmarks; masks other generations of the
  // same compiled grammar computed first cost nothing here).
  using Stats = MaskStats;
  const Stats& stats() const { return stats_; }
  const std::shared_ptr<CompiledGrammar>& compiled() const { return compiled_; }

 private:
  std::shared_ptr<CompiledGrammar> compiled_;
  Stats stats_;
  std::shared_ptr<const TokenMask> mask_;  // the last Mask()'s (kept alive while in use)
  std::vector<StateId> history_;     // history_[0] = start; one entry per accepted id
  bool ended_ = false;
  size_t ended_at_ = 0;              // history size when the end id was accepted
};

}  // namespace cedar::grammar
