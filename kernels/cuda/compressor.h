// The compressor's combine and normalisation (spec §3.3, readings #5), F32 math. The two
// products C = Wc_kv u and Z = Wc_z u come from Matmul; the index keys are then
// Matmul(Wi_k) + RmsNorm + Rope(pos_first = first_entry · m, pos_step = m), and the stored
// entries Rope of these outputs with the same positions.
//
// m = 2: group j is rows (2j, 2j+1) of C and Z (the caller puts a pending half group first).
// Per channel i, with S = softmax over the group's two Z values:
//   out[j, i] = RMSNorm(S_0 · C[2j, i] + S_1 · C[2j+1, i]) · norm_weight[i]
// exactly as engine/compressor.cpp computes it (e_t = exp(Z_t - max), (e_0 C_0 + e_1 C_1)/(e_0 + e_1)).
// C, Z: [2·n_groups, dim] (one dtype); norm_weight: [dim]; out: [n_groups, dim].
// m = 1: out[j] = RMSNorm(C[j]) · norm_weight, which is RmsNorm (rms_norm.h).
#pragma once
#include "kernels/cuda/common.h"
#include "kernels/cuda/rms_norm.h"

namespace cedar::kernels::cuda {

Status CompressPairs(const void* c, const void* z, DType in_type, const void* norm_weight, DType w_type, void* out,
                     DType out_type, int n_groups, int dim, float eps, Stream stream);

// m = 1: out[j] = RMSNorm(C[j]) · norm_weight; C: [n, dim].
inline Status CompressSingle(const void* c, DType in_type, const void* norm_weight, DType w_type, void* out,
                             DType out_type, int n, int dim, float eps, Stream stream) {
  return RmsNorm(c, in_type, norm_weight, w_type, out, out_type, n, dim, eps, stream);
}

}  // namespace cedar::kernels::cuda
