#include "grammar/automaton.h"

#include <algorithm>
#include <map>

namespace cedar::grammar {

namespace {
// Nesting of rule references expanded without consuming a symbol; past it the grammar is
// left-recursive (a rule reaches itself at its start), which a top-down automaton cannot run.
constexpr int kMaxExpandDepth = 2000;

uint64_t Mix(uint64_t h, uint64_t x) {
  h ^= x + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h * 0xff51afd7ed558ccdull;
}
}  // namespace

Automaton::Automaton(const Grammar& grammar) {
  grammar.Check();
  classes_ = grammar.classes();
  special_names_ = grammar.special_names();
  num_symbols_ = kFirstSpecial + int32_t(special_names_.size());
  rule_starts_.resize(grammar.rules().size());
  for (size_t r = 0; r < grammar.rules().size(); ++r) {
    for (const Alternative& alt : grammar.rules()[r].alternatives) {
      rule_starts_[r].push_back(int32_t(program_.size()));
      for (const Element& e : alt) program_.push_back({e.kind == Element::Kind::kClass ? 0 : 1, e.index});
      program_.push_back({kEnd, 0});
    }
  }
  // Nullable rules (a fixpoint): a chain counts only when its element takes at least a byte.
  std::vector<bool> nullable(grammar.rules().size(), false);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < grammar.rules().size(); ++r) {
      if (nullable[r]) continue;
      for (const Alternative& alt : grammar.rules()[r].alternatives) {
        bool all = true;
        for (const Element& e : alt) all = all && e.kind == Element::Kind::kRef && nullable[size_t(e.index)];
        if (all) {
          nullable[r] = changed = true;
          break;
        }
      }
    }
  }
  chain_pos_.resize(program_.size());
  // Chains of the same element have the same shape at every count (strings of any maxLength
  // share their character rule), so they share a family, canonicalised into its longest chain.
  std::map<std::pair<int, int32_t>, int32_t> family_of;
  for (const Grammar::RepChain& c : grammar.chains()) {
    if (c.rules.size() < 2) continue;
    const Element e = grammar.rules()[size_t(c.rules[1])].alternatives[0][0];
    if (e.kind == Element::Kind::kRef && nullable[size_t(e.index)]) continue;
    const auto [fit, added] = family_of.emplace(std::make_pair(int(e.kind), e.index), int32_t(chain_rules_.size()));
    if (added) {
      chain_rules_.push_back(c.rules);
      chain_elem_.push_back({e.kind == Element::Kind::kClass ? 0 : 1, e.index});
      canon_rules_.emplace_back();
    }
    const int32_t id = fit->second;
    if (chain_rules_[size_t(id)].size() < c.rules.size()) chain_rules_[size_t(id)] = c.rules;
    for (size_t k = 1; k < c.rules.size(); ++k) {
      const auto& starts = rule_starts_[size_t(c.rules[k])];
      const int32_t first = starts.front();
      const int32_t last = starts.back();
      // T_k's program: alternative 1 (e, T_{k-1}, end) then alternative 2 (end).
      for (int32_t pos = first; pos <= last; ++pos) chain_pos_[size_t(pos)] = {id, int32_t(k), pos - first};
    }
  }
  nodes_.push_back({kEnd, 0});          // node 0: the empty stack
  nodes_.push_back({kEnd, 0});          // node 1: the context marker (never interned by (pos, parent))
  sets_.push_back({});                  // state 0: dead
  accepting_.push_back(false);
  has_context_.push_back(false);
  // Room for kReservedStates states up front (address space; pages are touched as states are
  // added): growing the table past its capacity copies it, ~1 KiB per state, a spike of
  // 0.2-0.5 ms in the step that adds the state at 2,000 states.
  table_.reserve(size_t(kReservedStates) * size_t(num_symbols_));
  table_.assign(size_t(num_symbols_), kDeadState);  // dead stays dead
  std::vector<int32_t> start;
  ++round_;
  for (int32_t pos : rule_starts_[size_t(grammar.root())]) Expand(Intern(pos, 0), start, 0);
  start_ = InternSet(std::move(start));
}

int32_t Automaton::Intern(int32_t pos, int32_t parent) {
  const uint64_t key = (uint64_t(uint32_t(pos)) << 32) | uint32_t(parent);
  auto [it, added] = node_index_.emplace(key, int32_t(nodes_.size()));
  if (added) nodes_.push_back({pos, parent});
  return it->second;
}

StateId Automaton::InternSet(std::vector<int32_t> set) {
  std::sort(set.begin(), set.end());
  set.erase(std::unique(set.begin(), set.end()), set.end());
  if (set.empty()) return kDeadState;
  uint64_t h = set.size();
  for (int32_t x : set) h = Mix(h, uint64_t(x));
  std::vector<StateId>& bucket = set_index_[h];
  for (StateId s : bucket)
    if (sets_[size_t(s)] == set) return s;
  const StateId id = StateId(sets_.size());
  accepting_.push_back(set.front() == 0);
  has_context_.push_back(std::binary_search(set.begin(), set.end(), kContextNode));
  sets_.push_back(std::move(set));
  table_.resize(table_.size() + size_t(num_symbols_), -1);
  bucket.push_back(id);
  return id;
}

// Brings stack `node` to a form whose top is a symbol class (or the empty stack), appending
// every such stack to `out`: an ended alternative pops to its parent, a rule reference
// becomes one stack per alternative, above the continuation after the reference.
void Automaton::Expand(int32_t node, std::vector<int32_t>& out, int depth) {
  if (depth > kMaxExpandDepth) throw GrammarError("grammar: left recursion (a rule reaches itself before any input)");
  if (stamp_.size() < nodes_.size()) stamp_.resize(nodes_.size() * 2, 0);
  if (stamp_[size_t(node)] == round_) return;  // expanded already in this round (also breaks ε loops)
  stamp_[size_t(node)] = round_;
  if (node == 0 || node == kContextNode) {  // the end, or the cut's marker: kept as they are
    out.push_back(node);
    return;
  }
  const Node n = nodes_[size_t(node)];
  const Op op = program_[size_t(n.pos)];
  if (op.kind == kEnd) return Expand(n.parent, out, depth + 1);
  if (op.kind == 0) {
    out.push_back(node);
    return;
  }
  // A reference: continue after it once the rule ends (a tail call keeps no entry).
  const int32_t base = program_[size_t(n.pos + 1)].kind == kEnd ? n.parent : Intern(n.pos + 1, n.parent);
  for (int32_t start : rule_starts_[size_t(op.index)]) {
    Expand(Intern(start, base), out, depth + 1);
  }
}

StateId Automaton::Compute(StateId state, Symbol symbol) {
  // The next state depends only on which stacks take the symbol: symbols taken by the same
  // stacks (a string's characters) share one expansion, found by that subset (states of at
  // most 64 stacks; the byte vocabulary's every new state computes up to 256 of these).
  const std::vector<int32_t>& stacks = sets_[size_t(state)];
  uint64_t takers = 0;
  const bool memo = stacks.size() <= 64;
  if (memo) {
    for (size_t k = 0; k < stacks.size(); ++k) {
      const int32_t node = stacks[k];
      if (node == 0 || node == kContextNode) continue;
      if (classes_[size_t(program_[size_t(nodes_[size_t(node)].pos)].index)].Matches(symbol)) takers |= uint64_t(1) << k;
    }
    if (takers == 0) return kDeadState;
    if (memo_.size() <= size_t(state)) memo_.resize(sets_.size());
    for (const auto& [m, next] : memo_[size_t(state)])
      if (m == takers) return next;
  }
  std::vector<int32_t> next;
  ++round_;
  for (size_t k = 0; k < sets_[size_t(state)].size(); ++k) {
    const int32_t node = sets_[size_t(state)][k];  // sets_ may grow below: index afresh
    if (node == 0 || node == kContextNode) continue;  // complete, or the cut: nothing to match here
    if (memo ? !((takers >> k) & 1) : !classes_[size_t(program_[size_t(nodes_[size_t(node)].pos)].index)].Matches(symbol)) continue;
    const Node n = nodes_[size_t(node)];
    const int32_t after = program_[size_t(n.pos + 1)].kind == kEnd ? n.parent : Intern(n.pos + 1, n.parent);
    Expand(after, next, 0);
  }
  const StateId out = InternSet(std::move(next));
  if (memo) {
    if (memo_.size() <= size_t(state)) memo_.resize(sets_.size());
    memo_[size_t(state)].emplace_back(takers, out);
  }
  return out;
}

int32_t Automaton::CanonRule(int32_t family, int32_t level) {
  std::vector<int32_t>& rules = canon_rules_[size_t(family)];
  while (int32_t(rules.size()) <= level) {
    const int32_t k = int32_t(rules.size());
    const int32_t start = int32_t(program_.size());
    if (k == 0) {  // S_0 ::= ε
      program_.push_back({kEnd, 0});
      rule_starts_.push_back({start});
    } else {  // S_k ::= e S_{k-1} | ε, laid out as Grammar::Rep's T_k (the offsets match)
      program_.push_back(chain_elem_[size_t(family)]);
      program_.push_back({1, rules.back()});
      program_.push_back({kEnd, 0});
      program_.push_back({kEnd, 0});
      rule_starts_.push_back({start, start + 3});
    }
    chain_pos_.resize(program_.size());
    if (k > 0)
      for (int32_t pos = start; pos < int32_t(program_.size()); ++pos) chain_pos_[size_t(pos)] = {family, k, pos - start, true};
    rules.push_back(int32_t(rule_starts_.size()) - 1);
  }
  return rules[size_t(level)];
}

int32_t Automaton::CanonLevel(int32_t node) const {
  for (int32_t x = node; x > kContextNode; x = nodes_[size_t(x)].parent) {
    const ChainPos& cp = chain_pos_[size_t(nodes_[size_t(x)].pos)];
    if (cp.canonical) return cp.level;
  }
  return 0;
}

std::vector<Automaton::Cut> Automaton::CutState(StateId state, int frames, int32_t horizon) {
  struct Piece {
    int32_t context;                 // the node below the cut, -1 if none
    std::vector<int32_t> positions;  // the top frames' positions, top first
  };
  std::vector<Piece> pieces;
  for (int32_t node : sets_[size_t(state)]) {
    if (node == 0) continue;
    Piece p;
    int32_t below = node;
    while (below > kContextNode && int(p.positions.size()) < frames) {
      p.positions.push_back(nodes_[size_t(below)].pos);
      below = nodes_[size_t(below)].parent;
    }
    p.context = below != 0 ? below : -1;  // a stack of at most `frames` nodes is its own local stack
    pieces.push_back(std::move(p));
  }
  std::sort(pieces.begin(), pieces.end(), [](const Piece& a, const Piece& b) { return a.context < b.context; });
  std::vector<Cut> out;
  for (size_t i = 0; i < pieces.size();) {
    size_t j = i;
    while (j < pieces.size() && pieces[j].context == pieces[i].context) ++j;
    Cut cut{kDeadState, pieces[i].context, -1};
    if (horizon > 0) {
      // One (family, count) in the group's frames, and a context that goes on: canonical.
      int32_t family = -1, level = -1;
      bool one = true;
      for (size_t k = i; k < j; ++k)
        for (int32_t pos : pieces[k].positions) {
          const ChainPos& cp = chain_pos_[size_t(pos)];
          if (cp.chain < 0) continue;
          if (family >= 0 && (cp.chain != family || cp.level != level)) one = false;
          family = cp.chain, level = cp.level;
        }
      if (family >= 0 && one && (cut.context < 0 || FirstOf(cut.context).alive)) cut.count = level;
      for (size_t k = i; k < j; ++k)
        for (int32_t& pos : pieces[k].positions) {
          const ChainPos cp = chain_pos_[size_t(pos)];  // a copy: CanonRule grows chain_pos_
          if (cp.chain < 0) continue;
          // Canonical: the synthetic chain at the horizon. Otherwise each count to its
          // family's longest chain at min(count, horizon): the same language below the
          // horizon, and past it no token can tell the counts apart.
          const int32_t rule = cut.count >= 0 ? CanonRule(cp.chain, horizon)
                                              : chain_rules_[size_t(cp.chain)][size_t(std::min(cp.level, horizon))];
          pos = rule_starts_[size_t(rule)].front() + cp.offset;
        }
    }
    std::vector<int32_t> group;
    for (size_t k = i; k < j; ++k) {
      int32_t local = cut.context >= 0 ? kContextNode : 0;
      for (auto it = pieces[k].positions.rbegin(); it != pieces[k].positions.rend(); ++it) local = Intern(*it, local);
      group.push_back(local);
    }
    cut.local = InternSet(std::move(group));
    out.push_back(cut);
    i = j;
  }
  return out;
}

int32_t Automaton::TakeTag(StateId state, uint8_t byte, int32_t horizon) {
  if (take_row_.size() <= size_t(state)) take_row_.resize(sets_.size(), -1);
  if (take_row_[size_t(state)] < 0) {
    // The bytes each level's stacks take (level 0: the stacks outside the canonical chain).
    std::vector<std::pair<int32_t, std::bitset<256>>> by_level;
    for (int32_t node : sets_[size_t(state)]) {
      if (node == 0 || node == kContextNode) continue;
      const int32_t l = CanonLevel(node);
      const std::bitset<256>& bytes = classes_[size_t(program_[size_t(nodes_[size_t(node)].pos)].index)].bytes;
      auto it = std::find_if(by_level.begin(), by_level.end(), [&](const auto& e) { return e.first == l; });
      if (it == by_level.end()) by_level.emplace_back(l, bytes);
      else it->second |= bytes;
    }
    std::vector<int32_t> row(256, 0);
    for (int b = 0; b < 256; ++b) {
      int takers = 0;
      for (const auto& [l, bytes] : by_level) {
        if (!bytes.test(size_t(b))) continue;
        row[size_t(b)] = l > 0 ? horizon - l + 1 : 0;
        ++takers;
      }
      if (takers > 1) row[size_t(b)] = kMixedTake;
    }
    take_row_[size_t(state)] = int32_t(take_rows_.size());
    take_rows_.push_back(std::move(row));
  }
  return take_rows_[size_t(take_row_[size_t(state)])][byte];
}

bool Automaton::LocalTakes(StateId state, Symbol symbol) const {
  for (int32_t node : sets_[size_t(state)]) {
    if (node == 0 || node == kContextNode) continue;
    if (classes_[size_t(program_[size_t(nodes_[size_t(node)].pos)].index)].Matches(symbol)) return true;
  }
  return false;
}

std::bitset<256> Automaton::TakenBytes(StateId state) const {
  std::bitset<256> out;
  for (int32_t node : sets_[size_t(state)]) {
    if (node == 0 || node == kContextNode) continue;
    out |= classes_[size_t(program_[size_t(nodes_[size_t(node)].pos)].index)].bytes;
  }
  return out;
}

const Automaton::First& Automaton::FirstOf(int32_t node) {
  auto it = first_.find(node);
  if (it != first_.end()) return it->second;
  std::vector<int32_t> tops;
  ++round_;
  Expand(node, tops, 0);
  First f;
  f.alive = !tops.empty();
  for (int32_t t : tops) {
    if (t == 0 || t == kContextNode) continue;
    f.bytes |= classes_[size_t(program_[size_t(nodes_[size_t(t)].pos)].index)].bytes;
  }
  f.state = InternSet(std::move(tops));
  return first_.emplace(node, f).first->second;
}

}  // namespace cedar::grammar
