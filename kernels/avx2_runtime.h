// How a portable build (GCC, x86-64, no -march) still runs the AVX2 kernels: each is compiled
// between CEDAR_AVX2_BEGIN and CEDAR_AVX2_END (a target pragma) and called only where
// Avx2KernelsRun() says this CPU has AVX2 and FMA. A build for AVX2 compiles the same code
// without the pragma, and there Avx2KernelsRun() is the constant true. Internal to kernels/.
//
// One answer serves the whole process, so every row, chunk and head group of a run takes the same
// kernel. The products give the same bits either way (the lane-16 and per-block orders are fixed
// on every path); attention and the elementwise ops' exponentials do not, as between builds.
//
// CEDAR_NO_AVX2=1 in the environment makes a portable build take its plain loops on any CPU: the
// kernel tests run them that way on this machine (tests/kernels.cmake), and it rules the AVX2
// kernels out when a result is in doubt. Builds for AVX2 ignore it: they have no plain loops.
//
// Helpers that the AVX2 kernels share (exp_avx2.h, lane16_avx2.h) are defined inside the pragma
// too, in every file that includes them, so no inline function exists in two compilations (a
// linker keeping the AVX2 copy for the plain loops would fault on CPUs without AVX2).
#pragma once

#if !defined(__AVX2__) && defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define CEDAR_AVX2_AT_RUNTIME 1
#define CEDAR_AVX2_BEGIN _Pragma("GCC push_options") _Pragma("GCC target(\"avx2,fma\")")
#define CEDAR_AVX2_END _Pragma("GCC pop_options")
#else
#define CEDAR_AVX2_BEGIN
#define CEDAR_AVX2_END
#endif
#if (defined(__AVX2__) && defined(__FMA__)) || defined(CEDAR_AVX2_AT_RUNTIME)
#define CEDAR_AVX2_KERNELS 1
#endif

#if defined(CEDAR_AVX2_KERNELS)
#include <immintrin.h>
#endif
#if defined(CEDAR_AVX2_AT_RUNTIME)
#include <cstdlib>
#include <cstring>
#endif

namespace cedar::kernels::internal {

// Whether the AVX2 kernels may run here: always in a build for AVX2 and FMA; in a portable build,
// where the CPU has both and CEDAR_NO_AVX2 is unset (or "0"); never where they are not compiled.
inline bool Avx2KernelsRun() {
#if defined(CEDAR_AVX2_AT_RUNTIME)
  static const bool ok = [] {
    const char* no = std::getenv("CEDAR_NO_AVX2");
    if (no && *no && std::strcmp(no, "0") != 0) return false;
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  }();
  return ok;
#elif defined(CEDAR_AVX2_KERNELS)
  return true;
#else
  return false;
#endif
}

}  // namespace cedar::kernels::internal
