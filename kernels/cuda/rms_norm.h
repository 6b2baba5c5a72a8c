// Row-wise RMSNorm with a learned weight (spec §3), F32 accumulation:
//   y[r, :] = x[r, :] / sqrt(mean(x[r, :]^2) + eps) * weight
// x, y: [n, dim]; weight: [dim]. Each of x, weight, y is F32 or BF16 on its own; x and y may
// be the same buffer (then the same dtype). Equals ref::RmsNorm.
#pragma once
#include "kernels/cuda/common.h"

namespace cedar::kernels::cuda {

Status RmsNorm(const void* x, DType x_type, const void* weight, DType w_type, void* y, DType y_type, int n, int dim,
               float eps, Stream stream);

}  // namespace cedar::kernels::cuda
