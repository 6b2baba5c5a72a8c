// Engine benchmark on `small` (see engine/benchmark.h); same as `cedar bench`.
#include <cstdio>
#include <exception>

#include "engine/benchmark.h"
#include "engine/flag_values.h"
#include "kernels/hw_probe.h"

int main(int argc, char** argv) {
  cedar::kernels::KeepLargeAllocations();
  try {
    return cedar::RunEngineBenchMain(argc, argv);
  } catch (const cedar::UsageError& e) {  // a bad command line: exit 2, as the other bench programs
    std::fprintf(stderr, "bench_engine: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_engine: %s\n", e.what());
    return 1;
  }
}
