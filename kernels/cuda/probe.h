// The device's own ceilings, measured in the same run as a benchmark so its numbers can be
// given as fractions of the hardware (the CPU twin is kernels/hw_probe.h).
#pragma once
#include <cstddef>

#include "kernels/cuda/common.h"

namespace cedar::kernels::cuda {

// Streaming copy bandwidth in GB/s (bytes read + written) of a float4 copy kernel over
// `bytes` → `bytes`, the median of `reps` timed copies.
Status MeasureCopyBandwidthGBs(size_t bytes, int reps, double* gb_s);
// cuBLAS BF16 GEMM rate (F32 accumulation, F32 output) in TFLOP/s on n×n×n of random data,
// the median of `reps` timed products.
Status MeasureMatmulTflops(int n, int reps, double* tflop_s);

}  // namespace cedar::kernels::cuda
