// Engine benchmark on `small` (see engine/benchmark.h); same as `cedar bench`.
#include <cstdio>
#include <exception>

#include "engine/benchmark.h"

int main(int argc, char** argv) {
  try {
    return cedar::RunEngineBenchMain(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_engine: %s\n", e.what());
    return 1;
  }
}
