// Single-pass mHC (manifold-constrained hyper-connections) of DeepSeek-V4.1 (notes §2.1), as
// tools/reference/v41/mhc.py. Used by the forward when ModelConfig::hc_mult > 1.
//
// A row's residual state is ResidualWidth() = hc*d + hc floats: the streams X [hc, d], then the
// pre-mix a [hc] the next sub-layer collapses X with (the previous sub-layer's pre). One
// sub-layer s (attention or FFN) does, per row:
//   coefficients from X as it enters: mu = (fn · flat(X)) * rsqrt(mean(flat(X)^2) + norm_eps),
//     pre = sigmoid(mu[0:hc] scale[0] + base[0:hc]) + hc_eps, post = 2 sigmoid(mu[hc:2hc] scale[1]
//     + base[hc:2hc]), comb = Sinkhorn(softmax_row(mu[2hc:] scale[2] + base[2hc:]) + hc_eps);
//   input u = RMSNorm_s(sum_i a[i] X_i) (a = the previous sub-layer's pre);
//   X'_j = post[j] y + sum_i comb[i, j] X_i with y = F_s(u); a' = pre.
// Plain scalar code except the mixes' product (one Matmul); coefficients in double.
#pragma once
#include <span>
#include <vector>

#include "engine/model.h"

namespace cedar {

// One sub-layer's coefficients for n rows.
struct HcCoeffs {
  std::vector<float> pre;   // [n, hc]
  std::vector<float> post;  // [n, hc]
  std::vector<float> comb;  // [n, hc, hc]; comb[r][i][j] maps source stream i to destination j
};

// The coefficient tensors of one sub-layer (LayerWeights::hc_{attn,ffn}_*).
struct HcParams {
  const Weight& fn;     // [(2 + hc) * hc, hc * d]
  const Weight& base;   // [(2 + hc) * hc]
  const Weight& scale;  // [3]
};

// row [hc*d + hc] <- X = e [d] in every stream, a = (1, 0, ..., 0).
void HcEmbedRow(const float* e, int hc, int d, float* row);

// out [n, d] <- sum_i a[i] X_i for rows [n, hc*d + hc] (each row's own a).
void HcCollapseRows(const float* rows, int n, int hc, int d, float* out);

// In place: logits [hc, hc] -> comb = Sinkhorn(softmax_row(logits) + eps): columns once, then
// iters - 1 rounds of rows then columns, every division by (sum + eps) (notes §2.1, mhc.py).
void HcSinkhorn(double* m, int hc, int iters, double eps);

// The coefficients of every row [n, hc*d + hc] from its X. groups: the row groups whose
// products run apart (engine/row_groups.h ProductGroups; empty = one group).
void HcCoefficients(const ModelConfig& c, const HcParams& p, const float* rows, int n, HcCoeffs* out,
                    std::span<const int> groups = {});

// rows [n, hc*d + hc] <- [post y + comb^T X | pre] with y [n, d] the sub-layer's output.
void HcUpdateRows(float* rows, int n, int hc, int d, const float* y, const HcCoeffs& k);

}  // namespace cedar
