// Moving rows to and from the experts (engine/ffn.cpp): gather the rows routed to each expert
// into one contiguous block (MoeGroup's order), run the experts on their blocks, scatter the
// weighted outputs back onto the residual stream.
#pragma once
#include <cstdint>

#include "kernels/cuda/common.h"

namespace cedar::kernels::cuda {

// xg[i, :] = x[rows[i], :] for i < n (n = n_rows·k from MoeGroup). x, xg: [*, dim] of `type`.
Status MoeGather(const void* x, DType type, const int32_t* rows, int n, int dim, void* xg, Stream stream);

// h[r, :] += Σ_{j<k} weights[r, j] · y[position[r, j], :] for r < n_rows, F32 accumulation, the
// k terms summed in slot order and then added to h (one read and one write of h, no atomics:
// deterministic). y: [n_rows·k, dim] (F32 or BF16; the experts' outputs in MoeGroup's order);
// position, weights: [n_rows, k] (MoeGroup, MoeRoute); h: [n_rows, dim] F32.
Status MoeScatterAdd(const void* y, DType y_type, const int32_t* position, const float* weights, int n_rows, int k,
                     int dim, float* h, Stream stream);

}  // namespace cedar::kernels::cuda
