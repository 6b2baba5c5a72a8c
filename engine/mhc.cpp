// Single-pass mHC (engine/mhc.h; notes §2.1; tools/reference/v41/mhc.py).
#include "engine/mhc.h"
#include "engine/row_groups.h"

#include <algorithm>
#include <cmath>

#include "kernels/ops.h"

namespace cedar {

namespace {
double Sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
}  // namespace

void HcEmbedRow(const float* e, int hc, int d, float* row) {
  for (int i = 0; i < hc; ++i) std::copy(e, e + d, row + size_t(i) * d);
  float* a = row + size_t(hc) * d;
  std::fill(a, a + hc, 0.0f);
  a[0] = 1.0f;
}

void HcCollapseRows(const float* rows, int n, int hc, int d, float* out) {
  const size_t rw = size_t(hc) * d + hc;
  for (int r = 0; r < n; ++r) {
    const float* X = rows + size_t(r) * rw;
    const float* a = X + size_t(hc) * d;
    float* o = out + size_t(r) * d;
    std::fill(o, o + d, 0.0f);
    for (int i = 0; i < hc; ++i)  // streams in order, as the reference sums them
      for (int k = 0; k < d; ++k) o[k] += a[i] * X[size_t(i) * d + k];
  }
}

void HcSinkhorn(double* m, int hc, int iters, double eps) {
  for (int i = 0; i < hc; ++i) {  // softmax over each row, + eps
    double* row = m + size_t(i) * hc;
    const double mx = *std::max_element(row, row + hc);
    double s = 0;
    for (int j = 0; j < hc; ++j) s += (row[j] = std::exp(row[j] - mx));
    for (int j = 0; j < hc; ++j) row[j] = row[j] / s + eps;
  }
  auto columns = [&] {
    for (int j = 0; j < hc; ++j) {
      double s = 0;
      for (int i = 0; i < hc; ++i) s += m[size_t(i) * hc + j];
      for (int i = 0; i < hc; ++i) m[size_t(i) * hc + j] /= s + eps;
    }
  };
  auto rows = [&] {
    for (int i = 0; i < hc; ++i) {
      double s = 0;
      for (int j = 0; j < hc; ++j) s += m[size_t(i) * hc + j];
      for (int j = 0; j < hc; ++j) m[size_t(i) * hc + j] /= s + eps;
    }
  };
  columns();
  for (int t = 1; t < iters; ++t) {
    rows();
    columns();
  }
}

void HcCoefficients(const ModelConfig& c, const HcParams& p, const float* rows, int n, HcCoeffs* out,
                    std::span<const int> groups) {
  const int hc = c.hc_mult, d = c.dim, flat = hc * d, nmix = (2 + hc) * hc;
  const size_t rw = size_t(c.ResidualWidth());
  // mixes [n, nmix] = flat(X) · fn^T, then scaled per row by rsqrt(mean(flat(X)^2) + norm_eps)
  std::vector<float> xs(size_t(n) * flat), mu(size_t(n) * nmix);
  for (int r = 0; r < n; ++r) std::copy(rows + size_t(r) * rw, rows + size_t(r) * rw + flat, xs.begin() + size_t(r) * flat);
  const int one[2] = {0, n};
  MatmulGroups(xs.data(), p.fn.data, mu.data(), flat, nmix, groups.empty() ? std::span<const int>(one) : groups);
  out->pre.resize(size_t(n) * hc);
  out->post.resize(size_t(n) * hc);
  out->comb.resize(size_t(n) * hc * hc);
  const float* base = p.base.data;
  const double s0 = p.scale.data[0], s1 = p.scale.data[1], s2 = p.scale.data[2];
  std::vector<double> m(size_t(hc) * hc);
  for (int r = 0; r < n; ++r) {
    const float* x = xs.data() + size_t(r) * flat;
    double ss = 0;
    for (int k = 0; k < flat; ++k) ss += double(x[k]) * x[k];
    const double inv = 1.0 / std::sqrt(ss / flat + double(c.norm_eps));
    const float* mr = mu.data() + size_t(r) * nmix;
    for (int i = 0; i < hc; ++i) {
      out->pre[size_t(r) * hc + i] = float(Sigmoid(mr[i] * inv * s0 + base[i]) + double(c.hc_eps));
      out->post[size_t(r) * hc + i] = float(2.0 * Sigmoid(mr[hc + i] * inv * s1 + base[hc + i]));
    }
    for (int k = 0; k < hc * hc; ++k) m[size_t(k)] = mr[2 * hc + k] * inv * s2 + base[2 * hc + k];  // row-major [hc, hc]
    HcSinkhorn(m.data(), hc, c.hc_sinkhorn_iters, double(c.hc_eps));
    for (int k = 0; k < hc * hc; ++k) out->comb[size_t(r) * hc * hc + k] = float(m[size_t(k)]);
  }
}

void HcUpdateRows(float* rows, int n, int hc, int d, const float* y, const HcCoeffs& k) {
  const size_t rw = size_t(hc) * d + hc;
  std::vector<float> X(size_t(hc) * d);  // the streams as they entered
  for (int r = 0; r < n; ++r) {
    float* row = rows + size_t(r) * rw;
    std::copy(row, row + size_t(hc) * d, X.begin());
    const float* post = k.post.data() + size_t(r) * hc;
    const float* comb = k.comb.data() + size_t(r) * hc * hc;
    const float* yr = y + size_t(r) * d;
    for (int j = 0; j < hc; ++j) {
      float* dst = row + size_t(j) * d;
      for (int e = 0; e < d; ++e) dst[e] = post[j] * yr[e];
      for (int i = 0; i < hc; ++i) {
        const float w = comb[size_t(i) * hc + j];
        const float* src = X.data() + size_t(i) * d;
        for (int e = 0; e < d; ++e) dst[e] += w * src[e];
      }
    }
    std::copy(k.pre.begin() + size_t(r) * hc, k.pre.begin() + size_t(r + 1) * hc, row + size_t(hc) * d);
  }
}

}  // namespace cedar
