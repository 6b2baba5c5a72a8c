#include "tools_bridge/lib/byte_level.h"

#include <array>

namespace cedar::bridge {
namespace {

bool SelfPrinted(int b) { return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF); }

struct Tables {
  std::array<char32_t, 256> char_of{};     // byte -> code point
  std::array<int16_t, 512> byte_of{};      // code point (< 512) -> byte, or -1
  Tables() {
    byte_of.fill(-1);
    int next = 0;  // the 68 non-printable bytes take U+0100 + next, in byte order
    for (int b = 0; b < 256; ++b) {
      char_of[b] = SelfPrinted(b) ? char32_t(b) : char32_t(0x100 + next++);
      byte_of[char_of[b]] = int16_t(b);
    }
  }
};

const Tables& T() {
  static const Tables t;
  return t;
}

}  // namespace

char32_t ByteLevelChar(uint8_t b) { return T().char_of[b]; }

std::optional<uint8_t> ByteLevelByte(char32_t c) {
  if (c >= 512 || T().byte_of[c] < 0) return std::nullopt;
  return uint8_t(T().byte_of[c]);
}

std::optional<std::string> ByteLevelDecode(std::string_view token) {
  std::string out;
  out.reserve(token.size());
  for (size_t i = 0; i < token.size();) {
    // Alphabet characters are below U+0200: one or two UTF-8 bytes.
    const auto c0 = uint8_t(token[i]);
    char32_t c;
    if (c0 < 0x80) {
      c = c0;
      i += 1;
    } else if ((c0 & 0xE0) == 0xC0 && i + 1 < token.size()) {
      c = (char32_t(c0 & 0x1F) << 6) | (uint8_t(token[i + 1]) & 0x3F);
      i += 2;
    } else {
      return std::nullopt;
    }
    auto b = ByteLevelByte(c);
    if (!b) return std::nullopt;
    out.push_back(char(*b));
  }
  return out;
}

}  // namespace cedar::bridge
