// Command-line numbers, parsed strictly: the whole text must be a number of the flag's type
// inside the flag's range, else std::invalid_argument names the flag, the value and the range
// ("--port: expected an integer in 0..65535, found '-5'"). No library message reaches the
// user, and nothing wraps (std::stoul("-5") is 18446744073709551611).
#pragma once
#include <charconv>
#include <cmath>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <vector>

namespace cedar {

// A command line a program cannot run: an unknown or malformed flag, a value out of its range,
// flags that do not go together. `cedar` and the bench programs exit 2 on it (as getopt and
// argparse tools do), so that a script can tell it from a failure met while running (a missing
// model file, a socket in use), which exits 1. Either way the message names the flag.
struct UsageError : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

// Runs f, which reads the command line (boost's parse and the flags' notifiers, a value's parser);
// whatever it throws becomes a UsageError with the same message.
template <class F>
auto CheckFlags(F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const UsageError&) {
    throw;
  } catch (const std::exception& e) {
    throw UsageError(e.what());
  }
}

template <class T>
std::string FlagRangeText(T lo, T hi) {
  std::ostringstream o;
  o << lo << ".." << hi;
  return o.str();
}

// An integer in [lo, hi].
template <class T>
T ParseIntFlag(std::string_view flag, const std::string& text, T lo, T hi) {
  static_assert(std::is_integral_v<T>);
  T v{};
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, v);
  if (text.empty() || ec != std::errc() || ptr != end || v < lo || v > hi) {
    throw std::invalid_argument(std::string(flag) + ": expected an integer in " + FlagRangeText(lo, hi) + ", found '" +
                                text + "'");
  }
  return v;
}

// A finite real number in [lo, hi]; `lo_open`: lo itself is excluded (a timeout of 0).
template <class T>
T ParseRealFlag(std::string_view flag, const std::string& text, T lo, T hi, bool lo_open = false) {
  static_assert(std::is_floating_point_v<T>);
  T v{};
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, v);
  const bool in_range = std::isfinite(v) && (lo_open ? v > lo : v >= lo) && v <= hi;
  if (text.empty() || ec != std::errc() || ptr != end || !in_range) {
    std::ostringstream range;
    range << (lo_open ? "a number > " : "a number in ") << lo << (lo_open ? " and <= " : "..") << hi;
    throw std::invalid_argument(std::string(flag) + ": expected " + range.str() + ", found '" + text + "'");
  }
  return v;
}

// Comma-separated integers, each in [lo, hi] (empty items are skipped).
template <class T>
std::vector<T> ParseIntListFlag(std::string_view flag, const std::string& text, T lo, T hi) {
  std::vector<T> out;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = text.find(',', start);
    const std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (!item.empty()) out.push_back(ParseIntFlag<T>(flag, item, lo, hi));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

}  // namespace cedar
