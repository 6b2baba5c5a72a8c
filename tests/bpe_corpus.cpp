#include "tests/bpe_corpus.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

namespace cedar::testing {
namespace {

namespace fs = std::filesystem;

std::string ReadFile(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void AppendUtf8(std::string& s, char32_t c) {
  if (c < 0x80) {
    s += char(c);
  } else if (c < 0x800) {
    s += char(0xC0 | (c >> 6));
    s += char(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    s += char(0xE0 | (c >> 12));
    s += char(0x80 | ((c >> 6) & 0x3F));
    s += char(0x80 | (c & 0x3F));
  } else {
    s += char(0xF0 | (c >> 18));
    s += char(0x80 | ((c >> 12) & 0x3F));
    s += char(0x80 | ((c >> 6) & 0x3F));
    s += char(0x80 | (c & 0x3F));
  }
}

void Strings(const nlohmann::json& j, std::vector<std::string>& out) {
  if (j.is_string()) {
    out.push_back(j.get<std::string>());
  } else if (j.is_structured()) {
    for (const auto& v : j) Strings(v, out);
  }
}

// Code point ranges random texts draw from: scripts, marks, symbols, the whitespace and digit
// characters the split patterns treat specially, and the CJK ranges of the DeepSeek pattern
// (and characters just outside them). Only code points assigned by Unicode 14 (PCRE2 10.42's
// tables; Node's ICU and Oniguruma are newer): a character assigned later, e.g. U+1F6D8
// (Unicode 16), is unassigned to one side and a symbol to the other, and splits differently.
struct Range {
  char32_t lo, hi;
};
constexpr Range kRanges[] = {
    {0x20, 0x7E},     {0x20, 0x7E},     {0x20, 0x7E},     {0x09, 0x0D},     {0xA0, 0xFF},
    {0x100, 0x17F},   {0x300, 0x36F},   {0x370, 0x3FF},   {0x400, 0x4FF},   {0x590, 0x5FF},
    {0x600, 0x6FF},   {0x660, 0x669},   {0x900, 0x97F},   {0xE00, 0xE7F},   {0x1100, 0x11FF},
    {0x2000, 0x206F}, {0x20A0, 0x20BF}, {0x2190, 0x21FF}, {0x2500, 0x257F}, {0x3000, 0x303F},
    {0x3040, 0x30FF}, {0x4E00, 0x9FA5}, {0x9FA6, 0x9FFF}, {0xAC00, 0xD7A3}, {0xFF00, 0xFFEF},
    {0x1F300, 0x1F5FF}, {0x1F600, 0x1F64F}, {0x1F680, 0x1F6D7}, {0x1F6DD, 0x1F6FC}, {0x1F900, 0x1F9FF},
    {0x1F3FB, 0x1F3FF}, {0x0085, 0x0085}, {0xFEFF, 0xFEFF},   {0x180E, 0x180E}, {0x200B, 0x200D},
    {0x2028, 0x2029}, {0xFF10, 0xFF19}, {0x1D400, 0x1D7FF}, {0x10000, 0x1007F},
};

std::string RandomText(std::mt19937& rng, int max_len) {
  std::string s;
  const int n = int(rng() % uint32_t(max_len + 1));
  for (int i = 0; i < n; ++i) {
    const Range& r = kRanges[rng() % std::size(kRanges)];
    AppendUtf8(s, r.lo + char32_t(rng() % (r.hi - r.lo + 1)));
    if (rng() % 8 == 0) s += ' ';
  }
  return s;
}

}  // namespace

std::vector<CorpusText> StdlibTexts(const std::string& dir, size_t max_bytes) {
  std::vector<CorpusText> out;
  if (!fs::is_directory(dir)) return out;
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.is_regular_file() && e.path().extension() == ".py") files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  size_t total = 0;
  for (const auto& p : files) {
    std::string t = ReadFile(p);
    if (total + t.size() > max_bytes) continue;
    total += t.size();
    out.push_back({"stdlib", std::move(t)});
  }
  return out;
}

std::vector<CorpusText> TraceTexts(const std::string& dir, size_t max_bytes) {
  std::vector<CorpusText> out;
  if (!fs::is_directory(dir)) return out;
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.is_regular_file() && e.path().extension() == ".json") files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  size_t total = 0;
  for (const auto& p : files) {
    std::string raw = ReadFile(p);
    if (total >= max_bytes) break;
    std::vector<std::string> strings;
    try {
      Strings(nlohmann::json::parse(raw), strings);
    } catch (const nlohmann::json::exception&) {
    }
    std::string joined;
    for (const auto& s : strings) joined += s + "\n";
    if (!joined.empty()) out.push_back({"trace", joined});
    // The raw JSON itself: long runs of digits, commas and brackets, like a tool's output.
    raw.resize(std::min(raw.size(), max_bytes - total));
    total += raw.size() + joined.size();
    out.push_back({"trace", std::move(raw)});
  }
  return out;
}

std::vector<CorpusText> GeneratedTexts(unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<CorpusText> out;
  for (int i = 0; i < 400; ++i) out.push_back({"random", RandomText(rng, 200)});
  // Invalid UTF-8: stray continuation bytes, truncated sequences, overlongs, surrogates,
  // bytes never valid; alone and inside valid text.
  const std::string bad[] = {"\x80", "\xBF", "\xC0\xAF", "\xC1\xBF", "\xE4\xBD", "\xE4",
                             "\xF0\x9F\x98", "\xED\xA0\x80", "\xF4\x90\x80\x80", "\xFE", "\xFF",
                             "\xF8\x88\x80\x80\x80", "\xE0\x80\xAF", "\xC3"};
  for (int i = 0; i < 120; ++i) {
    std::string s = RandomText(rng, 40);
    const int k = 1 + int(rng() % 4);
    for (int j = 0; j < k; ++j) {
      const size_t at = s.empty() ? 0 : rng() % (s.size() + 1);
      s.insert(at, bad[rng() % std::size(bad)]);  // may also cut a valid character in two
    }
    out.push_back({"invalid_utf8", s});
  }
  for (const std::string& b : bad) out.push_back({"invalid_utf8", b});
  // Whitespace runs, alone and around text.
  for (int n : {1, 2, 3, 7, 16, 100, 2000}) {
    for (const std::string unit : {" ", "\n", "\t", "\r\n", " \n", "\u3000", "\u00A0", "  \n\n"}) {
      std::string run;
      for (int i = 0; i < n; ++i) run += unit;
      out.push_back({"whitespace", run});
      out.push_back({"whitespace", "x" + run + "y"});
      out.push_back({"whitespace", run + "word" + run});
    }
  }
  // Digits: runs of every length mod 3, decimals, other scripts' digits.
  for (int n : {1, 2, 3, 4, 5, 6, 10, 31, 100, 1001}) {
    std::string d;
    for (int i = 0; i < n; ++i) d += char('0' + (i * 7 + n) % 10);
    out.push_back({"digits", d});
    out.push_back({"digits", "v" + d + "." + d + "e-" + d});
    out.push_back({"digits", "\u0661\u0662\u0663" + d + "\uFF11\uFF12"});
  }
  // Long words: the BPE's long-word path.
  for (int n : {65, 300, 3000}) {
    out.push_back({"long", std::string(size_t(n), 'a')});
    std::string w;
    for (int i = 0; i < n; ++i) w += char('a' + rng() % 26);
    out.push_back({"long", w});
    std::string cjk;
    for (int i = 0; i < n; ++i) AppendUtf8(cjk, 0x4E00 + rng() % 500);
    out.push_back({"long", cjk});
  }
  out.push_back({"empty", ""});
  return out;
}

std::vector<CorpusText> SpecialTexts(const std::vector<std::string>& names) {
  std::vector<CorpusText> out;
  for (size_t i = 0; i < names.size(); ++i) {
    const std::string& a = names[i];
    const std::string& b = names[(i * 7 + 3) % names.size()];
    out.push_back({"special", a});
    out.push_back({"special", "Hello" + a + "world " + a + " \n" + a + "\n"});
    out.push_back({"special", a + b + a});
    out.push_back({"special", a.substr(0, a.size() - 1) + " " + a.substr(1)});
  }
  return out;
}

void WriteCorpus(const std::string& path, const std::vector<CorpusText>& texts) {
  std::ofstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot write " + path);
  for (const auto& t : texts) {
    const auto n = uint32_t(t.text.size());
    const char len[4] = {char(n), char(n >> 8), char(n >> 16), char(n >> 24)};
    f.write(len, 4);
    f.write(t.text.data(), std::streamsize(t.text.size()));
  }
}

}  // namespace cedar::testing
