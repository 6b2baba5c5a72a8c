// Subcommands of the `cedar` binary; each parses its own options and returns an exit code.
#pragma once

namespace cedar::cli {
int RunInit(int argc, char** argv);
int RunInfo(int argc, char** argv);
int RunGenerate(int argc, char** argv);
int RunBench(int argc, char** argv);
int RunCheckGolden(int argc, char** argv);
int RunServe(int argc, char** argv);
int RunProfile(int argc, char** argv);
}  // namespace cedar::cli
