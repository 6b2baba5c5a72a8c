// FFN sub-layer (spec §3, FFN): routed experts with a sqrt-softplus router (or, as released
// models allow, sigmoid or softmax: ModelConfig::score_func; tools/reference/v41/moe.py), a
// shared expert, or one dense SwiGLU FFN (the kernels' SwiGLU is the released clamped one:
// min(W1 x, limit), clamp(W3 x, -limit, limit)). Rows routed to one expert are gathered and run as one matmul.
#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>
#include <string>

#include "engine/layer_parts.h"
#include "engine/row_groups.h"
#include "engine/scratch.h"
#include "kernels/ops.h"
#include "kernels/thread_pool.h"

namespace cedar {

namespace k = kernels;

namespace {

// y[n, d] += weight[r] * FFN(x[n, d]) for the given FFN; weight == nullptr means 1. groups: the
// row groups whose products run apart.
void RunFfn(const ModelConfig& c, const FfnWeights& f, const float* x, int n, const float* weight,
            const int32_t* rows, float* h, std::span<const int> groups) {
  const int d = c.dim, inter = c.moe_inter_dim;
  Scratch<float> g(size_t(n) * inter), up(size_t(n) * inter), y(size_t(n) * d);
  MatmulGroups(x, f.w1.view(), g.data(), groups);
  MatmulGroups(x, f.w3.view(), up.data(), groups);
  k::SwiGLU(g.data(), up.data(), g.data(), n * inter, c.swiglu_limit);
  MatmulGroups(g.data(), f.w2.view(), y.data(), groups);
  for (int r = 0; r < n; ++r) {
    float* dst = h + size_t(rows ? rows[r] : r) * d;
    const float wr = weight ? weight[r] : 1.0f;
    const float* src = y.data() + size_t(r) * d;
    for (int i = 0; i < d; ++i) dst[i] += wr * src[i];
  }
}

float Softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

// Router scores s [ne] in place from the gate logits of one row.
void Scores(const std::string& func, float* s, int ne) {
  if (func == "sigmoid") {
    for (int e = 0; e < ne; ++e) s[e] = 1.0f / (1.0f + std::exp(-s[e]));
  } else if (func == "softmax") {
    const float mx = *std::max_element(s, s + ne);
    double sum = 0;
    for (int e = 0; e < ne; ++e) sum += (s[e] = std::exp(s[e] - mx));
    for (int e = 0; e < ne; ++e) s[e] = float(s[e] / sum);
  } else {  // sqrtsoftplus
    for (int e = 0; e < ne; ++e) s[e] = std::sqrt(Softplus(s[e]));
  }
}

}  // namespace

void FfnAdd(const Model& m, int l, const float* x, float* h, int n, std::span<const int> groups_in) {
  const ModelConfig& c = m.config();
  const LayerWeights& w = m.layer(l);
  if (n <= 0) return;
  const int one[2] = {0, n};
  const std::span<const int> groups = groups_in.empty() ? std::span<const int>(one) : groups_in;
  if (c.n_routed_experts == 0) {
    RunFfn(c, w.dense, x, n, nullptr, nullptr, h, groups);
    return;
  }
  const int ne = c.n_routed_experts, kk = c.experts_per_token, d = c.dim;
  Scratch<float> s(size_t(n) * ne);  // [n, n_experts]
  MatmulGroups(x, w.gate.view(), s.data(), groups);  // F32, or a released router's BF16 (engine/v41_held.h)
  // Each row's choice (its top kk experts in order, and their weights) on its own, split over
  // the pool (a prefill's 512+ rows were a serial stretch); then the lists in row order.
  Scratch<int32_t> pick(size_t(n) * kk);  // [n, kk] expert ids, best first
  Scratch<float> pick_w(size_t(n) * kk);  // [n, kk] their weights
  k::ParallelFor(n, 64, [&](int64_t r0, int64_t r1) {
    std::vector<float> choice(static_cast<size_t>(ne));
    std::vector<int32_t> order(static_cast<size_t>(ne));
    for (int64_t r = r0; r < r1; ++r) {
      float* sr = s.data() + size_t(r) * ne;
      Scores(c.score_func, sr, ne);
      for (int e = 0; e < ne; ++e) choice[size_t(e)] = sr[e] + w.gate_bias.data[e];
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return choice[size_t(a)] > choice[size_t(b)]; });
      float sum = 0.0f;
      for (int j = 0; j < kk; ++j) sum += sr[order[size_t(j)]];
      for (int j = 0; j < kk; ++j) {
        const int e = order[size_t(j)];
        pick[size_t(r) * kk + j] = e;
        // norm_topk_prob: route_scale s_e / (sum of the chosen s + 1e-20) as moe.py (the 1e-20 only
        // guards a zero sum: it leaves any sum above ~1e-13 unchanged in float). With k = 1 it
        // still divides (s_e / s_e = 1: our family's spec; moe.py's V4.1 port would not divide,
        // the V4 code would; the released model has k = 6). Without it route_scale s_e.
        pick_w[size_t(r) * kk + j] = c.norm_topk_prob ? c.route_scale * sr[e] / (sum + 1e-20f) : c.route_scale * sr[e];
      }
    }
  });
  std::vector<std::vector<int32_t>> rows_of(static_cast<size_t>(ne));
  std::vector<std::vector<float>> weight_of(static_cast<size_t>(ne));
  for (int r = 0; r < n; ++r)
    for (int j = 0; j < kk; ++j) {
      const int e = pick[size_t(r) * kk + j];
      rows_of[size_t(e)].push_back(r);
      weight_of[size_t(e)].push_back(pick_w[size_t(r) * kk + j]);
    }
  // Every expert used (and the shared one) at once: the W1 and W3 products of all of them in
  // one pass of the thread pool, then the W2 products in another (at decode a layer's expert
  // weights are streamed by both threads with two hand-offs instead of nine).
  // One entry per expert and row group with rows (an expert's rows ascend, so each group's are
  // a run of them); a row is in one group, so its adds keep the order experts, then shared.
  struct Active {
    const FfnWeights* f;
    const int32_t* rows;               // nullptr: rows [row0, row0 + n) (the shared expert)
    const float* weight;               // nullptr: 1
    int n, row0;
    size_t x_off, a_off;               // into xs [sum n, d] and g / up / y [sum n, inter or d]
    std::shared_ptr<const void> pin;   // keeps an on-demand expert alive while it is used
  };
  std::vector<Active> act;
  size_t total_rows = 0;
  for (int e = 0; e < ne; ++e) {
    const auto& rows = rows_of[size_t(e)];
    if (rows.empty()) continue;
    ExpertRef ref = m.expert(l, e);  // resident, or dequantised on demand (released layout, --max-ram)
    size_t i = 0;
    for (size_t b = 0; b + 1 < groups.size(); ++b) {
      const size_t i0 = i;
      while (i < rows.size() && rows[i] < groups[b + 1]) ++i;
      if (i > i0) act.push_back({ref.f, rows.data() + i0, weight_of[size_t(e)].data() + i0, int(i - i0), 0, 0, 0, ref.pin});
    }
    total_rows += rows.size();
  }
  if (c.n_shared_experts == 1) {
    for (size_t b = 0; b + 1 < groups.size(); ++b)
      act.push_back({&w.shared, nullptr, nullptr, groups[b + 1] - groups[b], groups[b], 0, 0, nullptr});
    total_rows += size_t(n);
  }
  const int inter = c.moe_inter_dim;
  Scratch<float> xs(total_rows * size_t(d));  // gathered rows: [sum n, d]
  Scratch<float> g(total_rows * size_t(inter)), up(total_rows * size_t(inter)), y(total_rows * size_t(d));
  std::vector<k::MatmulJob> jobs;
  Scratch<int32_t> src_row(total_rows);  // the row of x that row i of xs is
  size_t r0 = 0;
  for (Active& a : act) {
    a.x_off = r0 * size_t(d);
    a.a_off = r0 * size_t(inter);
    for (int i = 0; i < a.n; ++i) src_row[r0 + size_t(i)] = a.rows ? a.rows[i] : a.row0 + i;
    jobs.push_back(k::JobW(xs.data() + a.x_off, a.f->w1.view(), g.data() + a.a_off, a.n));
    jobs.push_back(k::JobW(xs.data() + a.x_off, a.f->w3.view(), up.data() + a.a_off, a.n));
    r0 += size_t(a.n);
  }
  // The gather, split over the pool for a prefill's thousands of rows.
  k::ParallelFor(int64_t(total_rows), std::max<int64_t>(1, (1 << 15) / d), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) std::copy(x + size_t(src_row[size_t(i)]) * d, x + size_t(src_row[size_t(i)] + 1) * d, xs.begin() + i * d);
  });
  k::MatmulMany(jobs.data(), int(jobs.size()));
  k::SwiGLU(g.data(), up.data(), g.data(), int(total_rows) * inter, c.swiglu_limit);
  jobs.clear();
  for (const Active& a : act) jobs.push_back(k::JobW(g.data() + a.a_off, a.f->w2.view(), y.data() + a.x_off, a.n));
  k::MatmulMany(jobs.data(), int(jobs.size()));
  // Weighted adds in the order the one-expert-at-a-time loop used (experts, then shared). The
  // pool's threads take column ranges [i0, i1) of every row, so each element still gets its
  // terms in that order (same bits) and a prefill's adds use both cores.
  k::ParallelFor(d, total_rows * size_t(d) >= (1 << 15) ? 64 : d, [&](int64_t i0, int64_t i1) {
    for (const Active& a : act)
      for (int r = 0; r < a.n; ++r) {
        float* dst = h + size_t(a.rows ? a.rows[r] : a.row0 + r) * d;
        const float wr = a.weight ? a.weight[r] : 1.0f;
        const float* src = y.data() + a.x_off + size_t(r) * d;
        for (int64_t i = i0; i < i1; ++i) dst[i] += wr * src[i];
      }
  });
}

}  // namespace cedar
