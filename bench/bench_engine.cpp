// Engine benchmark on `small` (see engine/benchmark.h); same as `cedar bench`.
#include <cstdio>
#include <exception>

#include "engine/benchmark.h"
#include "kernels/hw_probe.h"

int main(int argc, char** argv) {
  cedar::kernels::KeepLargeAllocations();
  try {
    return cedar::RunEngineBenchMain(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_engine: %s\n", e.what());
    return 1;
  }
}
