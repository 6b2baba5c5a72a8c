// Texts for the BPE parity test and benchmark: Python standard library sources, the Claude Code
// traces, random Unicode (CJK, emoji, combining marks, other scripts), invalid UTF-8, long
// whitespace and digit runs, and every added token alone and in context. Deterministic.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

namespace cedar::testing {

struct CorpusText {
  std::string kind;  // "stdlib", "trace", "random", "invalid_utf8", "whitespace", "digits", "long", "special"
  std::string text;  // raw bytes (invalid UTF-8 only in "invalid_utf8")
};

// Up to `max_bytes` of *.py files from `dir` (sorted by path, whole files); empty if no dir.
std::vector<CorpusText> StdlibTexts(const std::string& dir, size_t max_bytes);
// Up to `max_bytes` of the trace JSON files in `dir` (their raw text and every string in them).
std::vector<CorpusText> TraceTexts(const std::string& dir, size_t max_bytes);
// Generated texts: random Unicode, invalid UTF-8, whitespace, digits, long words.
std::vector<CorpusText> GeneratedTexts(unsigned seed);
// Each of `names` alone, with text around it, next to another, and cut short.
std::vector<CorpusText> SpecialTexts(const std::vector<std::string>& names);

// The corpus file encode.mjs reads: per text a little-endian uint32 length, then the bytes.
void WriteCorpus(const std::string& path, const std::vector<CorpusText>& texts);

}  // namespace cedar::testing
