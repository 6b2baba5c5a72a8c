// Command-line flags of the bench programs, parsed as `cedar`'s subcommands parse theirs
// (cli/flags.h: Boost.program_options, numbers checked by engine/flag_values.h). Why one
// header: every bench had its own argv loop, and `std::stoi` put "stoi" in front of users for
// "--repeat abc", wrapped negative counts, or ran the whole benchmark on `--help` (issue 19).
//
//   auto desc = bench::Options("bench_x: what it measures, as JSON lines");
//   desc.add_options()("repeat", cli::IntOption("--repeat", &repeat, 1, 1000), "passes");
//   if (int rc = bench::ParseFlags("bench_x", desc, argc, argv); rc >= 0) return rc;
//
// --help prints the options (with their defaults) and exits 0 before anything runs; a bad or
// unknown flag is one line on stderr naming the flag and what was expected, exit 2.
#pragma once
#include <cstdio>
#include <exception>
#include <iostream>
#include <string>
#include <vector>

#include <boost/program_options.hpp>

#include "cli/flags.h"

namespace cedar::bench {

namespace po = boost::program_options;

// The options of one program, --help first.
inline po::options_description Options(const std::string& caption) {
  po::options_description desc(caption);
  desc.add_options()("help,h", "show this help and exit");
  return desc;
}

// A comma-separated list of integers, each in [lo, hi], defaulting to *target ("1,4,16"; empty
// items are skipped, so "" is the empty list).
template <class T>
po::typed_value<std::string>* IntListOption(const char* flag, std::vector<T>* target, T lo, T hi) {
  std::string def;
  for (T v : *target) def += (def.empty() ? "" : ",") + std::to_string(v);
  return po::value<std::string>()->default_value(def)->notifier([=](const std::string& s) {
    *target = ParseIntListFlag<T>(flag, s, lo, hi);
  });
}

// A usage error found after parsing (a missing required flag, a malformed list): the same
// one line and exit status as ParseFlags' errors.
inline int FlagError(const char* program, const std::string& what) {
  std::fprintf(stderr, "%s: %s (%s --help lists the options)\n", program, what.c_str(), program);
  return 2;
}

// Parses argv against `desc` (the notifiers store the values). Returns -1 when the program
// should run, else its exit status: 0 after printing --help, 2 after a bad flag. `vm`, when
// given, receives the parsed map (for vm.count of options without a default).
inline int ParseFlags(const char* program, const po::options_description& desc, int argc, char** argv,
                      po::variables_map* vm = nullptr) {
  po::variables_map local;
  po::variables_map& m = vm ? *vm : local;
  try {
    po::store(po::parse_command_line(argc, argv, desc), m);
    if (m.count("help")) {
      std::cout << desc << "\n";
      return 0;
    }
    po::notify(m);
  } catch (const std::exception& e) {
    return FlagError(program, e.what());
  }
  return -1;
}

}  // namespace cedar::bench
