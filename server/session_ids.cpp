#include "server/session_ids.h"

#include "server/api_error.h"

namespace cedar::server {
namespace {

bool IdChar(unsigned char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
         c == ':' || c == '-';
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// The id as it may be shown in a message: printable ASCII kept, every other byte as \xNN, cut.
std::string Printable(std::string_view id) {
  std::string out;
  for (unsigned char c : id.substr(0, 40)) {
    if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') {
      out += char(c);
    } else {
      static const char* kHex = "0123456789abcdef";
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  if (id.size() > 40) out += "...";
  return out;
}

}  // namespace

bool IsValidSessionId(std::string_view id) {
  if (id.empty() || id.size() > kMaxSessionIdLength) return false;
  for (unsigned char c : id) {
    if (!IdChar(c)) return false;
  }
  return true;
}

void CheckSessionId(std::string_view id, const std::string& source) {
  if (IsValidSessionId(id)) return;
  std::string why;
  if (id.empty()) {
    why = "is empty";
  } else if (id.size() > kMaxSessionIdLength) {
    why = "is " + std::to_string(id.size()) + " characters long";
  } else {
    why = "\"" + Printable(id) + "\" holds a character outside the alphabet";
  }
  throw InvalidRequest("session id from " + source + " " + why + ": expected 1 to " +
                           std::to_string(kMaxSessionIdLength) + " characters from [A-Za-z0-9_.:-]",
                       "session_id");
}

std::optional<std::string> PercentDecode(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out += s[i];
      continue;
    }
    if (i + 2 >= s.size()) return std::nullopt;
    const int hi = HexValue(s[i + 1]), lo = HexValue(s[i + 2]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out += char(hi * 16 + lo);
    i += 2;
  }
  return out;
}

}  // namespace cedar::server
