// The pushdown automaton of a Grammar, run over symbols (bytes and specials).
//
// A parse position is a stack: its top is the next element to match (always a symbol class
// once expanded), the entries below are where to continue after the current rule ends. Stacks
// are persistent and hash-consed (a node is (position, parent); equal stacks are the same id),
// so a configuration of the parser, the set of stacks still alive (grammars may be ambiguous,
// e.g. anyOf of integer and number), is a sorted vector of ids, itself interned as a StateId.
// The empty stack (id 0) means "the grammar is complete here".
//
// Next(state, symbol) is memoised in a table filled lazily: the automaton becomes, as it runs,
// a DFA over the configurations actually reached. A token's bytes then cost one table lookup
// each once warm, which is what makes the per-step vocabulary walk (token_matcher.h) cheap,
// and a configuration met again (each character inside a JSON string leads back to the same
// one) costs nothing new. States are immutable, so rolling back is forgetting ids.
//
// Thread contract: one Automaton per generation (it caches as it runs); not thread-safe.
#pragma once
#include <bitset>
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "grammar/grammar.h"

namespace cedar::grammar {

using StateId = int32_t;
inline constexpr StateId kDeadState = 0;  // no stack alive: the input left the grammar

class Automaton {
 public:
  // Throws GrammarError when the grammar is incomplete (Grammar::Check) or left-recursive.
  explicit Automaton(const Grammar& grammar);

  StateId Start() const { return start_; }
  // The state after `symbol`; kDeadState if the grammar does not allow it here.
  StateId Next(StateId state, Symbol symbol) {
    const size_t at = size_t(state) * size_t(num_symbols_) + size_t(symbol);
    if (table_[at] < 0) {
      const StateId next = Compute(state, symbol);  // may grow table_
      table_[at] = next;
    }
    return table_[at];
  }
  // True when the input so far is a complete sentence of the grammar.
  bool Accepting(StateId state) const { return accepting_[size_t(state)]; }
  // True when nothing can follow (complete, and no stack has input left to match).
  bool Finished(StateId state) const { return accepting_[size_t(state)] && sets_[size_t(state)].size() == 1; }
  int32_t num_symbols() const { return num_symbols_; }
  // Transition table rows reserved at construction (see the constructor).
  static constexpr int32_t kReservedStates = 16384;

  // ---- The context split, for token_matcher.h's fast masks ----
  // A stack's top frames decide most tokens on their own: cut the stack `frames` nodes down and
  // put the marker kContextNode where the rest was, and a walk from that "local" stack is the
  // real walk until some path pops into the marker; what such a path would do next depends on
  // the real rest (the context) only through the bytes the context can match first.
  // Local states live in this automaton beside the real ones (same tables); they are never a
  // parse position.
  static constexpr int32_t kContextNode = 1;
  // The stacks of `state` (sorted node ids; 0 = the empty stack, kContextNode = the marker).
  const std::vector<int32_t>& Stacks(StateId state) const { return sets_[size_t(state)]; }
  // True when a path of (local) `state` popped into the context marker.
  bool HasContext(StateId state) const { return has_context_[size_t(state)]; }
  struct Cut {
    StateId local;    // the top frames of the group's stacks, each over the marker (or whole)
    int32_t context;  // the real node the marker stands for; -1 when the stacks had no more frames
    // >= 0: the group's repetition count was replaced by the canonical chain's (see CutState)
    // and this is the real one: a walk from `local` is exact for the paths whose TakeLevel
    // tags are at most `count`. -1: nothing replaced, or counts replaced by min(count, horizon).
    int32_t count = -1;
  };
  // The stacks of `state` (but the empty one) cut `frames` (>= 1) nodes down, grouped by the
  // node below the cut (one local state per context, so e.g. all the alternatives of a
  // string's next character share one walk). `horizon` > 0 (pass the longest token's bytes +
  // 1): repetition counts in the frames (a family of Grammar::RepChain of one element) are
  // canonicalised so that every string (array) of a family shares one local state whatever
  // its count. When the group's frames hold one count of one family (and its context, if any,
  // is alive), that count is replaced by the family's canonical chain (synthetic rules, never
  // a parse position) at level `horizon`, and Cut::count keeps the real one: a path of a walk
  // from the local state is the real path as long as its TakeLevel tags stay <= count.
  // Otherwise each count becomes the same position in the family's longest chain at count
  // min(count, horizon) (no token can exhaust a count of at least the horizon).
  std::vector<Cut> CutState(StateId state, int frames, int32_t horizon = 0);
  // For walks from a canonical local state: what taking `byte` in `state` needs of the real
  // count. 0: no stack of the canonical chain takes it (or none at all: Next is dead); t > 0:
  // only stacks of the canonical chain at level horizon - t + 1 take it, so the real path
  // exists when the real count is at least t; kMixedTake: stacks of different levels, or of
  // the chain and not, take it (walk such a subtree from the real state).
  static constexpr int32_t kMixedTake = -1;
  int32_t TakeTag(StateId state, uint8_t byte, int32_t horizon);
  // What the context `node` can do first: the bytes its expansions match, and whether it
  // expands to any stack at all (a path that reaches it at a token's end keeps the token).
  struct First {
    std::bitset<256> bytes;
    bool alive = false;
    StateId state = kDeadState;  // the (real) state of those expansions
  };
  const First& FirstOf(int32_t node);
  // True when a stack of `state` other than the marker and the empty one can take `symbol`.
  bool LocalTakes(StateId state, Symbol symbol) const;
  // The bytes some stack of `state` can take (Next is dead on the others).
  std::bitset<256> TakenBytes(StateId state) const;
  const std::vector<std::string>& special_names() const { return special_names_; }
  size_t num_states() const { return sets_.size(); }
 private:
  static constexpr int32_t kEnd = -1;  // element kind marker in the flat program
  struct Node {
    int32_t pos;     // index into program_ (a class element, or kEnd only transiently)
    int32_t parent;  // node id; 0 = the bottom
  };
  struct Op {
    int32_t kind;    // kEnd, 0 = class, 1 = ref
    int32_t index;   // class or rule
  };
  int32_t Intern(int32_t pos, int32_t parent);
  StateId InternSet(std::vector<int32_t> set);
  void Expand(int32_t node, std::vector<int32_t>& out, int depth);
  StateId Compute(StateId state, Symbol symbol);

  std::vector<Op> program_;                        // every alternative, each ended by kEnd
  std::vector<std::vector<int32_t>> rule_starts_;  // per rule: where its alternatives start
  std::vector<SymbolClass> classes_;
  std::vector<std::string> special_names_;
  // Per program position inside a chain rule T_k (k >= 1) whose repeated element cannot be
  // empty: its chain's family (the chains of one element), k, and its offset in the rule
  // (chain -1 elsewhere).
  struct ChainPos {
    int32_t chain = -1;
    int32_t level = 0;
    int32_t offset = 0;
    bool canonical = false;  // in the family's synthetic chain (canon_rules_)
  };
  // The rule of family `family`'s canonical chain at `level` (built up to it on first use).
  int32_t CanonRule(int32_t family, int32_t level);
  // The canonical chain's level of stack `node` (0: none of its frames is in one).
  int32_t CanonLevel(int32_t node) const;
  std::vector<ChainPos> chain_pos_;
  std::vector<std::vector<int32_t>> chain_rules_;  // per family: its longest chain, level -> rule
  std::vector<Op> chain_elem_;                     // per family: the repeated element
  // Per family: its canonical chain, level -> rule: synthetic rules shaped as the chains
  // (S_k ::= e S_{k-1} | ε) appended to program_, reached only through CutState.
  std::vector<std::vector<int32_t>> canon_rules_;
  // TakeTag's cache: per state, -1 or a row of take_rows_ (per byte, its tag).
  std::vector<int32_t> take_row_;
  std::vector<std::vector<int32_t>> take_rows_;
  int32_t num_symbols_ = 256;

  std::vector<Node> nodes_;                        // node 0 = the empty stack
  std::unordered_map<uint64_t, int32_t> node_index_;
  std::vector<std::vector<int32_t>> sets_;         // StateId -> sorted node ids
  std::unordered_map<uint64_t, std::vector<StateId>> set_index_;  // hash -> candidates
  std::vector<bool> accepting_;
  std::vector<bool> has_context_;                  // StateId -> holds kContextNode
  std::unordered_map<int32_t, First> first_;       // FirstOf's cache, by node
  std::vector<uint32_t> stamp_;                    // per node: the Expand round that last saw it
  uint32_t round_ = 0;
  std::vector<int32_t> table_;                     // [state][symbol] -> next, -1 = not computed
  // Per state: (the stacks taking a symbol, as a bit per stack; the next state), Compute's memo.
  std::vector<std::vector<std::pair<uint64_t, StateId>>> memo_;
  StateId start_ = kDeadState;
};

}  // namespace cedar::grammar
