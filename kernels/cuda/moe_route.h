// MoE routing (spec §3 FFN, docs/spec-readings.md #8) and the grouping of routed rows by expert.
#pragma once
#include <cstdint>

#include "kernels/cuda/common.h"

namespace cedar::kernels::cuda {

// Router of one batch: with s = sqrt(softplus(logits[r, e])) (softplus(x) = x above 20),
// experts[r, 0..k) = the k best experts by s + bias (bias only for choosing), best first, ties
// toward the lower expert; weights[r, j] = route_scale · s_e / Σ_chosen s. Equals the router of
// engine/ffn.cpp. logits: [n_rows, n_experts] F32 (the gate Matmul); bias: [n_experts] F32;
// experts, weights: [n_rows, k]. REQUIRES 1 <= k <= min(n_experts, 32).
Status MoeRoute(const float* logits, const float* bias, int n_rows, int n_experts, int k, float route_scale,
                int32_t* experts, float* weights, Stream stream);

// Groups the n_rows·k (row, slot) choices by expert, rows ascending within an expert (the order
// engine/ffn.cpp gathers them in):
//   counts[e] = rows routed to e; offsets[e] = Σ_{e' < e} counts[e'] ([n_experts + 1]);
//   rows[offsets[e] + i] = the i-th row routed to e ([n_rows·k]);
//   position[r, j] = where choice (r, j) landed in `rows` ([n_rows, k]).
// counts and offsets stay on the device; the caller copies offsets back to size the per-expert
// products (or runs a grouped GEMM that reads them).
Status MoeGroup(const int32_t* experts, int n_rows, int n_experts, int k, int32_t* counts, int32_t* offsets,
                int32_t* rows, int32_t* position, Stream stream);

}  // namespace cedar::kernels::cuda
