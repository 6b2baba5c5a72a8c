// SwiGLU with clamp (spec §3 FFN), F32 math:
//   out[r, i] = SiLU(min(g[r, i], limit)) · clamp(u[r, i], -limit, limit)     (limit <= 0: no clamp)
// g, u: [rows, cols] with row stride ld_in elements (g and u may be the two halves of one
// [rows, 2·cols] product: u = g + cols, ld_in = 2·cols); out: [rows, cols] with row stride ld_out
// (out may be g). g and u share in_type; out_type is F32 or BF16. Equals ref::SwiGLU per row.
#pragma once
#include <cstdint>

#include "kernels/cuda/common.h"

namespace cedar::kernels::cuda {

Status SwiGLU(const void* g, const void* u, DType in_type, void* out, DType out_type, int rows, int cols,
              int64_t ld_in, int64_t ld_out, float limit, Stream stream);

}  // namespace cedar::kernels::cuda
