// Measures this machine's own sgemm rate and memory bandwidth, so benchmarks can report what
// fraction of the hardware the engine reaches.
#pragma once

namespace cedar::kernels {
// GFLOP/s of Matmul on [n, k] x [m, k]^T, best of `reps` runs.
double MeasureSgemmGflops(int n, int k, int m, int reps);
// GB/s reading a buffer of `mbytes` MiB (a streaming sum split over the thread pool), best of `reps`.
double MeasureReadBandwidthGBs(int mbytes, int reps);
}  // namespace cedar::kernels
