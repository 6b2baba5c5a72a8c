// Token-level matching: which ids of a tokenizer's vocabulary keep the output inside a grammar.
//
// TokenVocab (per tokenizer, built once, immutable) holds every ordinary id's byte string in
// a trie laid out in preorder (node i's subtree is [i, subtree_end[i])), plus the special ids
// by name. The reference mask walks that trie from the current automaton state: one
// Automaton::Next per trie node, skipping a whole subtree as soon as its prefix leaves the
// grammar, so tokens whose bytes cross several grammar steps (a BPE token like `","` closes a
// string, adds a comma and opens the next key) are judged exactly; a 129K vocabulary costs a
// few hundred thousand table lookups per new state (masks are cached per automaton state).
//
// The fast mask (MatcherOptions::cut_frames, XGrammar's context-independent tokens): a state
// is a set of stacks, and a token fits the state when it fits one of its stacks. Each stack is
// cut a few frames down (Automaton::CutStack); a walk from the top frames alone decides every
// token whose paths stay inside them, and a path that pops into the cut continues only on the
// bytes the real rest can match first (Automaton::FirstOf). So the top frames' verdicts are
// cached by (top frames, those first bytes), shared by every state whose stacks share them (an
// unbounded string's characters, any property or array item with the same shape, wherever it
// nests), and only the trie subtrees where a path crosses into the cut are walked from the real
// state. The result is the reference mask bit for bit (tests/grammar_mask_test.cpp). A string
// with maxLength (any bounded repetition) counts its characters in its frames; the count is
// replaced by a canonical one (Automaton::Cut), so all counts share one walk, and only the
// tokens long enough to reach the real count's limit are walked from the real state.
//
// TokenMatcher (per generation) keeps the state history: AcceptToken advances, Rollback(n)
// forgets the last n tokens (states are immutable, so this is O(n); for speculative decoding).
//
// Thread contract: TokenVocab is immutable and shared; a TokenMatcher belongs to one turn.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "grammar/automaton.h"

namespace cedar::grammar {

class TokenVocab {
 public:
  // `token_bytes[id]`: the bytes of ordinary id `id` ("" for special and unused ids);
  // `specials`: (id, name) of the special ids. Ids are dense: [0, token_bytes.size()).
  TokenVocab(const std::vector<std::string>& token_bytes, const std::vector<std::pair<int32_t, std::string>>& specials);

  int32_t size() const { return vocab_size_; }
  const std::string& bytes(int32_t id) const { return bytes_[size_t(id)]; }
  // The special id named `name`, or -1.
  int32_t SpecialId(std::string_view name) const;
  size_t trie_nodes() const { return node_byte_.size(); }

 private:
  friend class TokenMatcher;
  int32_t vocab_size_ = 0;
  std::vector<std::string> bytes_;
  std::vector<std::pair<int32_t, std::string>> specials_;
  // The trie in preorder (root not stored): per node its byte, depth (>= 1), subtree end, and
  // the ids whose bytes end here (token_ids_[token_begin_[i] .. token_begin_[i + 1])).
  std::vector<uint8_t> node_byte_;
  std::vector<uint16_t> node_depth_;
  std::vector<int32_t> subtree_end_;
  std::vector<int32_t> parent_;        // the node one byte up (-1 at depth 1)
  std::vector<int32_t> token_begin_;
  std::vector<int32_t> token_ids_;
  int max_depth_ = 0;
};

// A bitset over the vocabulary: bit id set = the id is allowed.
struct TokenMask {
  std::vector<uint64_t> words;
  bool Test(int32_t id) const { return (words[size_t(id) >> 6] >> (id & 63)) & 1; }
  void Set(int32_t id) { words[size_t(id) >> 6] |= 1ull << (id & 63); }
  int64_t Count() const;
};

// How TokenMatcher computes a mask (the fast way and the reference walk give the same bits).
struct MatcherOptions {
  // Split each stack of a state at this many frames (Automaton::CutStack): the top frames'
  // mask is cached by (those frames, the bytes their context can start with) and reused by
  // every state whose stacks share them; only the tokens that cross into the context are walked
  // from the real state. 0 = the reference: walk the whole trie from the state. Vocabularies
  // of fewer than 16,384 trie nodes (the byte vocabulary) always walk whole (cheaper there).
  int cut_frames = 2;
};

class TokenMatcher {
 public:
  // `end_ids`: ids that end the generation (allowed exactly when the grammar is complete).
  // Special symbols of the grammar are matched to the vocab's special ids by name; a symbol
  // the vocab lacks can never be produced (throws GrammarError naming it, since the grammar
  // could then never complete a path through it).
  TokenMatcher(std::shared_ptr<Automaton> automaton, std::shared_ptr<const TokenVocab> vocab,
               std::vector<int32_t> end_ids, MatcherOptions options = {});

  // The ids allowed next. The mask is computed once per automaton state and cached.
  const TokenMask& Mask();
  // Sets logits of disallowed ids to -inf. logits: [vocab] (a longer vector's tail, e.g. a
  // padded vocab, is disallowed too). Returns the number of allowed ids (0: nothing may
  // follow, e.g. the grammar is complete and there are no end ids).
  int64_t ApplyMask(std::span<float> logits);
  // Consumes one id; false (and no change) when the grammar does not allow it.
  bool AcceptToken(int32_t id);
  void Rollback(size_t n);           // forgets the last n accepted ids (n <= accepted())
  size_t accepted() const { return history_.size() - 1; }
  bool Accepting() const { return automaton_->Accepting(history_.back()); }
  bool Ended() const { return ended_; }  // an end id was accepted
  StateId state() const { return history_.back(); }
  // Whether the next Mask() is a cache hit (for benchmarks: a miss walks the trie).
  bool Cached() const { return ended_ || cache_.count(history_.back()) > 0; }
  // Work done so far (for benchmarks).
  struct Stats {
    int64_t states = 0;          // masks computed (new states)
    int64_t local_walks = 0;     // top frames walked (fast masks' cache misses)
    int64_t context_walks = 0;   // subtrees walked from a real state (fast masks)
  };
  const Stats& stats() const { return stats_; }

 private:
  // A stack's top frames' verdicts: `certain` holds the ids they accept whatever the context;
  // the ids under trie nodes `uncertain` (preorder, none inside another) cross into the context
  // and are walked from the real state.
  // When the frames held a repetition count (Automaton::Cut::chain), the walk is from the
  // canonical count and also records, per trie node, the least chain level on the path to it
  // (path_level) and in its subtree (subtree_level); kNoLevel16 where not reached. For a real
  // count `slack` below the canonical one, the tokens whose path reaches level <= slack are
  // taken out of `certain` and walked from the real state instead (subtrees with
  // subtree_level > slack skipped), so every count shares this one walk.
  struct LocalMask {
    TokenMask certain;
    std::vector<int32_t> uncertain;
    std::vector<uint16_t> path_level;
    std::vector<uint16_t> subtree_level;
    std::vector<int32_t> by_level;     // the ids at walked nodes, by path level (counting sort)
    std::vector<int32_t> level_begin;  // level l's ids: by_level[level_begin[l] .. level_begin[l + 1])
  };
  static constexpr uint16_t kNoLevel16 = 0xffff;
  void Compute(StateId s, TokenMask& mask);
  void ComputeFast(StateId s, TokenMask& mask);
  // The cached verdicts of stack `node`'s top frames; `cut` and `key` say which.
  const LocalMask& Local(int32_t node, Automaton::Cut& cut, uint64_t& key);
  // `lm.certain` less the tokens whose path reaches chain level <= slack (cached per key, slack).
  const TokenMask& CertainBelow(const LocalMask& lm, uint64_t key, int32_t slack);
  // The walk from real state `s` of the trie nodes whose subtree reaches level <= slack.
  void WalkBelow(StateId s, const LocalMask& lm, int32_t slack, TokenMask& mask);
  // Walks trie nodes [begin, end) (a subtree, or the whole trie) from `s` at depth base + 1 and
  // sets the ids accepted.
  void Walk(StateId s, int32_t begin, int32_t end, int base, TokenMask& mask);
  MatcherOptions options_;
  Stats stats_;
  std::unordered_map<uint64_t, LocalMask> local_cache_;  // (local state, context's first bytes) -> mask
  size_t local_levels_ = 0;          // entries of local_cache_ holding levels (1 MiB each at 274K nodes)
  std::map<std::pair<uint64_t, int32_t>, TokenMask> below_cache_;  // (local_cache_ key, slack) -> CertainBelow
  std::vector<uint16_t> level_;      // scratch: per trie depth, the path's least chain level
  std::vector<int32_t> visited_;     // scratch: trie nodes one level-recording walk reached
  std::vector<int32_t> chain_level_; // scratch: ChainLevel per state for one walk (-1: not yet)
  std::unordered_map<std::string, uint32_t> first_ids_;   // a context's First, interned for the key
  std::vector<int32_t> roots_;       // scratch: uncertain subtrees of one state
  std::string prefix_;               // scratch: a trie node's bytes
  std::shared_ptr<Automaton> automaton_;
  std::shared_ptr<const TokenVocab> vocab_;
  std::vector<int32_t> end_ids_;
  std::vector<std::pair<int32_t, Symbol>> special_symbols_;  // (vocab id, grammar symbol)
  std::vector<StateId> history_;     // history_[0] = start; one entry per accepted id
  bool ended_ = false;
  size_t ended_at_ = 0;              // history size when the end id was accepted
  std::unordered_map<StateId, TokenMask> cache_;
  std::vector<StateId> walk_;        // per trie depth: the state after that prefix
};

}  // namespace cedar::grammar
