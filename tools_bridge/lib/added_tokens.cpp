#include "tools_bridge/lib/added_tokens.h"

#include <stdexcept>

namespace cedar::bridge {
namespace {

// Whitespace as Rust's char::is_whitespace (Unicode White_Space), which lstrip/rstrip use.
// Returns the byte length of the whitespace character at text[pos], or 0.
size_t WhitespaceAt(std::string_view t, size_t pos) {
  const auto c = uint8_t(t[pos]);
  if (c == ' ' || (c >= 0x09 && c <= 0x0D)) return 1;
  auto at = [&](size_t k) { return pos + k < t.size() ? uint8_t(t[pos + k]) : 0; };
  if (c == 0xC2 && (at(1) == 0x85 || at(1) == 0xA0)) return 2;
  if (c == 0xE1 && at(1) == 0x9A && at(2) == 0x80) return 3;  // U+1680
  if (c == 0xE2 && at(1) == 0x80 && ((at(2) >= 0x80 && at(2) <= 0x8A) || at(2) == 0xA8 ||
                                     at(2) == 0xA9 || at(2) == 0xAF)) {
    return 3;  // U+2000-200A, 2028, 2029, 202F
  }
  if (c == 0xE2 && at(1) == 0x81 && at(2) == 0x9F) return 3;  // U+205F
  if (c == 0xE3 && at(1) == 0x80 && at(2) == 0x80) return 3;  // U+3000
  return 0;
}

// Whitespace ending at text[end) (scanning back over UTF-8): its start, or `end` if none.
size_t WhitespaceBefore(std::string_view t, size_t begin, size_t end) {
  while (end > begin) {
    size_t s = end - 1;
    while (s > begin && (uint8_t(t[s]) & 0xC0) == 0x80 && end - s < 4) --s;
    if (WhitespaceAt(t, s) != end - s) break;
    end = s;
  }
  return end;
}

}  // namespace

uint32_t AddedTokenMatcher::Trie::Add(uint32_t node, uint8_t b) {
  const uint64_t key = (uint64_t(node) << 8) | b;
  auto it = edges.find(key);
  if (it != edges.end()) return it->second;
  const auto child = uint32_t(token.size());
  token.push_back(-1);
  edges.emplace(key, child);
  return child;
}

bool AddedTokenMatcher::Trie::Longest(std::string_view text, size_t pos, int32_t& tok,
                                      size_t& end) const {
  bool found = false;
  uint32_t node = 0;
  for (size_t i = pos; i < text.size(); ++i) {
    auto it = edges.find((uint64_t(node) << 8) | uint8_t(text[i]));
    if (it == edges.end()) break;
    node = it->second;
    if (token[node] >= 0) {
      tok = token[node];
      end = i + 1;
      found = true;
    }
  }
  return found;
}

AddedTokenMatcher::AddedTokenMatcher(const std::vector<AddedToken>& tokens) : tokens_(tokens) {
  raw_.token.assign(1, -1);
  normalized_.token.assign(1, -1);
  for (size_t i = 0; i < tokens_.size(); ++i) {
    const AddedToken& t = tokens_[i];
    if (t.content.empty()) {
      throw std::invalid_argument("added token " + std::to_string(t.id) + " has an empty content");
    }
    Trie& trie = t.normalized ? normalized_ : raw_;
    uint32_t node = 0;
    for (char c : t.content) node = trie.Add(node, uint8_t(c));
    trie.token[node] = int32_t(i);
    first_byte_[t.normalized][uint8_t(t.content[0])] = true;
  }
}

void AddedTokenMatcher::Pass(const Trie& trie, std::string_view text, std::vector<Part>& parts) const {
  const bool* starts = first_byte_[&trie == &normalized_];
  size_t plain = 0;  // start of the plain text not yet emitted
  size_t pos = 0;
  while (pos < text.size()) {
    int32_t tok = -1;
    size_t end = 0;
    if (!starts[uint8_t(text[pos])] || !trie.Longest(text, pos, tok, end)) {
      ++pos;
      continue;
    }
    const AddedToken& t = tokens_[tok];
    size_t begin = pos;
    if (t.lstrip) begin = WhitespaceBefore(text, plain, begin);
    if (t.rstrip) {
      while (end < text.size()) {
        const size_t w = WhitespaceAt(text, end);
        if (w == 0) break;
        end += w;
      }
    }
    if (begin > plain) parts.push_back({text.substr(plain, begin - plain), -1});
    parts.push_back({text.substr(begin, end - begin), t.id});
    plain = pos = end;
  }
  if (plain < text.size()) parts.push_back({text.substr(plain), -1});
}

void AddedTokenMatcher::Split(std::string_view text, std::vector<Part>& parts) const {
  if (text.empty()) return;
  if (raw_.edges.empty()) {
    Pass(normalized_, text, parts);
    return;
  }
  std::vector<Part> first;
  Pass(raw_, text, first);
  for (const Part& p : first) {
    if (p.id >= 0 || normalized_.edges.empty()) {
      parts.push_back(p);
    } else {
      Pass(normalized_, p.text, parts);
    }
  }
}

}  // namespace cedar::bridge
