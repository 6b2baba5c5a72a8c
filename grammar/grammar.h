// A context-free grammar over symbols: the 256 byte values plus named special symbols (a
// tokenizer's special ids, e.g. <|tool_call|>, which no byte string can spell). The JSON
// Schema compiler (json_schema.h) and the tool-call wrappers (tool_call_grammar.h) build one;
// the pushdown automaton (automaton.h) runs it.
//
// Shape (llama.cpp's GBNF IR): a rule is a list of alternatives, an alternative a sequence of
// elements, an element a symbol class (bytes and specials it accepts) or a reference to a rule.
// The builder's helpers (Lit, Seq, Alt, Star, Rep, ...) make anonymous rules; repetition is
// right-recursive (R ::= e R | ε), so the automaton's stacks do not grow while repeating.
// Left recursion is not allowed (nothing here produces it); the automaton refuses it.
//
// Thread contract: built on one thread, then immutable (Automaton copies what it needs).
#pragma once
#include <bitset>
#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace cedar::grammar {

using Symbol = int32_t;                     // 0..255: a byte; kFirstSpecial + k: special k
inline constexpr Symbol kFirstSpecial = 256;

// A bad grammar or schema; what() names what was expected and what was found.
class GrammarError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

struct SymbolClass {
  std::bitset<256> bytes;          // bytes accepted
  std::vector<Symbol> specials;    // special symbols accepted (sorted)
  bool Matches(Symbol s) const;
  bool operator<(const SymbolClass& o) const;
};

struct Element {
  enum class Kind : uint8_t { kClass, kRef };
  Kind kind = Kind::kClass;
  int32_t index = 0;  // into Grammar::classes() (kClass) or Grammar::rules() (kRef)
};

using Alternative = std::vector<Element>;  // empty = ε
struct Rule {
  std::string name;                        // for errors and debugging
  std::vector<Alternative> alternatives;
};

class Grammar {
 public:
  // The special symbol named `name` (registered on first use, in order).
  Symbol Special(std::string_view name);
  const std::vector<std::string>& special_names() const { return special_names_; }

  // Elements.
  Element Class(const SymbolClass& c);                 // one symbol of `c`
  Element Bytes(const std::bitset<256>& bytes);        // one byte of the set
  Element Range(uint8_t lo, uint8_t hi);               // one byte in [lo, hi]
  Element SpecialElement(std::string_view name);       // the special symbol `name`
  Element Lit(std::string_view text);                  // exactly these bytes (a rule if > 1 byte)
  Element Seq(std::vector<Element> parts);             // all in order (an anonymous rule)
  Element Alt(std::vector<Element> options);           // one of them
  Element Opt(Element e);                              // e | ε
  Element Star(Element e);                             // e*
  Element Plus(Element e);                             // e+
  // e repeated min..max times (max < 0: unbounded). Builds O(max) rules; throws GrammarError
  // when max > kMaxRepeat. The optional repeats form a chain (chains()).
  Element Rep(Element e, int64_t min, int64_t max);
  Element Empty();                                     // ε

  // Named rules, for recursion: declare, refer to it, define it later (once).
  int32_t Declare(std::string name);
  Element Ref(int32_t rule) const { return {Element::Kind::kRef, rule}; }
  void Define(int32_t rule, std::vector<Alternative> alternatives);
  bool Defined(int32_t rule) const { return !rules_[size_t(rule)].alternatives.empty(); }

  void SetRoot(Element e);
  int32_t root() const { return root_; }
  const std::vector<Rule>& rules() const { return rules_; }
  const std::vector<SymbolClass>& classes() const { return classes_; }
  // A bounded repetition's optional repeats: T_k ::= e T_{k-1} | ε for k = 1..n, T_0 ::= ε, and
  // rules[k] is T_k's rule (made by Rep only, referenced by nothing else). The automaton reads
  // "k repeats left" off a stack position through it, so the token matcher can share one mask
  // walk among all the counts (token_matcher.h).
  struct RepChain {
    std::vector<int32_t> rules;
  };
  const std::vector<RepChain>& chains() const { return chains_; }
  // Throws GrammarError if the root is unset or a referenced rule was never defined.
  void Check() const;

  static constexpr int64_t kMaxRepeat = 100000;
  // Rules at most (a request's schema builds them: bounded repetition makes O(max) rules, so
  // a hostile maxLength must not make the server allocate without bound).
  static constexpr size_t kMaxRules = 300000;

 private:
  int32_t NewRule(std::string name, std::vector<Alternative> alternatives);
  std::vector<Rule> rules_;
  std::vector<SymbolClass> classes_;
  std::vector<RepChain> chains_;
  std::map<SymbolClass, int32_t> class_index_;
  std::map<std::string, int32_t, std::less<>> literal_rules_;
  std::vector<std::string> special_names_;
  int32_t root_ = -1;
};

}  // namespace cedar::grammar
