// FFN sub-layer (spec §3, FFN): routed experts with a sqrt-softplus router, a shared expert,
// or one dense SwiGLU FFN. Rows routed to one expert are gathered and run as one matmul.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "engine/layer_parts.h"
#include "kernels/ops.h"

namespace cedar {

namespace k = kernels;

namespace {

// y[n, d] += weight[r] * FFN(x[n, d]) for the given FFN; weight == nullptr means 1.
void RunFfn(const ModelConfig& c, const FfnWeights& f, const float* x, int n, const float* weight,
            const int32_t* rows, float* h) {
  const int d = c.dim, inter = c.moe_inter_dim;
  std::vector<float> g(size_t(n) * inter), up(size_t(n) * inter), y(size_t(n) * d);
  k::Matmul(x, f.w1.data, g.data(), n, d, inter);
  k::Matmul(x, f.w3.data, up.data(), n, d, inter);
  k::SwiGLU(g.data(), up.data(), g.data(), n * inter, c.swiglu_limit);
  k::Matmul(g.data(), f.w2.data, y.data(), n, inter, d);
  for (int r = 0; r < n; ++r) {
    float* dst = h + size_t(rows ? rows[r] : r) * d;
    const float wr = weight ? weight[r] : 1.0f;
    const float* src = y.data() + size_t(r) * d;
    for (int i = 0; i < d; ++i) dst[i] += wr * src[i];
  }
}

float Softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

}  // namespace

void FfnAdd(const Model& m, int l, const float* x, float* h, int n) {
  const ModelConfig& c = m.config();
  const LayerWeights& w = m.layer(l);
  if (n <= 0) return;
  if (c.n_routed_experts == 0) {
    RunFfn(c, w.dense, x, n, nullptr, nullptr, h);
    return;
  }
  const int ne = c.n_routed_experts, kk = c.experts_per_token, d = c.dim;
  std::vector<float> s(size_t(n) * ne);  // [n, n_experts]
  k::Matmul(x, w.gate.data, s.data(), n, d, ne);
  std::vector<std::vector<int32_t>> rows_of(static_cast<size_t>(ne));
  std::vector<std::vector<float>> weight_of(static_cast<size_t>(ne));
  std::vector<float> choice(static_cast<size_t>(ne));
  std::vector<int32_t> order(static_cast<size_t>(ne));
  for (int r = 0; r < n; ++r) {
    float* sr = s.data() + size_t(r) * ne;
    for (int e = 0; e < ne; ++e) {
      sr[e] = std::sqrt(Softplus(sr[e]));
      choice[size_t(e)] = sr[e] + w.gate_bias.data[e];
    }
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return choice[size_t(a)] > choice[size_t(b)]; });
    float sum = 0.0f;
    for (int j = 0; j < kk; ++j) sum += sr[order[size_t(j)]];
    for (int j = 0; j < kk; ++j) {
      const int e = order[size_t(j)];
      rows_of[size_t(e)].push_back(r);
      weight_of[size_t(e)].push_back(c.route_scale * sr[e] / sum);
    }
  }
  std::vector<float> gathered;
  for (int e = 0; e < ne; ++e) {
    const auto& rows = rows_of[size_t(e)];
    if (rows.empty()) continue;
    gathered.resize(rows.size() * size_t(d));
    for (size_t i = 0; i < rows.size(); ++i)
      std::copy(x + size_t(rows[i]) * d, x + size_t(rows[i] + 1) * d, gathered.begin() + i * size_t(d));
    RunFfn(c, w.experts[size_t(e)], gathered.data(), int(rows.size()), weight_of[size_t(e)].data(), rows.data(), h);
  }
  if (c.n_shared_experts == 1) RunFfn(c, w.shared, x, n, nullptr, nullptr, h);
}

}  // namespace cedar
