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
// result is the reference mask bit for bit (tests/grammar_mask_test.cpp).
//
// Counts. A string with maxLength (any bounded repetition, a family of Grammar::RepChain)
// counts its characters in its frames. Every count shares one walk: the count is replaced by a
// canonical one (Automaton::CutState), each id the walk accepts (and each context root) is
// tagged with the count its path needs (Automaton::TakeTag), and the real count picks the ids
// (LocalMask::by_count); a subtree whose path the count's stacks and others share is walked
// from the real state. Before, each count of a maxLength 40 string was its own 2-30 ms walk.
//
// Compile time: Compile computes the cut groups' verdicts reachable from the start (Prewarm,
// compiled_grammar_prewarm.cpp), so a first generation finds them cached; it costs 15-380 ms
// per grammar on the released vocabulary (bench_grammar's prewarm_ms), once per grammar
// (grammar_cache.h keeps it for the next request with the same schema or tools), and the
// server runs it beside the prefill (MatcherOptions::prewarm_async).
//
// Memory: the caches hold at most MatcherOptions::max_cache_bytes (24 MiB) of masks (past it
// the states' masks start over, at the next new state, and the top frames' verdicts too once
// they hold half of it; one computation adds at most a mask per cut group first; verdicts are
// stored compactly, compact_mask.h), and the automaton's table grows with the states reached,
// ~1 KiB per state (Retired() says when a cache (grammar_cache.h) should stop handing this one
// out).
//
// Thread contract: every method is thread-safe (one mutex; a cold mask computation holds it
// for its whole walk, so a second generation of the same grammar waits and then finds the mask
// cached). Masks are handed out as shared_ptr: a cache that starts over frees none in use.
#pragma once
#include <atomic>
#include <cstdint>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "grammar/automaton.h"
#include "grammar/compact_mask.h"
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
  // Compile walks the automaton from the start, byte by byte, for at most this many states
  // and computes the top frames' verdicts of every cut group it meets (Prewarm), so that the
  // first generation finds them cached (XGrammar computes its per-position mask cache at
  // compile). 0 = all lazily, at the first generation's steps. Ignored for whole-trie walks.
  int prewarm_states = 4096;
  // Run that prewarm on a thread of its own after Compile returns (the server's default: it
  // overlaps the request's prefill, as vLLM compiles grammars while a request waits). Masks
  // asked for meanwhile are computed as usual (the thread takes the lock one state at a time),
  // so a generation never waits for the whole prewarm. false: Compile returns after it.
  bool prewarm_async = false;
};

// Work done computing masks (for benchmarks).
struct MaskStats {
  int64_t states = 0;          // masks computed (new states)
  int64_t local_walks = 0;     // top frames walked (fast masks' cache misses)
  int64_t context_walks = 0;   // subtrees walked from a real state (fast masks)
};

// What Compile's prewarm did (for benchmarks and the debug log).
struct PrewarmStats {
  int64_t states = 0;          // automaton states visited
  int64_t local_walks = 0;     // cut groups' verdicts computed
  double ms = 0;               // its wall time
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
  // Stops a prewarm still running (at its next state) and waits for it.
  ~CompiledGrammar();
  CompiledGrammar(const CompiledGrammar&) = delete;
  CompiledGrammar& operator=(const CompiledGrammar&) = delete;
  // Compiles `grammar` (Automaton's errors), prewarms (MatcherOptions::prewarm_states) and
  // computes the start state's mask.
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
  // What the prewarm did so far (complete once WaitPrewarm returns).
  PrewarmStats prewarm_stats();
  // Returns once the prewarm (MatcherOptions::prewarm_async) has ended; at once if none runs.
  void WaitPrewarm();

 private:
  // A cut group's top frames' verdicts: `certain` holds the ids they accept whatever the
  // context; the ids under trie nodes `uncertain` (preorder, none inside another) cross into the
  // context and are walked from the real state.
  // `context_roots` are those of them where only the context goes on (the top frames cannot
  // take the root's byte): the real state there is the context's own (Automaton::First::state),
  // the same for every count of a bounded string, so they are walked from it, not through the
  // real state's new transitions.
  //
  // A canonical group (Automaton::Cut::count >= 0: one repetition count, replaced by the
  // canonical chain's) tags each certain id and context root with the real count its path
  // needs (Automaton::TakeTag): `by_count[c]` holds the ids certain at count c (c <= kTagLevels,
  // cumulative), `late` the ids needing more (by tag), and a context root is walked when its
  // prefix's tag is at most the count. So every count of a string shares one walk.
  struct LocalMask {
    CompactMask certain;
    std::vector<int32_t> uncertain;
    std::vector<int32_t> context_roots;
    bool tagged = false;
    std::vector<CompactMask> by_count;
    std::vector<std::pair<int32_t, int32_t>> late;           // (tag, id), tag > kTagLevels, sorted
    std::vector<std::pair<int32_t, int32_t>> tagged_roots;   // (tag of the prefix, context root)
    size_t Bytes() const;
  };
  // Counts below this share a cumulative mask each; ids needing more are set one by one (few:
  // tokens of more than this many characters).
  static constexpr int32_t kTagLevels = 16;
  // Computes the cut groups' verdicts met walking the automaton from the start
  // (compiled_grammar_prewarm.cpp), taking mu_ one state at a time.
  void Prewarm();
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
  std::thread prewarm_thread_;       // MatcherOptions::prewarm_async's
  std::shared_future<void> prewarmed_;  // ready when that thread's prewarm has ended
  std::atomic<bool> stop_{false};    // set by the destructor: the prewarm stops early
  MatcherOptions options_;
  std::shared_ptr<Automaton> automaton_;
  std::shared_ptr<const TokenVocab> vocab_;
  std::vector<int32_t> end_ids_;
  PrewarmStats prewarm_;
  std::vector<std::pair<int32_t, Symbol>> special_symbols_;  // (vocab id, grammar symbol)
  StateId start_ = kDeadState;
  std::shared_ptr<const TokenMask> nothing_;
  size_t bytes_ = 0;                 // held by the two caches below
  size_t local_bytes_ = 0;           // of which local_cache_'s
  std::unordered_map<StateId, std::shared_ptr<const TokenMask>> cache_;  // state -> mask
  std::unordered_map<uint64_t, LocalMask> local_cache_;  // (local state, context's first bytes) -> mask
  std::unordered_map<std::string, uint32_t> first_ids_;   // a context's First, interned for the key
  // Scratch of one computation.
  std::vector<int32_t> roots_;       // uncertain subtrees of one state
  std::vector<std::pair<int32_t, StateId>> context_roots_;  // (root, context state) of one state
  std::string prefix_;               // a trie node's bytes
  std::vector<StateId> walk_;        // per trie depth: the state after that prefix
  std::vector<int32_t> walk_tag_;    // per trie depth: the prefix's count tag (canonical walks)
  std::vector<std::pair<int32_t, int32_t>> tagged_ids_;  // (tag, id) of one canonical walk
  TokenMask scratch_;                // a local walk's verdicts before compaction
  int32_t horizon_ = 0;              // Automaton::CutState's horizon: the longest token + 1
};

}  // namespace cedar::grammar
