// Pre-tokenizer: splits text into the pieces BPE encodes one at a time, following the
// `pre_tokenizer` a Hugging Face tokenizer.json declares. Supported: null, `Split` (a regex or
// literal pattern; behaviours Isolated, Removed, MergedWithPrevious, MergedWithNext; invert),
// `ByteLevel` (add_prefix_space false; use_regex true adds GPT-2's split) and `Sequence` of
// these, each step applied to every piece of the previous one, as HF does.
//
// Patterns run on PCRE2 (UTF, UCP, JIT). Rust `tokenizers` compiles them with Oniguruma, whose
// \s \S \d \w differ from PCRE2's; those shorthands are rewritten to the Unicode properties
// Oniguruma uses (\s = White_Space, \d = Nd, \w = L|M|Nd|Pc), see TranslatePattern.
//
// Thread contract: immutable after construction; ForEachPiece may run on many threads at once
// (each thread keeps its own PCRE2 match data).
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace cedar::bridge {

// Oniguruma pattern -> the same pattern for PCRE2 (shorthand classes spelled as properties).
// Throws std::invalid_argument for a construct with no PCRE2 spelling (\W or \D inside []).
std::string TranslatePattern(std::string_view onig);

class PreTokenizer {
 public:
  enum class Behavior { kIsolated, kRemoved, kMergedWithPrevious, kMergedWithNext };

  // From tokenizer.json's "pre_tokenizer" value. Throws std::invalid_argument naming the
  // unsupported type, option or the pattern that does not compile.
  static PreTokenizer FromJson(const nlohmann::json& j);
  PreTokenizer();  // no splitting: the whole text is one piece
  ~PreTokenizer();
  PreTokenizer(PreTokenizer&&) noexcept;
  PreTokenizer& operator=(PreTokenizer&&) noexcept;

  // Appends to `pieces` the non-empty pieces of `text`, in order; each is a view into `text`.
  // REQUIRES: `text` is valid UTF-8 (the patterns run without a UTF check, for speed).
  void Split(std::string_view text, std::vector<std::string_view>& pieces) const;

  size_t steps() const { return steps_.size(); }

 private:
  struct Step;
  std::vector<std::unique_ptr<Step>> steps_;
};

}  // namespace cedar::bridge
