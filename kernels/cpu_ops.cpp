// Fast CPU kernels: OpenBLAS for the matrix products, vectorised float loops elsewhere.
// Each must agree with its scalar twin in reference_ops.cpp within float tolerance.
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/ops.h"
#include "kernels/thread_pool.h"

namespace cedar::kernels {

namespace {

// BLAS runs single-threaded; parallelism comes from our pool (see thread_pool.h).
void EnsureBlasSingleThreaded() {
  static const bool once = [] {
    openblas_set_num_threads(1);
    return true;
  }();
  (void)once;
}

// y[n, out] (+)= x[n, in] w[out, in]^T, split over output columns (each part streams its own
// slice of the weights) or, for narrow outputs, over rows.
void MatmulImpl(const float* x, const float* w, float* y, int n, int in, int out, float beta) {
  EnsureBlasSingleThreaded();
  if (n <= 0 || out <= 0) return;
  if (in <= 0) {
    if (beta == 0.0f) std::fill(y, y + size_t(n) * out, 0.0f);
    return;
  }
  const double work = double(n) * in * out;
  const int64_t min_cols = work < 2e5 ? out : 64;  // small products stay on one thread
  if (out >= 2 * min_cols || n < 8) {
    ParallelFor(out, min_cols, [&](int64_t b, int64_t e) {
      const int cols = int(e - b);
      if (n == 1)
        cblas_sgemv(CblasRowMajor, CblasNoTrans, cols, in, 1.0f, w + size_t(b) * in, in, x, 1, beta, y + b, 1);
      else
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, cols, in, 1.0f, x, in, w + size_t(b) * in, in, beta,
                    y + b, out);
    });
  } else {
    ParallelFor(n, work < 2e5 ? n : 16, [&](int64_t b, int64_t e) {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(e - b), out, in, 1.0f, x + size_t(b) * in, in, w, in,
                  beta, y + size_t(b) * out, out);
    });
  }
}

}  // namespace

void SetThreads(int n) {
  if (n > 0) SetPoolThreads(n);
}

void Matmul(const float* x, const float* w, float* y, int n, int in, int out) { MatmulImpl(x, w, y, n, in, out, 0.0f); }

void MatmulAccumulate(const float* x, const float* w, float* y, int n, int in, int out) {
  MatmulImpl(x, w, y, n, in, out, 1.0f);
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

namespace {

// scores[h] = q[h, :] . e for every head at once: one pass over the entry, kHeadBlock
// accumulators live in registers (the per-(entry, head) Dot spent its time in reductions).
constexpr int kHeadBlock = 8;
inline void ScoreAllHeads(const float* q, int n_heads, int dim, const float* e, float* scores) {
  for (int h0 = 0; h0 < n_heads; h0 += kHeadBlock) {
    const int hb = std::min(kHeadBlock, n_heads - h0);
    float acc[kHeadBlock][16] = {};
    int i = 0;
    for (; i + 16 <= dim; i += 16)
      for (int h = 0; h < hb; ++h) {
        const float* qh = q + size_t(h0 + h) * dim + i;
#pragma omp simd
        for (int j = 0; j < 16; ++j) acc[h][j] += qh[j] * e[i + j];
      }
    for (int h = 0; h < hb; ++h) {
      float s = 0.0f;
      for (int j = 0; j < 16; ++j) s += acc[h][j];
      const float* qh = q + size_t(h0 + h) * dim;
      for (int t = i; t < dim; ++t) s += qh[t] * e[t];
      scores[h0 + h] = s;
    }
  }
}

}  // namespace

void SinkAttention(const float* q, int n_heads, int dim, const float* win, int n_win,
                   const float* pool, const int32_t* sel, int n_sel, const float* sink,
                   float scale, float* out) {
  const int n = n_win + n_sel;
  // [n, n_heads] logits, then probabilities (entry-major: one entry's heads are adjacent).
  thread_local std::vector<float> logits;
  logits.resize(size_t(n_heads) * std::max(n, 1));
  auto entry = [&](int e) -> const float* {
    return e < n_win ? win + size_t(e) * dim : pool + size_t(sel[e - n_win]) * dim;
  };
  for (int e = 0; e < n; ++e) ScoreAllHeads(q, n_heads, dim, entry(e), logits.data() + size_t(e) * n_heads);
  thread_local std::vector<float> mx, denom;
  mx.assign(sink, sink + n_heads);
  for (int e = 0; e < n; ++e)
    for (int h = 0; h < n_heads; ++h) {
      float& l = logits[size_t(e) * n_heads + h];
      l *= scale;
      mx[size_t(h)] = std::max(mx[size_t(h)], l);
    }
  denom.resize(size_t(n_heads));
  for (int h = 0; h < n_heads; ++h) denom[size_t(h)] = std::exp(sink[h] - mx[size_t(h)]);
  for (int e = 0; e < n; ++e)
    for (int h = 0; h < n_heads; ++h) {
      float& l = logits[size_t(e) * n_heads + h];
      l = std::exp(l - mx[size_t(h)]);
      denom[size_t(h)] += l;
    }
  std::fill(out, out + size_t(n_heads) * dim, 0.0f);
  for (int e = 0; e < n; ++e) {
    const float* ev = entry(e);
    for (int h = 0; h < n_heads; ++h) {
      const float p = logits[size_t(e) * n_heads + h];
      float* oh = out + size_t(h) * dim;
#pragma omp simd
      for (int i = 0; i < dim; ++i) oh[i] += p * ev[i];
    }
  }
  for (int h = 0; h < n_heads; ++h) {
    const float inv = 1.0f / denom[size_t(h)];
    float* oh = out + size_t(h) * dim;
    for (int i = 0; i < dim; ++i) oh[i] *= inv;
  }
}

void IndexScores(const float* q, const float* w, const float* keys, int n_rows, int n_heads,
                 int head_dim, int n_keys, float* scores) {
  if (n_rows <= 0 || n_keys <= 0) return;
  EnsureBlasSingleThreaded();
  std::fill(scores, scores + size_t(n_rows) * n_keys, 0.0f);
  auto rows_part = [&](int64_t r0, int64_t r1) {
    const int nr = int(r1 - r0);
    std::vector<float> tmp(size_t(nr) * n_keys);  // [nr, n_keys] for one head
    for (int h = 0; h < n_heads; ++h) {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nr, n_keys, head_dim, 1.0f,
                  q + size_t(r0) * n_heads * head_dim + size_t(h) * head_dim, n_heads * head_dim, keys, head_dim,
                  0.0f, tmp.data(), n_keys);
      for (int r = 0; r < nr; ++r) {
        const float wr = w[size_t(r0 + r) * n_heads + h];
        const float* t = tmp.data() + size_t(r) * n_keys;
        float* s = scores + size_t(r0 + r) * n_keys;
#pragma omp simd
        for (int j = 0; j < n_keys; ++j) s[j] += wr * std::max(t[j], 0.0f);
      }
    }
  };
  const double work = double(n_rows) * n_keys * n_heads * head_dim;
  if (n_rows >= 2 && work > 2e5) ParallelFor(n_rows, 1, rows_part);
  else rows_part(0, n_rows);
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
