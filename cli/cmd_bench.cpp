// cedar bench: the engine benchmark (same code as bench/bench_engine).
#include "engine/benchmark.h"
#include "cli/commands.h"

namespace cedar::cli {
int RunBench(int argc, char** argv) { return RunEngineBenchMain(argc, argv); }
}  // namespace cedar::cli
