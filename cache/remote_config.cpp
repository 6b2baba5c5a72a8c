#include "cache/remote_config.h"

#include <fmt/format.h>

#include <cctype>
#include <charconv>

namespace cedar::cache {
namespace {

bool ParseInt(std::string_view s, int lo, int hi, int* out) {
  int v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || v < lo || v > hi) return false;
  *out = v;
  return true;
}

Status BadUrl(const std::string& url, const std::string& why) {
  return Status::InvalidArgument(fmt::format(
      "--cache-remote: expected redis://HOST[:PORT][/DB] or unix:///PATH[?db=DB], found '{}' ({})", url, why));
}

}  // namespace

std::string RemoteEndpoint::Describe() const {
  if (unix_socket) return db ? fmt::format("unix://{}?db={}", path, db) : "unix://" + path;
  return db ? fmt::format("redis://{}:{}/{}", host, port, db) : fmt::format("redis://{}:{}", host, port);
}

Result<RemoteEndpoint> ParseRemoteUrl(const std::string& url) {
  RemoteEndpoint e;
  std::string_view s(url);
  if (s.starts_with("unix://")) {
    s.remove_prefix(7);
    e.unix_socket = true;
    if (auto q = s.find('?'); q != std::string_view::npos) {
      std::string_view query = s.substr(q + 1);
      s = s.substr(0, q);
      if (!query.starts_with("db=") || !ParseInt(query.substr(3), 0, 1 << 20, &e.db)) {
        return BadUrl(url, "the only query is db=N");
      }
    }
    if (s.empty() || s[0] != '/') return BadUrl(url, "the socket path must be absolute");
    e.path = std::string(s);
    return e;
  }
  if (!s.starts_with("redis://")) return BadUrl(url, "unknown scheme");
  s.remove_prefix(8);
  if (auto slash = s.find('/'); slash != std::string_view::npos) {
    if (!ParseInt(s.substr(slash + 1), 0, 1 << 20, &e.db)) return BadUrl(url, "the database must be a number");
    s = s.substr(0, slash);
  }
  if (s.find('@') != std::string_view::npos) return BadUrl(url, "credentials in the URL are not supported");
  if (auto colon = s.rfind(':'); colon != std::string_view::npos) {
    if (!ParseInt(s.substr(colon + 1), 1, 65535, &e.port)) return BadUrl(url, "the port must be 1..65535");
    s = s.substr(0, colon);
  }
  if (s.empty()) return BadUrl(url, "no host");
  e.host = std::string(s);
  return e;
}

Result<std::chrono::milliseconds> ParseDuration(const std::string& text) {
  auto bad = [&] {
    return Status::InvalidArgument(fmt::format("expected a duration with a unit (72h, 30m, 90s, 50ms), found '{}'", text));
  };
  size_t i = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) ++i;
  if (i == 0 || i > 12) return bad();
  const long long n = std::stoll(text.substr(0, i));
  const std::string unit = text.substr(i);
  if (unit == "ms") return std::chrono::milliseconds(n);
  if (unit == "s") return std::chrono::milliseconds(n * 1000);
  if (unit == "m") return std::chrono::milliseconds(n * 60'000);
  if (unit == "h") return std::chrono::milliseconds(n * 3'600'000);
  return bad();
}

}  // namespace cedar::cache
