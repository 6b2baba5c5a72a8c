// A grammar compiled against a vocabulary: its automaton and every per-state mask computed so
// far, shared by all the generations (TokenMatcher, token_matcher.h) that follow it, so a
// schema or a set of tools sent again (an agent sends the same tools every turn) pays the trie
// walks once, not once per turn (XGrammar's compiled grammar and its token mask cache).
//
// Masks. The reference walks the vocabulary's whole trie from the state. The fast mask
// (MatcherOptions::cut_frames, XGrammar's context-independent tokens): a state is a set of
// stacks, and a token fits the state when it fits one of its stacks. Each stack is cut a few
// frames down (Automaton::CutStack); a walk from the top frames alone decides every token
// whose paths stay inside them, and a path that pops into the cut continues only on the bytes
// the real rest can match first (Automaton::FirstOf). So the top frames' verdicts are cached by
// (top frames, those first bytes), shared by every state whose stacks share them (an unbounded
// string's characters, any property or array item with the same shape, wherever it nests), and
// only the trie subtrees where a path crosses into the cut are walked from the real state. The
// result is the reference mask bit for bit (tests/grammar_mask_test.cpp). A string with
// maxLength (any bounded repetition) counts its characters in its frames; the count is replaced
// by a canonical one (Automaton::Cut), so all counts share one walk, and only the tokens long
// enough to reach the real count's limit are walked from the real state.
//
// Memory: the caches hold at most MatcherOptions::max_cache_bytes (24 MiB) of masks (past it
// they start over, at the next new state; one computation adds at most a mask per cut group
// first), and the automaton's table grows with the states reached, ~1 KiB per state (Retired()
// says when a cache (grammar_cache.h) should stop handing this one out).
//
// Thread contract: every method is thread-safe (one mutex; a cold mask computation holds it
// for its whole walk, so a second generation of the same grammar waits and then finds the mask
// cached). Masks are handed out as shared_ptr: a cache that starts over frees none in use.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "grammar/automaton.h"
#include "grammar/token_vocab.h"

namespace cedar::grammar {

// How masks are computed (the fast way and the reference walk give the same bits).
struct MatcherOptions {
  // Split each stack of a state at this many frames (Automaton::CutStack): the top frames'
  // mask is cached by (those frames, the bytes their context can start with) and reused by
  // every state whose stacks share them; only the tokens that cross into the context are walked
  // from the real state. 0 = the reference: walk the whole trie from the state. Vocabularies
  // of fewer than 16,384 trie nodes (the byte vocabulary) always walk whole (cheaper there).
  int cut_frames = 2;
  // The mask caches of one compiled grammar hold at most this many bytes, then start over
  // (masks in use live on in their holders).
  size_t max_cache_bytes = size_t(24) << 20;
};

// Work done computing masks (for benchmarks).
struct MaskStats {
  int64_t states = 0;          // masks computed (new states)
  int64_t local_walks = 0;     // top frames walked (fast masks' cache misses)
  int64_t context_walks = 0;   // subtrees walked from a real state (fast masks)
};

class CompiledGrammar {
 public:
  // `end_ids`: ids that end the generation (allowed exactly when the grammar is complete).
  // Special symbols of the grammar are matched to the vocab's special ids by name; a symbol
  // the vocab lacks can never be produced (throws GrammarError naming it, since the grammar
  // could then never complete a path through it). `automaton` must not be used elsewhere
  // while this object may run on another thread (it grows as masks are computed).
  CompiledGrammar(std::shared_ptr<Automaton> automaton, std::shared_ptr<const TokenVocab> vocab,
                  std::vector<int32_t> end_ids, MatcherOptions options = {});
  // Compiles `grammar` (Automaton's errors) and computes the start state's mask.
  static std::shared_ptr<CompiledGrammar> Compile(const Grammar& grammar, std::shared_ptr<const TokenVocab> vocab,
                                                  std::vector<int32_t> end_ids, MatcherOptions options = {});

  StateId Start() const { return start_; }
  // The ids allowed in state `s` (computed once, then cached). `stats` (may be null) counts
  // the work when the mask is new.
  std::shared_ptr<const TokenMask> Mask(StateId s, MaskStats* stats);
  bool Cached(StateId s);
  // The state after ordinary or special id `id` (not an end id); kDeadState if not allowed.
  StateId Advance(StateId s, int32_t id);
  bool IsEndId(int32_t id) const;
  bool Accepting(StateId s);
  // The mask allowing nothing (after an end id).
  const std::shared_ptr<const TokenMask>& Nothing() const { return nothing_; }
  const TokenVocab& vocab() const { return *vocab_; }
  // Automaton states so far; bytes of the mask caches.
  size_t num_states();
  size_t cache_bytes();
  // True once the automaton holds more than kMaxStates states (its table ~ 1 KiB per state):
  // a shared cache should compile the grammar afresh for new generations.
  bool Retired();

  static constexpr size_t kMaxStates = 16000;

 private:
  // A cut group's top frames' verdicts: `certain` holds the ids they accept whatever the
  // context; the ids under trie nodes `uncertain` (preorder, none inside another) cross into the
  // context and are walked from the real state.
  // `context_roots` are those of them where only the context goes on (the top frames cannot
  // take the root's byte): the real state there is the context's own (Automaton::First::state),
  // the same for every count of a bounded string, so they are walked from it, not through the
  // real state's new transitions.
  struct LocalMask {
    TokenMask certain;
    std::vector<int32_t> uncertain;
    std::vector<int32_t> context_roots;
    size_t Bytes() const;
  };
  // The rest run with mu_ held.
  void Compute(StateId s, TokenMask& mask);
  void ComputeFast(StateId s, TokenMask& mask, MaskStats& stats);
  // The cached verdicts of a cut group (walked on a miss).
  const LocalMask& Local(const Automaton::Cut& cut, MaskStats& stats);
  // Walks trie nodes [begin, end) (a subtree, or the whole trie) from `s` at depth base + 1 and
  // sets the ids accepted.
  void Walk(StateId s, int32_t begin, int32_t end, int base, TokenMask& mask);
  size_t MaskBytes() const { return ((size_t(vocab_->size()) + 63) / 64) * 8; }

  std::mutex mu_;
  MatcherOptions options_;
  std::shared_ptr<Automaton> automaton_;
  std::shared_ptr<const TokenVocab> vocab_;
  std::vector<int32_t> end_ids_;
  std::vector<std::pair<int32_t, Symbol>> special_symbols_;  // (vocab id, grammar symbol)
  StateId start_ = kDeadState;
  std::shared_ptr<const TokenMask> nothing_;
  size_t bytes_ = 0;                 // held by the two caches below
  std::unordered_map<StateId, std::shared_ptr<const TokenMask>> cache_;  // state -> mask
  std::unordered_map<uint64_t, LocalMask> local_cache_;  // (local state, context's first bytes) -> mask
  std::unordered_map<std::string, uint32_t> first_ids_;   // a context's First, interned for the key
  // Scratch of one computation.
  std::vector<int32_t> roots_;       // uncertain subtrees of one state
  std::vector<std::pair<int32_t, StateId>> context_roots_;  // (root, context state) of one state
  std::string prefix_;               // a trie node's bytes
  std::vector<StateId> walk_;        // per trie depth: the state after that prefix
};

}  // namespace cedar::grammar
