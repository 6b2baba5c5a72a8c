// `cedar`: one binary, one subcommand per job. Each subcommand has --help.
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include <spdlog/spdlog.h>

#include "kernels/hw_probe.h"
#include "cli/commands.h"
#include "engine/flag_values.h"
#include "server/version.h"

namespace {

struct Command {
  const char* name;
  const char* summary;
  int (*run)(int, char**);
};

const Command kCommands[] = {
    {"init", "write a seeded random-weight model (config.json + model.safetensors)", cedar::cli::RunInit},
    {"info", "parameter counts and cache bytes of a model or preset", cedar::cli::RunInfo},
    {"generate", "prefill a prompt in a chosen mode and decode", cedar::cli::RunGenerate},
    {"bench", "engine benchmark: prefill/decode tokens/s vs the machine's sgemm and bandwidth", cedar::cli::RunBench},
    {"check-golden", "compare the engine with golden data from the reference implementation", cedar::cli::RunCheckGolden},
    {"serve", "the HTTP API for agents (OpenAI-compatible) on a Unix socket and/or TCP", cedar::cli::RunServe},
    {"profile", "prefix-cache hit rates and prefill compute on agent traces (simulated; --live: also against cedar serve)", cedar::cli::RunProfile},
};

void Usage() {
  std::printf("usage: cedar <command> [options]   (cedar <command> --help or cedar help <command> for its options;\n"
              "       cedar --version)\n\ncommands:\n");
  for (const Command& c : kCommands) std::printf("  %-13s %s\n", c.name, c.summary);
}

}  // namespace

int main(int argc, char** argv) {
  cedar::kernels::KeepLargeAllocations();
  if (const char* lvl = std::getenv("CEDAR_LOG")) spdlog::set_level(spdlog::level::from_str(lvl));
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "help")) {
    // `cedar help <command>` is `cedar <command> --help`.
    if (argc >= 3 && !std::strcmp(argv[1], "help")) {
      for (const Command& c : kCommands) {
        if (std::strcmp(argv[2], c.name) != 0) continue;
        char help_flag[] = "--help";
        char* args[] = {argv[2], help_flag, nullptr};
        return c.run(2, args);
      }
      std::fprintf(stderr, "cedar help: unknown command '%s'\n", argv[2]);
      Usage();
      return 2;
    }
    Usage();
    return argc < 2 ? 2 : 0;
  }
  if (!std::strcmp(argv[1], "--version") || !std::strcmp(argv[1], "version")) {
    // The project version and `git describe` at configure time (server/version.h.in).
    std::printf("cedar %s%s%s\n", cedar::kCedarVersion, *cedar::kCedarGitDescribe ? " " : "", cedar::kCedarGitDescribe);
    return 0;
  }
  for (const Command& c : kCommands) {
    if (std::strcmp(argv[1], c.name) != 0) continue;
    try {
      return c.run(argc - 1, argv + 1);
    } catch (const cedar::UsageError& e) {
      std::fprintf(stderr, "cedar %s: error: %s\n(cedar %s --help lists its options)\n", c.name, e.what(), c.name);
      return 2;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "cedar %s: error: %s\n", c.name, e.what());
      return 1;
    }
  }
  std::fprintf(stderr, "cedar: unknown command '%s'\n", argv[1]);
  Usage();
  return 2;
}
