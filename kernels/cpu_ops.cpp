// Fast CPU kernels: OpenBLAS for the matrix products, vectorised float loops elsewhere.
// Each must agree with its scalar twin in reference_ops.cpp within float tolerance.
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/ops.h"

namespace cedar::kernels {

void SetThreads(int n) {
  if (n <= 0) return;
  openblas_set_num_threads(n);
}

void Matmul(const float* x, const float* w, float* y, int n, int in, int out) {
  if (n <= 0 || out <= 0) return;
  if (in <= 0) {
    std::fill(y, y + size_t(n) * out, 0.0f);
    return;
  }
  if (n == 1) {
    cblas_sgemv(CblasRowMajor, CblasNoTrans, out, in, 1.0f, w, in, x, 1, 0.0f, y, 1);
    return;
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, out, in, 1.0f, x, in, w, in, 0.0f, y,
              out);
}

void MatmulAccumulate(const float* x, const float* w, float* y, int n, int in, int out) {
  if (n <= 0 || out <= 0 || in <= 0) return;
  if (n == 1) {
    cblas_sgemv(CblasRowMajor, CblasNoTrans, out, in, 1.0f, w, in, x, 1, 1.0f, y, 1);
    return;
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, out, in, 1.0f, x, in, w, in, 1.0f, y,
              out);
}

float Dot(const float* a, const float* b, int n) {
  float s = 0.0f;
#pragma omp simd reduction(+ : s)
  for (int i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

void RmsNorm(const float* x, const float* weight, float* y, int n, int dim, float eps) {
  for (int r = 0; r < n; ++r) {
    const float* xr = x + size_t(r) * dim;
    float* yr = y + size_t(r) * dim;
    float ss = Dot(xr, xr, dim);
    float inv = 1.0f / std::sqrt(ss / float(std::max(dim, 1)) + eps);
#pragma omp simd
    for (int i = 0; i < dim; ++i) yr[i] = xr[i] * inv * weight[i];
  }
}

void Rope(float* x, int n_rows, int n_vecs, int vec_dim, int rope_dim, const int64_t* positions,
          float base, int sign) {
  const int half = rope_dim / 2;
  if (half <= 0) return;
  std::vector<double> freq(half);
  for (int i = 0; i < half; ++i) freq[i] = std::pow(double(base), -2.0 * i / rope_dim);
  std::vector<float> cs(half), sn(half);
  for (int r = 0; r < n_rows; ++r) {
    for (int i = 0; i < half; ++i) {
      double ang = double(positions[r]) * freq[i] * sign;
      cs[i] = float(std::cos(ang));
      sn[i] = float(std::sin(ang));
    }
    for (int v = 0; v < n_vecs; ++v) {
      float* p = x + (size_t(r) * n_vecs + v) * vec_dim + (vec_dim - rope_dim);
      for (int i = 0; i < half; ++i) {
        float x0 = p[2 * i], x1 = p[2 * i + 1];
        p[2 * i] = x0 * cs[i] - x1 * sn[i];
        p[2 * i + 1] = x0 * sn[i] + x1 * cs[i];
      }
    }
  }
}

void Softmax(float* x, int n) {
  if (n <= 0) return;
  float m = *std::max_element(x, x + n), s = 0.0f;
  for (int i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - m);
    s += x[i];
  }
  const float inv = 1.0f / s;
  for (int i = 0; i < n; ++i) x[i] *= inv;
}

void SwiGLU(const float* g, const float* u, float* out, int n, float limit) {
  for (int i = 0; i < n; ++i) {
    float gv = g[i], uv = u[i];
    if (limit > 0) {
      gv = std::min(gv, limit);
      uv = std::clamp(uv, -limit, limit);
    }
    out[i] = gv / (1.0f + std::exp(-gv)) * uv;
  }
}

void SinkAttention(const float* q, int n_heads, int dim, const float* win, int n_win,
                   const float* pool, const int32_t* sel, int n_sel, const float* sink,
                   float scale, float* out) {
  const int n = n_win + n_sel;
  // [n_heads, n] logits, then probabilities.
  thread_local std::vector<float> logits;
  logits.resize(size_t(n_heads) * std::max(n, 1));
  auto entry = [&](int e) -> const float* {
    return e < n_win ? win + size_t(e) * dim : pool + size_t(sel[e - n_win]) * dim;
  };
  // Entries outer, heads inner: one entry stays in L1 while every head reads it.
  for (int e = 0; e < n; ++e) {
    const float* ev = entry(e);
    for (int h = 0; h < n_heads; ++h) logits[size_t(h) * n + e] = Dot(q + size_t(h) * dim, ev, dim) * scale;
  }
  for (int h = 0; h < n_heads; ++h) {
    float* lh = logits.data() + size_t(h) * n;
    float m = sink[h];
    for (int e = 0; e < n; ++e) m = std::max(m, lh[e]);
    float denom = std::exp(sink[h] - m);
    for (int e = 0; e < n; ++e) {
      lh[e] = std::exp(lh[e] - m);
      denom += lh[e];
    }
    const float inv = 1.0f / denom;
    for (int e = 0; e < n; ++e) lh[e] *= inv;
  }
  std::fill(out, out + size_t(n_heads) * dim, 0.0f);
  for (int e = 0; e < n; ++e) {
    const float* ev = entry(e);
    for (int h = 0; h < n_heads; ++h) {
      const float p = logits[size_t(h) * n + e];
      float* oh = out + size_t(h) * dim;
#pragma omp simd
      for (int i = 0; i < dim; ++i) oh[i] += p * ev[i];
    }
  }
}

void IndexScores(const float* q, const float* w, const float* keys, int n_rows, int n_heads,
                 int head_dim, int n_keys, float* scores) {
  if (n_rows <= 0 || n_keys <= 0) return;
  std::fill(scores, scores + size_t(n_rows) * n_keys, 0.0f);
  std::vector<float> tmp(size_t(n_rows) * n_keys);  // [n_rows, n_keys] for one head
  for (int h = 0; h < n_heads; ++h) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n_rows, n_keys, head_dim, 1.0f,
                q + size_t(h) * head_dim, n_heads * head_dim, keys, head_dim, 0.0f, tmp.data(),
                n_keys);
    for (int r = 0; r < n_rows; ++r) {
      const float wr = w[size_t(r) * n_heads + h];
      const float* t = tmp.data() + size_t(r) * n_keys;
      float* s = scores + size_t(r) * n_keys;
#pragma omp simd
      for (int j = 0; j < n_keys; ++j) s[j] += wr * std::max(t[j], 0.0f);
    }
  }
}

int TopK(const float* scores, int n, int k, int32_t* out) {
  thread_local std::vector<int32_t> idx;
  idx.clear();
  const float ninf = -std::numeric_limits<float>::infinity();
  for (int i = 0; i < n; ++i)
    if (scores[i] != ninf) idx.push_back(i);
  const int m = std::min<int>(k, int(idx.size()));
  if (m <= 0) return 0;
  auto better = [&](int32_t a, int32_t b) {
    return scores[a] > scores[b] || (scores[a] == scores[b] && a < b);
  };
  if (m < int(idx.size())) std::nth_element(idx.begin(), idx.begin() + (m - 1), idx.end(), better);
  std::sort(idx.begin(), idx.begin() + m);
  std::copy(idx.begin(), idx.begin() + m, out);
  return m;
}

}  // namespace cedar::kernels
