// CompiledGrammar::Prewarm: the cut groups' verdicts computed at compile time.
//
// A fast mask (compiled_grammar.h) is cheap once the top frames' verdicts of its cut groups are
// cached; computing one walks the vocabulary's trie from a local state (2-30 ms on the
// released 128,815-id vocabulary, a JSON string's characters being the dearest), which would
// otherwise land on the first generation's steps. So Compile walks the automaton breadth first
// from the start over the bytes (and specials) its states take, and computes the verdicts of
// every cut group it meets. A state whose cut groups (local state and context node) are those of
// a state expanded already is not expanded: it goes on as that one (a string's next character
// count has the same canonical group as the previous one, Automaton::CutState), so the walk
// stays near the grammar's size however long its strings; whatever it misses is computed
// lazily at the first step that needs it, as before. Bounded by MatcherOptions::prewarm_states
// states and by half the mask cache. With MatcherOptions::prewarm_async this runs on a thread
// of its own while the request prefills.
#include <chrono>
#include <set>
#include <unordered_set>
#include <vector>

#include <spdlog/spdlog.h>

#include "grammar/compiled_grammar.h"

namespace cedar::grammar {

void CompiledGrammar::Prewarm() {
  if (options_.cut_frames <= 0 || options_.prewarm_states <= 0) return;
  const auto t0 = std::chrono::steady_clock::now();
  Automaton& a = *automaton_;
  MaskStats work;
  std::vector<StateId> queue = {start_};
  std::unordered_set<StateId> seen = {start_};
  std::set<std::vector<int64_t>> signatures;  // the (local state, context) groups of each expanded state
  for (size_t q = 0; q < queue.size() && prewarm_.states < options_.prewarm_states && !stop_; ++q) {
    // One state per lock: a generation's mask (on another thread) waits for one state's walks
    // at most, not for the whole prewarm.
    std::lock_guard<std::mutex> lock(mu_);
    const StateId s = queue[q];
    ++prewarm_.states;
    prewarm_.local_walks = work.local_walks;
    std::vector<int64_t> signature;
    for (const Automaton::Cut& cut : a.CutState(s, options_.cut_frames, horizon_)) {
      Local(cut, work);
      signature.push_back((int64_t(cut.local) << 32) | uint32_t(cut.context));
    }
    if (bytes_ >= options_.max_cache_bytes / 2) break;
    if (!signatures.insert(std::move(signature)).second) continue;
    const std::bitset<256> takes = a.TakenBytes(s);
    for (int b = 0; b < 256; ++b) {
      if (!takes.test(size_t(b))) continue;
      const StateId next = a.Next(s, Symbol(b));
      if (next != kDeadState && seen.insert(next).second) queue.push_back(next);
    }
    for (Symbol sym = kFirstSpecial; sym < a.num_symbols(); ++sym) {
      const StateId next = a.Next(s, sym);
      if (next != kDeadState && seen.insert(next).second) queue.push_back(next);
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  prewarm_.local_walks = work.local_walks;
  prewarm_.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  spdlog::debug("grammar: prewarm visited {} states, computed {} cut groups' verdicts in {:.1f} ms",
                prewarm_.states, prewarm_.local_walks, prewarm_.ms);
}

}  // namespace cedar::grammar
