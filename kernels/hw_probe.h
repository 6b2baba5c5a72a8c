// Measures this machine's own sgemm rate and memory bandwidth, so benchmarks can report what
// fraction of the hardware the engine reaches.
#pragma once

#include <cstdint>
#include <string>

namespace cedar::kernels {
// The CPU kernels this process runs, for the benchmark's machine line: "avx512" (then "-vnni" and
// "-bf16" where those kernels are compiled in), "avx2", "avx2-at-run-time" (a build without -march
// on a CPU with AVX2 and FMA: kernels/avx2_runtime.h) or "plain" (that build's plain loops: the CPU
// lacks AVX2 or CEDAR_NO_AVX2 is set). Figures from different kernels are not comparable.
std::string KernelIsa();
// The kernels OpenBLAS runs sgemm on in this process (openblas_get_corename(): "Zen", "Haswell",
// "Cooperlake", ...), picked from the CPU when the library loads or forced by OPENBLAS_CORETYPE.
// The sgemm rate, and with it every fraction of it, depends on them: on the AVX-512 EPYC (Zen 5)
// OpenBLAS 0.3.21 picks Cooperlake, and a shell there set Haswell.
std::string BlasCore();
// GFLOP/s of OpenBLAS sgemm (column slices over the pool) on [n, k] x [m, k]^T: the best of at
// least `reps` runs and at least 0.5 s of runs, after 0.3 s of warm-up.
double MeasureSgemmGflops(int n, int k, int m, int reps);
// GB/s reading a buffer of `mbytes` MiB (a streaming sum split over the thread pool, 4 or 8
// streams per thread as decode reads a slice as parts), best of `reps` passes of each.
double MeasureReadBandwidthGBs(int mbytes, int reps);
// Process setting for the engine's large per-layer buffers: keep freed memory in the heap
// instead of returning it to the kernel, so the next layer's [rows, dim] buffers do not
// page-fault again (measured: ~5% of prefill time in page faults and zeroing). Call once at
// startup, before threads start.
void KeepLargeAllocations();
// This machine's physical memory in bytes (sysconf), 0 when the system does not say.
int64_t PhysicalMemoryBytes();
}  // namespace cedar::kernels
