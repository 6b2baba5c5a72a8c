// Numeric options of the `cedar` subcommands: declared as text and parsed by the options'
// notifiers (engine/flag_values.h), so a bad value is an error naming the flag, the value and
// the allowed range (never a library's message, never a wrapped number), and --help still
// shows each default.
#pragma once
#include <cstdint>
#include <sstream>
#include <string>

#include <boost/program_options.hpp>

#include "cache/byte_size.h"
#include "engine/flag_values.h"

namespace cedar::cli {

namespace po = boost::program_options;

// An integer option in [lo, hi], defaulting to *target.
template <class T>
po::typed_value<std::string>* IntOption(const char* flag, T* target, T lo, T hi) {
  return po::value<std::string>()->default_value(std::to_string(*target))->notifier([=](const std::string& s) {
    *target = ParseIntFlag<T>(flag, s, lo, hi);
  });
}

// An integer option in [lo, hi] with no default (vm.count tells whether it was given).
template <class T>
po::typed_value<std::string>* OptionalIntOption(const char* flag, T* target, T lo, T hi) {
  return po::value<std::string>()->notifier([=](const std::string& s) { *target = ParseIntFlag<T>(flag, s, lo, hi); });
}

// A real option in [lo, hi] (lo excluded when `lo_open`), defaulting to *target.
template <class T>
po::typed_value<std::string>* RealOption(const char* flag, T* target, T lo, T hi, bool lo_open = false) {
  std::ostringstream def;
  def << *target;
  return po::value<std::string>()->default_value(def.str())->notifier([=](const std::string& s) {
    *target = ParseRealFlag<T>(flag, s, lo, hi, lo_open);
  });
}

// The largest byte size any option takes: 1 PiB. (The LMDB map of a disk tier is twice its
// budget, and a 64-bit process has 128 TiB of address space: larger budgets are checked
// against the machine by the command that uses them.)
inline constexpr uint64_t kMaxBytesOption = 1ull << 50;

// A byte size ("16G", "512M", "0"; cache/byte_size.h) in [lo, hi].
inline uint64_t ParseBytesOption(const char* flag, const std::string& s, uint64_t lo, uint64_t hi) {
  uint64_t v = 0;
  try {
    v = cache::ParseByteSize(s);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string(flag) + ": " + e.what() + "; allowed: " + std::to_string(lo) + ".." +
                                std::to_string(hi) + " bytes");
  }
  if (v < lo || v > hi) {
    throw std::invalid_argument(std::string(flag) + ": expected a size in " + std::to_string(lo) + ".." +
                                std::to_string(hi) + " bytes, found '" + s + "' (" + std::to_string(v) + " bytes)");
  }
  return v;
}

// A byte-size option, defaulting to `def` (as written).
inline po::typed_value<std::string>* BytesOption(const char* flag, uint64_t* target, const char* def, uint64_t lo = 0,
                                                 uint64_t hi = kMaxBytesOption) {
  return po::value<std::string>()->default_value(def)->notifier([=](const std::string& s) {
    *target = ParseBytesOption(flag, s, lo, hi);
  });
}

}  // namespace cedar::cli
