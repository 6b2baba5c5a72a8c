// Scalar reference kernels: the simplest correct loops, in double where it is free to do so.
// They define what the fast kernels in cpu_ops.cpp must compute.
#include "kernels/ops.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

namespace cedar::kernels::ref {

void Matmul(const float* x, const float* w, float* y, int n, int in, int out) {
  for (int r = 0; r < n; ++r)
    for (int o = 0; o < out; ++o) {
      double s = 0;
      for (int i = 0; i < in; ++i) s += double(x[size_t(r) * in + i]) * w[size_t(o) * in + i];
      y[size_t(r) * out + o] = float(s);
    }
}

void MatmulAccumulate(const float* x, const float* w, float* y, int n, int in, int out) {
  for (int r = 0; r < n; ++r)
    for (int o = 0; o < out; ++o) {
      double s = y[size_t(r) * out + o];
      for (int i = 0; i < in; ++i) s += double(x[size_t(r) * in + i]) * w[size_t(o) * in + i];
      y[size_t(r) * out + o] = float(s);
    }
}

void RmsNorm(const float* x, const float* weight, float* y, int n, int dim, float eps) {
  for (int r = 0; r < n; ++r) {
    double ss = 0;
    for (int i = 0; i < dim; ++i) ss += double(x[size_t(r) * dim + i]) * x[size_t(r) * dim + i];
    double inv = 1.0 / std::sqrt(ss / std::max(dim, 1) + eps);
    for (int i = 0; i < dim; ++i)
      y[size_t(r) * dim + i] = float(x[size_t(r) * dim + i] * inv * weight[i]);
  }
}

void Rope(float* x, int n_rows, int n_vecs, int vec_dim, int rope_dim, const int64_t* positions,
          float base, int sign) {
  for (int r = 0; r < n_rows; ++r)
    for (int v = 0; v < n_vecs; ++v) {
      float* p = x + (size_t(r) * n_vecs + v) * vec_dim + (vec_dim - rope_dim);
      for (int i = 0; i < rope_dim / 2; ++i) {
        double freq = std::pow(double(base), -2.0 * i / rope_dim);
        double ang = double(positions[r]) * freq * sign;
        double c = std::cos(ang), s = std::sin(ang);
        double x0 = p[2 * i], x1 = p[2 * i + 1];
        p[2 * i] = float(x0 * c - x1 * s);
        p[2 * i + 1] = float(x0 * s + x1 * c);
      }
    }
}

void Softmax(float* x, int n) {
  if (n <= 0) return;
  double m = *std::max_element(x, x + n), s = 0;
  for (int i = 0; i < n; ++i) s += std::exp(double(x[i]) - m);
  for (int i = 0; i < n; ++i) x[i] = float(std::exp(double(x[i]) - m) / s);
}

float Dot(const float* a, const float* b, int n) {
  double s = 0;
  for (int i = 0; i < n; ++i) s += double(a[i]) * b[i];
  return float(s);
}

void SwiGLU(const float* g, const float* u, float* out, int n, float limit) {
  for (int i = 0; i < n; ++i) {
    double gv = g[i], uv = u[i];
    if (limit > 0) {
      gv = std::min(gv, double(limit));
      uv = std::clamp(uv, -double(limit), double(limit));
    }
    out[i] = float(gv / (1.0 + std::exp(-gv)) * uv);
  }
}

void MatmulMany(const MatmulJob* jobs, int n_jobs) {
  for (int j = 0; j < n_jobs; ++j) {
    if (jobs[j].wv.type != WeightType::kF32)
      ref::MatmulW(jobs[j].x, jobs[j].wv, jobs[j].y, jobs[j].n);
    else
      Matmul(jobs[j].x, jobs[j].w, jobs[j].y, jobs[j].n, jobs[j].in, jobs[j].out);
  }
}

void SinkAttention(const float* q, int n_heads, int dim, const float* win, int n_win,
                   const float* pool, const int32_t* sel, int n_sel, const float* sink,
                   float scale, float* out) {
  for (int h = 0; h < n_heads; ++h) {
    const float* qh = q + size_t(h) * dim;
    std::vector<double> logit;
    std::vector<const float*> ent;
    for (int e = 0; e < n_win; ++e) ent.push_back(win + size_t(e) * dim);
    for (int e = 0; e < n_sel; ++e) ent.push_back(pool + size_t(sel[e]) * dim);
    double m = sink[h];
    for (const float* e : ent) {
      double s = 0;
      for (int i = 0; i < dim; ++i) s += double(qh[i]) * e[i];
      logit.push_back(s * scale);
      m = std::max(m, logit.back());
    }
    double denom = std::exp(double(sink[h]) - m);
    std::vector<double> acc(dim, 0.0);
    for (size_t k = 0; k < ent.size(); ++k) {
      double p = std::exp(logit[k] - m);
      denom += p;
      for (int i = 0; i < dim; ++i) acc[i] += p * ent[k][i];
    }
    for (int i = 0; i < dim; ++i) out[size_t(h) * dim + i] = float(acc[i] / denom);
  }
}

void IndexScores(const float* q, const float* w, const float* keys, int n_rows, int n_heads,
                 int head_dim, int n_keys, float* scores) {
  for (int r = 0; r < n_rows; ++r)
    for (int j = 0; j < n_keys; ++j) {
      double s = 0;
      for (int h = 0; h < n_heads; ++h) {
        double d = 0;
        const float* qh = q + (size_t(r) * n_heads + h) * head_dim;
        for (int i = 0; i < head_dim; ++i) d += double(qh[i]) * keys[size_t(j) * head_dim + i];
        s += double(w[size_t(r) * n_heads + h]) * std::max(d, 0.0);
      }
      scores[size_t(r) * n_keys + j] = float(s);
    }
}

int TopK(const float* scores, int n, int k, int32_t* out) {
  std::vector<int32_t> idx;
  for (int i = 0; i < n; ++i)
    if (scores[i] != -std::numeric_limits<float>::infinity()) idx.push_back(i);
  std::stable_sort(idx.begin(), idx.end(),
                   [&](int32_t a, int32_t b) { return scores[a] > scores[b]; });
  int m = std::min<int>(k, int(idx.size()));
  std::sort(idx.begin(), idx.begin() + m);
  std::copy(idx.begin(), idx.begin() + m, out);
  return m;
}

}  // namespace cedar::kernels::ref
