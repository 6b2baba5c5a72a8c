#include "grammar/compiled_grammar.h"

#include <algorithm>
#include <bit>
#include <limits>

namespace cedar::grammar {

namespace {
// Below this many trie nodes a whole walk is cheaper than the fast masks' bookkeeping (each
// state's stacks walked apart, the local states' transitions computed): bench_grammar measured
// the 512-id byte vocabulary (256 nodes) at p99 0.28 ms walking whole vs 0.57 ms split.
constexpr size_t kMinTrieNodesToSplit = 16384;
}  // namespace

size_t CompiledGrammar::LocalMask::Bytes() const {
  size_t b = certain.Bytes() + uncertain.size() * 4 + context_roots.size() * 4;
  for (const CompactMask& m : by_count) b += m.Bytes();
  return b + (late.size() + tagged_roots.size()) * 8;
}

CompiledGrammar::CompiledGrammar(std::shared_ptr<Automaton> automaton, std::shared_ptr<const TokenVocab> vocab,
                                 std::vector<int32_t> end_ids, MatcherOptions options)
    : options_(options), automaton_(std::move(automaton)), vocab_(std::move(vocab)), end_ids_(std::move(end_ids)) {
  const auto& names = automaton_->special_names();
  for (size_t k = 0; k < names.size(); ++k) {
    const int32_t id = vocab_->SpecialId(names[k]);
    if (id < 0) throw GrammarError("grammar: the special token " + names[k] + " is not in the vocabulary");
    special_symbols_.emplace_back(id, kFirstSpecial + Symbol(k));
  }
  for (int32_t id : end_ids_) {
    if (id < 0 || id >= vocab_->size()) {
      throw GrammarError("grammar: end id " + std::to_string(id) + " is outside the vocabulary (size " +
                         std::to_string(vocab_->size()) + ")");
    }
  }
  if (vocab_->trie_nodes() < kMinTrieNodesToSplit) options_.cut_frames = 0;
  start_ = automaton_->Start();
  walk_.resize(size_t(vocab_->max_depth_) + 1);
  walk_tag_.resize(walk_.size());
  horizon_ = vocab_->max_depth_ + 1;
  auto nothing = std::make_shared<TokenMask>();
  nothing->words.assign((size_t(vocab_->size()) + 63) / 64, 0);
  nothing_ = std::move(nothing);
}

std::shared_ptr<CompiledGrammar> CompiledGrammar::Compile(const Grammar& grammar, std::shared_ptr<const TokenVocab> vocab,
                                                          std::vector<int32_t> end_ids, MatcherOptions options) {
  auto compiled = std::make_shared<CompiledGrammar>(std::make_shared<Automaton>(grammar), std::move(vocab),
                                                    std::move(end_ids), options);
  compiled->Mask(compiled->Start(), nullptr);  // the first step's mask, part of the compile
  if (!compiled->options_.prewarm_async) {
    compiled->Prewarm();
  } else {
    // The thread holds a plain pointer: the destructor stops and joins it.
    std::packaged_task<void()> task([raw = compiled.get()] { raw->Prewarm(); });
    compiled->prewarmed_ = task.get_future().share();
    compiled->prewarm_thread_ = std::thread(std::move(task));
  }
  return compiled;
}

CompiledGrammar::~CompiledGrammar() {
  stop_ = true;
  if (prewarm_thread_.joinable()) prewarm_thread_.join();
}

void CompiledGrammar::WaitPrewarm() {
  if (prewarmed_.valid()) prewarmed_.wait();
}

PrewarmStats CompiledGrammar::prewarm_stats() {
  std::lock_guard<std::mutex> lock(mu_);
  return prewarm_;
}

std::shared_ptr<const TokenMask> CompiledGrammar::Mask(StateId s, MaskStats* stats) {
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = cache_.find(s); it != cache_.end()) return it->second;
  if (bytes_ >= options_.max_cache_bytes) {
    // Start over (masks in use live on in their holders): the states' masks, and the top
    // frames' verdicts too once they hold half the budget (they are the dear ones to
    // recompute, and Prewarm computed most of them at compile).
    cache_.clear();
    bytes_ = local_bytes_;
    if (local_bytes_ >= options_.max_cache_bytes / 2) {
      local_cache_.clear();
      bytes_ = local_bytes_ = 0;
    }
  }
  MaskStats scratch;
  MaskStats& st = stats ? *stats : scratch;
  auto mask = std::make_shared<TokenMask>();
  ++st.states;
  if (options_.cut_frames > 0) ComputeFast(s, *mask, st);
  else Compute(s, *mask);
  bytes_ += MaskBytes();
  cache_.emplace(s, mask);
  return mask;
}

bool CompiledGrammar::Cached(StateId s) {
  std::lock_guard<std::mutex> lock(mu_);
  return cache_.count(s) > 0;
}

StateId CompiledGrammar::Advance(StateId s, int32_t id) {
  if (id < 0 || id >= vocab_->size()) return kDeadState;
  std::lock_guard<std::mutex> lock(mu_);
  Automaton& a = *automaton_;
  const std::string& bytes = vocab_->bytes(id);
  if (bytes.empty()) {
    for (const auto& [sid, sym] : special_symbols_)
      if (sid == id) return a.Next(s, sym);
    return kDeadState;  // unused, or a special the grammar does not mention
  }
  for (char ch : bytes) {
    s = a.Next(s, Symbol(uint8_t(ch)));
    if (s == kDeadState) break;
  }
  return s;
}

bool CompiledGrammar::IsEndId(int32_t id) const {
  return std::find(end_ids_.begin(), end_ids_.end(), id) != end_ids_.end();
}

bool CompiledGrammar::Accepting(StateId s) {
  std::lock_guard<std::mutex> lock(mu_);
  return automaton_->Accepting(s);
}

size_t CompiledGrammar::num_states() {
  std::lock_guard<std::mutex> lock(mu_);
  return automaton_->num_states();
}

size_t CompiledGrammar::cache_bytes() {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

bool CompiledGrammar::Retired() { return num_states() > kMaxStates; }

void CompiledGrammar::Walk(StateId s, int32_t begin, int32_t end, int base, TokenMask& mask) {
  const TokenVocab& v = *vocab_;
  Automaton& a = *automaton_;
  walk_[size_t(base)] = s;
  for (int32_t i = begin; i < end;) {
    const int d = v.node_depth_[size_t(i)];
    const StateId next = a.Next(walk_[size_t(d - 1)], v.node_byte_[size_t(i)]);
    if (next == kDeadState) {
      i = v.subtree_end_[size_t(i)];  // no token starting with this prefix fits
      continue;
    }
    walk_[size_t(d)] = next;
    for (int32_t k = v.token_begin_[size_t(i)]; k < v.token_begin_[size_t(i) + 1]; ++k) mask.Set(v.token_ids_[size_t(k)]);
    ++i;
  }
}

// The reference: the whole trie from the state.
void CompiledGrammar::Compute(StateId s, TokenMask& mask) {
  const TokenVocab& v = *vocab_;
  mask.words.assign((size_t(v.size()) + 63) / 64, 0);
  Walk(s, 0, int32_t(v.node_byte_.size()), 0, mask);
  Automaton& a = *automaton_;
  for (const auto& [id, sym] : special_symbols_)
    if (a.Next(s, sym) != kDeadState) mask.Set(id);
  if (a.Accepting(s))
    for (int32_t id : end_ids_) mask.Set(id);
}

const CompiledGrammar::LocalMask& CompiledGrammar::Local(const Automaton::Cut& cut, MaskStats& stats) {
  const TokenVocab& v = *vocab_;
  Automaton& a = *automaton_;
  const Automaton::First* first = nullptr;
  uint32_t first_id = ~0u;  // no context: the local stacks are the whole stacks
  if (cut.context >= 0) {
    first = &a.FirstOf(cut.context);
    std::string k(first->bytes.to_string());
    k += first->alive ? '1' : '0';
    first_id = first_ids_.emplace(std::move(k), uint32_t(first_ids_.size())).first->second;
  }
  const uint64_t key = (uint64_t(uint32_t(cut.local)) << 32) | first_id;
  if (auto it = local_cache_.find(key); it != local_cache_.end()) return it->second;
  LocalMask& lm = local_cache_[key];
  ++stats.local_walks;
  const bool tagged = lm.tagged = cut.count >= 0;
  const int32_t n = int32_t(v.node_byte_.size());
  TokenMask& certain = scratch_;
  certain.words.assign((size_t(v.size()) + 63) / 64, 0);
  tagged_ids_.clear();
  walk_[0] = cut.local;
  walk_tag_[0] = 0;
  for (int32_t i = 0; i < n;) {
    const int d = v.node_depth_[size_t(i)];
    const StateId from = walk_[size_t(d - 1)];
    const uint8_t byte = v.node_byte_[size_t(i)];
    if (first && a.HasContext(from) && first->bytes.test(byte)) {
      // A path continues into the context: decided per real state.
      if (a.LocalTakes(from, byte)) lm.uncertain.push_back(i);
      else if (tagged) lm.tagged_roots.emplace_back(walk_tag_[size_t(d - 1)], i);
      else lm.context_roots.push_back(i);
      i = v.subtree_end_[size_t(i)];
      continue;
    }
    const StateId next = a.Next(from, byte);
    if (next == kDeadState) {
      i = v.subtree_end_[size_t(i)];
      continue;
    }
    int32_t tag = 0;
    if (tagged) {
      const int32_t t = a.TakeTag(from, byte, horizon_);
      if (t == Automaton::kMixedTake) {  // the count's stacks and others take it: walk it from the real state
        lm.uncertain.push_back(i);
        i = v.subtree_end_[size_t(i)];
        continue;
      }
      tag = std::max(walk_tag_[size_t(d - 1)], t);
      walk_tag_[size_t(d)] = tag;
    }
    walk_[size_t(d)] = next;
    if (v.token_begin_[size_t(i)] < v.token_begin_[size_t(i) + 1]) {
      // A token ending here fits if a local stack is alive, or a path reached the context and
      // the context has a stack to continue on.
      const bool fits = !a.HasContext(next) || a.Stacks(next).size() > 1 || first->alive;
      if (fits)
        for (int32_t k = v.token_begin_[size_t(i)]; k < v.token_begin_[size_t(i) + 1]; ++k) {
          if (tagged) tagged_ids_.emplace_back(tag, v.token_ids_[size_t(k)]);
          else certain.Set(v.token_ids_[size_t(k)]);
        }
    }
    ++i;
  }
  if (tagged) {
    // Cumulative masks by count, then the rare ids that need more.
    std::sort(tagged_ids_.begin(), tagged_ids_.end());
    size_t k = 0;
    for (int32_t c = 0; c <= kTagLevels; ++c) {  // `certain` (empty so far) accumulates
      for (; k < tagged_ids_.size() && tagged_ids_[k].first <= c; ++k) certain.Set(tagged_ids_[k].second);
      lm.by_count.push_back(CompactMask::Of(certain));
    }
    lm.late.assign(tagged_ids_.begin() + std::ptrdiff_t(k), tagged_ids_.end());
  } else {
    lm.certain = CompactMask::Of(certain);
  }
  lm.uncertain.shrink_to_fit();
  lm.context_roots.shrink_to_fit();
  bytes_ += lm.Bytes();
  local_bytes_ += lm.Bytes();
  return lm;
}

// The union over the state's cut groups of their top frames' cached verdicts, then the subtrees
// that cross into a context walked from the real state (exact: the real walk of those tokens).
void CompiledGrammar::ComputeFast(StateId s, TokenMask& mask, MaskStats& stats) {
  const TokenVocab& v = *vocab_;
  Automaton& a = *automaton_;
  mask.words.assign((size_t(v.size()) + 63) / 64, 0);
  roots_.clear();
  context_roots_.clear();
  // The canonical count must be out of reach of any token (each repeat takes a byte).
  for (const Automaton::Cut& cut : a.CutState(s, options_.cut_frames, v.max_depth_ + 1)) {
    const LocalMask& lm = Local(cut, stats);
    const StateId context = cut.context >= 0 ? a.FirstOf(cut.context).state : kDeadState;
    roots_.insert(roots_.end(), lm.uncertain.begin(), lm.uncertain.end());
    if (lm.tagged) {
      // The ids and context roots whose paths the real count allows.
      lm.by_count[size_t(std::min(cut.count, kTagLevels))].OrInto(mask);
      for (const auto& [tag, id] : lm.late) {
        if (tag > cut.count) break;
        mask.Set(id);
      }
      if (context != kDeadState)
        for (const auto& [tag, root] : lm.tagged_roots)
          if (tag <= cut.count) context_roots_.emplace_back(root, context);
      continue;
    }
    lm.certain.OrInto(mask);
    if (context != kDeadState)
      for (int32_t root : lm.context_roots) context_roots_.emplace_back(root, context);
  }
  for (const auto& [root, context] : context_roots_) {
    ++stats.context_walks;
    Walk(context, root, v.subtree_end_[size_t(root)], v.node_depth_[size_t(root)] - 1, mask);
  }
  std::sort(roots_.begin(), roots_.end());
  int32_t covered = 0;  // trie nodes below this are walked already (roots nest in preorder)
  for (int32_t root : roots_) {
    if (root < covered) continue;
    covered = v.subtree_end_[size_t(root)];
    prefix_.clear();
    for (int32_t p = v.parent_[size_t(root)]; p >= 0; p = v.parent_[size_t(p)]) prefix_ += char(v.node_byte_[size_t(p)]);
    StateId r = s;
    for (auto it = prefix_.rbegin(); it != prefix_.rend() && r != kDeadState; ++it) r = a.Next(r, Symbol(uint8_t(*it)));
    if (r == kDeadState) continue;
    ++stats.context_walks;
    Walk(r, root, covered, v.node_depth_[size_t(root)] - 1, mask);
  }
  for (const auto& [id, sym] : special_symbols_)
    if (a.Next(s, sym) != kDeadState) mask.Set(id);
  if (a.Accepting(s))
    for (int32_t id : end_ids_) mask.Set(id);
}

}  // namespace cedar::grammar
