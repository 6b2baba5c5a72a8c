#include "grammar/grammar.h"

#include <algorithm>

namespace cedar::grammar {

bool SymbolClass::Matches(Symbol s) const {
  if (s < kFirstSpecial) return s >= 0 && bytes.test(size_t(s));
  return std::binary_search(specials.begin(), specials.end(), s);
}

bool SymbolClass::operator<(const SymbolClass& o) const {
  for (size_t w = 0; w < 256; w += 64) {
    const uint64_t a = ((bytes >> w) & std::bitset<256>(~0ull)).to_ullong();
    const uint64_t b = ((o.bytes >> w) & std::bitset<256>(~0ull)).to_ullong();
    if (a != b) return a < b;
  }
  return specials < o.specials;
}

Symbol Grammar::Special(std::string_view name) {
  for (size_t i = 0; i < special_names_.size(); ++i)
    if (special_names_[i] == name) return kFirstSpecial + Symbol(i);
  special_names_.emplace_back(name);
  return kFirstSpecial + Symbol(special_names_.size() - 1);
}

Element Grammar::Class(const SymbolClass& c) {
  auto [it, added] = class_index_.emplace(c, int32_t(classes_.size()));
  if (added) classes_.push_back(c);
  return {Element::Kind::kClass, it->second};
}

Element Grammar::Bytes(const std::bitset<256>& bytes) {
  SymbolClass c;
  c.bytes = bytes;
  return Class(c);
}

Element Grammar::Range(uint8_t lo, uint8_t hi) {
  std::bitset<256> b;
  for (int x = lo; x <= hi; ++x) b.set(size_t(x));
  return Bytes(b);
}

Element Grammar::SpecialElement(std::string_view name) {
  SymbolClass c;
  c.specials.push_back(Special(name));
  return Class(c);
}

int32_t Grammar::NewRule(std::string name, std::vector<Alternative> alternatives) {
  if (rules_.size() >= kMaxRules) {
    throw GrammarError("grammar: expected at most " + std::to_string(kMaxRules) +
                       " rules, found more (lower maxLength / maxItems or simplify the schema)");
  }
  rules_.push_back({std::move(name), std::move(alternatives)});
  return int32_t(rules_.size() - 1);
}

Element Grammar::Lit(std::string_view text) {
  if (text.size() == 1) return Range(uint8_t(text[0]), uint8_t(text[0]));
  if (auto it = literal_rules_.find(text); it != literal_rules_.end()) return Ref(it->second);
  Alternative a;
  for (char ch : text) a.push_back(Range(uint8_t(ch), uint8_t(ch)));
  const int32_t r = NewRule("lit", {std::move(a)});
  literal_rules_.emplace(std::string(text), r);
  return Ref(r);
}

Element Grammar::Seq(std::vector<Element> parts) {
  if (parts.size() == 1) return parts[0];
  return Ref(NewRule("seq", {std::move(parts)}));
}

Element Grammar::Alt(std::vector<Element> options) {
  if (options.size() == 1) return options[0];
  std::vector<Alternative> alts;
  for (Element e : options) alts.push_back({e});
  return Ref(NewRule("alt", std::move(alts)));
}

Element Grammar::Empty() { return Ref(NewRule("empty", {Alternative{}})); }

Element Grammar::Opt(Element e) { return Ref(NewRule("opt", {Alternative{e}, Alternative{}})); }

Element Grammar::Star(Element e) {
  const int32_t r = NewRule("star", {});
  rules_[size_t(r)].alternatives = {Alternative{e, Ref(r)}, Alternative{}};
  return Ref(r);
}

Element Grammar::Plus(Element e) { return Seq({e, Star(e)}); }

Element Grammar::Rep(Element e, int64_t min, int64_t max) {
  if (min < 0) min = 0;
  if (max > kMaxRepeat || min > kMaxRepeat) {
    throw GrammarError("repetition: expected at most " + std::to_string(kMaxRepeat) + " repeats, found " +
                       std::to_string(std::max(min, max)));
  }
  if (max >= 0 && max < min) {
    throw GrammarError("repetition: expected min <= max, found min " + std::to_string(min) + " > max " +
                       std::to_string(max));
  }
  // Optional tail first: T_k ::= e T_{k-1} | ε for the max - min optional repeats.
  Element tail = max < 0 ? Star(e) : Empty();
  if (max >= 0 && max > min) {
    RepChain chain;
    chain.rules.push_back(tail.index);
    for (int64_t k = 0; k < max - min; ++k) {
      tail = Ref(NewRule("rep", {Alternative{e, tail}, Alternative{}}));
      chain.rules.push_back(tail.index);
    }
    chains_.push_back(std::move(chain));
  }
  if (min == 0) return tail;
  Alternative a(size_t(min), e);
  a.push_back(tail);
  return Ref(NewRule("rep", {std::move(a)}));
}

int32_t Grammar::Declare(std::string name) { return NewRule(std::move(name), {}); }

void Grammar::Define(int32_t rule, std::vector<Alternative> alternatives) {
  if (alternatives.empty()) throw GrammarError("rule " + rules_[size_t(rule)].name + ": expected an alternative");
  rules_[size_t(rule)].alternatives = std::move(alternatives);
}

void Grammar::SetRoot(Element e) {
  root_ = e.kind == Element::Kind::kRef ? e.index : NewRule("root", {Alternative{e}});
}

void Grammar::Check() const {
  if (root_ < 0) throw GrammarError("grammar: expected a root rule, found none");
  for (const Rule& r : rules_)
    if (r.alternatives.empty()) throw GrammarError("grammar: rule " + r.name + " is referenced but never defined");
}

}  // namespace cedar::grammar
