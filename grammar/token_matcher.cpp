#include "grammar/token_matcher.h"

#include <algorithm>
#include <bit>
#include <limits>
#include <numeric>

namespace cedar::grammar {

namespace {
// Masks kept per matcher before the cache starts over (a mask of 129,280 ids is 16 KiB).
constexpr size_t kMaxCachedMasks = 512;
// Below this many trie nodes a whole walk is cheaper than the fast masks' bookkeeping (each
// state's stacks walked apart, the local states' transitions computed): bench_grammar measured
// the 512-id byte vocabulary (256 nodes) at p99 0.28 ms walking whole vs 0.57 ms split.
constexpr size_t kMinTrieNodesToSplit = 16384;
// Of those, masks holding per-node chain levels (two uint16 per trie node: about 1 MiB each at
// 274K nodes), so that many bounded strings do not hold 512 of them.
constexpr size_t kMaxLevelMasks = 48;
}  // namespace

TokenVocab::TokenVocab(const std::vector<std::string>& token_bytes,
                       const std::vector<std::pair<int32_t, std::string>>& specials)
    : vocab_size_(int32_t(token_bytes.size())), bytes_(token_bytes), specials_(specials) {
  std::vector<int32_t> order;
  for (int32_t id = 0; id < vocab_size_; ++id)
    if (!bytes_[size_t(id)].empty()) order.push_back(id);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return bytes_[size_t(a)] < bytes_[size_t(b)]; });
  // Sorted insertion builds the trie in preorder: each string shares its longest common prefix
  // with the previous one, and only the rest becomes new nodes, appended.
  std::vector<int32_t> path;  // path[d] = node at depth d + 1 of the previous string
  std::string prev;
  std::vector<std::vector<int32_t>> ids_at;
  for (int32_t id : order) {
    const std::string& s = bytes_[size_t(id)];
    size_t common = 0;
    while (common < s.size() && common < prev.size() && s[common] == prev[common]) ++common;
    path.resize(common);
    for (size_t d = common; d < s.size(); ++d) {
      parent_.push_back(d == 0 ? -1 : path[d - 1]);
      path.push_back(int32_t(node_byte_.size()));
      node_byte_.push_back(uint8_t(s[d]));
      node_depth_.push_back(uint16_t(std::min<size_t>(d + 1, std::numeric_limits<uint16_t>::max())));
      ids_at.emplace_back();
    }
    ids_at[size_t(path.back())].push_back(id);
    max_depth_ = std::max(max_depth_, int(s.size()));
    prev = s;
  }
  const int32_t n = int32_t(node_byte_.size());
  subtree_end_.assign(size_t(n), n);
  std::vector<int32_t> open;  // nodes whose subtree is still open, by depth
  for (int32_t i = 0; i < n; ++i) {
    while (!open.empty() && node_depth_[size_t(open.back())] >= node_depth_[size_t(i)]) {
      subtree_end_[size_t(open.back())] = i;
      open.pop_back();
    }
    open.push_back(i);
  }
  token_begin_.reserve(size_t(n) + 1);
  for (int32_t i = 0; i < n; ++i) {
    token_begin_.push_back(int32_t(token_ids_.size()));
    token_ids_.insert(token_ids_.end(), ids_at[size_t(i)].begin(), ids_at[size_t(i)].end());
  }
  token_begin_.push_back(int32_t(token_ids_.size()));
}

int32_t TokenVocab::SpecialId(std::string_view name) const {
  for (const auto& [id, n] : specials_)
    if (n == name) return id;
  return -1;
}

int64_t TokenMask::Count() const {
  int64_t c = 0;
  for (uint64_t w : words) c += std::popcount(w);
  return c;
}

TokenMatcher::TokenMatcher(std::shared_ptr<Automaton> automaton, std::shared_ptr<const TokenVocab> vocab,
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
  history_.push_back(automaton_->Start());
  walk_.resize(size_t(vocab_->max_depth_) + 1);
}

void TokenMatcher::Walk(StateId s, int32_t begin, int32_t end, int base, TokenMask& mask) {
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
void TokenMatcher::Compute(StateId s, TokenMask& mask) {
  const TokenVocab& v = *vocab_;
  mask.words.assign((size_t(v.size()) + 63) / 64, 0);
  Walk(s, 0, int32_t(v.node_byte_.size()), 0, mask);
  Automaton& a = *automaton_;
  for (const auto& [id, sym] : special_symbols_)
    if (a.Next(s, sym) != kDeadState) mask.Set(id);
  if (a.Accepting(s))
    for (int32_t id : end_ids_) mask.Set(id);
}

const TokenMatcher::LocalMask& TokenMatcher::Local(int32_t node, Automaton::Cut& cut, uint64_t& key) {
  const TokenVocab& v = *vocab_;
  Automaton& a = *automaton_;
  // The canonical count must be out of reach of any token (each repeat takes a byte).
  const int32_t horizon = std::min(v.max_depth_ + 1, int(kNoLevel16) - 2);
  cut = a.CutStack(node, options_.cut_frames, horizon);
  const Automaton::First* first = nullptr;
  uint32_t first_id = ~0u;  // no context: the local stack is the whole stack
  if (cut.context >= 0) {
    first = &a.FirstOf(cut.context);
    std::string k(first->bytes.to_string());
    k += first->alive ? '1' : '0';
    first_id = first_ids_.emplace(std::move(k), uint32_t(first_ids_.size())).first->second;
  }
  key = (uint64_t(uint32_t(cut.local)) << 32) | first_id;
  if (auto it = local_cache_.find(key); it != local_cache_.end()) return it->second;
  if (local_cache_.size() >= kMaxCachedMasks || local_levels_ >= kMaxLevelMasks) {
    local_cache_.clear();
    below_cache_.clear();
    local_levels_ = 0;
  }
  LocalMask& lm = local_cache_[key];
  ++stats_.local_walks;
  const int32_t n = int32_t(v.node_byte_.size());
  lm.certain.words.assign((size_t(v.size()) + 63) / 64, 0);
  const bool levels = cut.chain >= 0;
  auto level_of = [&](StateId st) -> uint16_t {
    if (size_t(st) >= chain_level_.size()) chain_level_.resize(a.num_states() * 2, -1);
    int32_t& l = chain_level_[size_t(st)];
    if (l < 0) l = std::min<int32_t>(a.ChainLevel(st, cut.chain), kNoLevel16);
    return uint16_t(l);
  };
  if (levels) {
    ++local_levels_;
    chain_level_.assign(a.num_states() * 2, -1);
    lm.path_level.assign(size_t(n), kNoLevel16);
    level_.assign(walk_.size(), kNoLevel16);
    level_[0] = level_of(cut.local);
  }
  walk_[0] = cut.local;
  visited_.clear();
  for (int32_t i = 0; i < n;) {
    const int d = v.node_depth_[size_t(i)];
    const StateId from = walk_[size_t(d - 1)];
    const uint8_t byte = v.node_byte_[size_t(i)];
    if (first && a.HasContext(from) && first->bytes.test(byte)) {
      lm.uncertain.push_back(i);  // a path continues into the context: decided per real state
      i = v.subtree_end_[size_t(i)];
      continue;
    }
    const StateId next = a.Next(from, byte);
    if (next == kDeadState) {
      i = v.subtree_end_[size_t(i)];
      continue;
    }
    walk_[size_t(d)] = next;
    if (levels) {
      lm.path_level[size_t(i)] = level_[size_t(d)] = std::min(level_[size_t(d - 1)], level_of(next));
      visited_.push_back(i);
    }
    if (v.token_begin_[size_t(i)] < v.token_begin_[size_t(i) + 1]) {
      // A token ending here fits if a local stack is alive, or a path reached the context and
      // the context has a stack to continue on.
      const bool fits = !a.HasContext(next) || a.Stacks(next).size() > 1 || first->alive;
      if (fits)
        for (int32_t k = v.token_begin_[size_t(i)]; k < v.token_begin_[size_t(i) + 1]; ++k)
          lm.certain.Set(v.token_ids_[size_t(k)]);
    }
    ++i;
  }
  if (levels) {
    // Children after parents in preorder: one backward pass over the nodes walked (a visited
    // node's parent was visited) gives each its subtree's least level.
    lm.subtree_level.assign(size_t(n), kNoLevel16);
    uint16_t top = 0;
    for (auto it = visited_.rbegin(); it != visited_.rend(); ++it) {
      const int32_t i = *it;
      uint16_t& sub = lm.subtree_level[size_t(i)];
      sub = std::min(sub, lm.path_level[size_t(i)]);
      const int32_t p = v.parent_[size_t(i)];
      if (p >= 0) lm.subtree_level[size_t(p)] = std::min(lm.subtree_level[size_t(p)], sub);
      if (lm.path_level[size_t(i)] < kNoLevel16) top = std::max(top, lm.path_level[size_t(i)]);
    }
    // The certain ids by path level (a counting sort; CertainBelow takes out a prefix).
    lm.level_begin.assign(size_t(top) + 2, 0);
    for (int32_t i : visited_)
      if (lm.path_level[size_t(i)] < kNoLevel16)
        lm.level_begin[size_t(lm.path_level[size_t(i)]) + 1] += v.token_begin_[size_t(i) + 1] - v.token_begin_[size_t(i)];
    for (size_t l = 1; l < lm.level_begin.size(); ++l) lm.level_begin[l] += lm.level_begin[l - 1];
    lm.by_level.assign(size_t(lm.level_begin.back()), -1);
    std::vector<int32_t> fill(lm.level_begin.begin(), lm.level_begin.end() - 1);
    for (int32_t i : visited_)
      if (lm.path_level[size_t(i)] < kNoLevel16)
        for (int32_t k = v.token_begin_[size_t(i)]; k < v.token_begin_[size_t(i) + 1]; ++k)
          lm.by_level[size_t(fill[lm.path_level[size_t(i)]]++)] = v.token_ids_[size_t(k)];
  }
  return lm;
}

const TokenMask& TokenMatcher::CertainBelow(const LocalMask& lm, uint64_t key, int32_t slack) {
  if (below_cache_.size() >= kMaxCachedMasks && !below_cache_.count({key, slack})) below_cache_.clear();
  auto [it, added] = below_cache_.try_emplace({key, slack});
  if (!added) return it->second;
  TokenMask& m = it->second;
  m = lm.certain;
  // Ids at levels <= slack (clearing an id `certain` lacks is harmless).
  const size_t end = size_t(lm.level_begin[std::min<size_t>(size_t(slack) + 1, lm.level_begin.size() - 1)]);
  for (size_t k = 0; k < end; ++k) {
    const int32_t id = lm.by_level[k];
    m.words[size_t(id) >> 6] &= ~(1ull << (id & 63));
  }
  return m;
}

void TokenMatcher::WalkBelow(StateId s, const LocalMask& lm, int32_t slack, TokenMask& mask) {
  const TokenVocab& v = *vocab_;
  Automaton& a = *automaton_;
  walk_[0] = s;
  const int32_t n = int32_t(v.node_byte_.size());
  for (int32_t i = 0; i < n;) {
    if (lm.subtree_level[size_t(i)] > slack) {
      i = v.subtree_end_[size_t(i)];
      continue;
    }
    const int d = v.node_depth_[size_t(i)];
    const StateId next = a.Next(walk_[size_t(d - 1)], v.node_byte_[size_t(i)]);
    if (next == kDeadState) {
      i = v.subtree_end_[size_t(i)];
      continue;
    }
    walk_[size_t(d)] = next;
    for (int32_t k = v.token_begin_[size_t(i)]; k < v.token_begin_[size_t(i) + 1]; ++k) mask.Set(v.token_ids_[size_t(k)]);
    ++i;
  }
}

// The union over the state's stacks of their top frames' cached verdicts, then the subtrees
// that cross into a context walked from the real state (exact: the real walk of those tokens).
void TokenMatcher::ComputeFast(StateId s, TokenMask& mask) {
  const TokenVocab& v = *vocab_;
  Automaton& a = *automaton_;
  mask.words.assign((size_t(v.size()) + 63) / 64, 0);
  roots_.clear();
  const std::vector<int32_t> stacks = a.Stacks(s);  // a copy: Local() adds states
  for (int32_t node : stacks) {
    if (node == 0) continue;  // the end: the end ids below
    Automaton::Cut cut;
    uint64_t key = 0;
    const LocalMask& lm = Local(node, cut, key);
    const TokenMask& certain = cut.slack > 0 ? CertainBelow(lm, key, cut.slack) : lm.certain;
    for (size_t w = 0; w < mask.words.size(); ++w) mask.words[w] |= certain.words[w];
    if (cut.slack > 0) WalkBelow(s, lm, cut.slack, mask);  // the tokens that reach the real count's limit
    roots_.insert(roots_.end(), lm.uncertain.begin(), lm.uncertain.end());
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
    ++stats_.context_walks;
    Walk(r, root, covered, v.node_depth_[size_t(root)] - 1, mask);
  }
  for (const auto& [id, sym] : special_symbols_)
    if (a.Next(s, sym) != kDeadState) mask.Set(id);
  if (a.Accepting(s))
    for (int32_t id : end_ids_) mask.Set(id);
}

const TokenMask& TokenMatcher::Mask() {
  const StateId s = history_.back();
  if (ended_) {
    auto [it, added] = cache_.try_emplace(kDeadState);
    if (added) it->second.words.assign((size_t(vocab_->size()) + 63) / 64, 0);
    return it->second;
  }
  auto it = cache_.find(s);
  if (it != cache_.end()) return it->second;
  if (cache_.size() >= kMaxCachedMasks) cache_.clear();
  TokenMask& m = cache_[s];
  ++stats_.states;
  if (options_.cut_frames > 0) ComputeFast(s, m);
  else Compute(s, m);
  return m;
}

int64_t TokenMatcher::ApplyMask(std::span<float> logits) {
  const TokenMask& m = Mask();
  const float ninf = -std::numeric_limits<float>::infinity();
  const size_t v = std::min(logits.size(), size_t(vocab_->size()));
  int64_t allowed = 0;
  for (size_t w = 0; w * 64 < v; ++w) {
    const uint64_t bits = m.words[w];
    allowed += std::popcount(bits);
    if (bits == ~0ull) continue;
    const size_t end = std::min(v, w * 64 + 64);
    if (bits == 0) {  // most words outside strings: a plain fill the compiler vectorises
      std::fill(logits.begin() + std::ptrdiff_t(w * 64), logits.begin() + std::ptrdiff_t(end), ninf);
      continue;
    }
    for (size_t i = w * 64; i < end; ++i)
      if (!((bits >> (i - w * 64)) & 1)) logits[i] = ninf;
  }
  for (size_t i = v; i < logits.size(); ++i) logits[i] = ninf;
  return allowed;
}

bool TokenMatcher::AcceptToken(int32_t id) {
  if (ended_ || id < 0 || id >= vocab_->size()) return false;
  Automaton& a = *automaton_;
  StateId s = history_.back();
  if (std::find(end_ids_.begin(), end_ids_.end(), id) != end_ids_.end()) {
    if (!a.Accepting(s)) return false;
    ended_ = true;
    history_.push_back(s);
    ended_at_ = history_.size();
    return true;
  }
  const std::string& bytes = vocab_->bytes(id);
  if (bytes.empty()) {
    for (const auto& [sid, sym] : special_symbols_) {
      if (sid != id) continue;
      s = a.Next(s, sym);
      if (s == kDeadState) return false;
      history_.push_back(s);
      return true;
    }
    return false;  // unused, or a special the grammar does not mention
  }
  for (char ch : bytes) {
    s = a.Next(s, Symbol(uint8_t(ch)));
    if (s == kDeadState) return false;
  }
  history_.push_back(s);
  return true;
}

void TokenMatcher::Rollback(size_t n) {
  n = std::min(n, accepted());
  history_.resize(history_.size() - n);
  if (ended_ && history_.size() < ended_at_) ended_ = false;
}

}  // namespace cedar::grammar
