#include "engine/logprobs.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace cedar {

void ApplyAdjustments(const LogitAdjustments& adj, const std::unordered_map<int32_t, int>& counts,
                      std::vector<float>& logits) {
  if (adj.presence_penalty != 0.0f || adj.frequency_penalty != 0.0f) {
    for (const auto& [id, n] : counts) {
      if (id < 0 || size_t(id) >= logits.size() || n <= 0) continue;
      logits[size_t(id)] -= float(n) * adj.frequency_penalty + adj.presence_penalty;
    }
  }
  for (const auto& [id, b] : adj.bias)
    if (id >= 0 && size_t(id) < logits.size()) logits[size_t(id)] += b;
}

TokenLogprobs LogprobsOf(const std::vector<float>& logits, int32_t chosen, int top_n) {
  TokenLogprobs out;
  if (logits.empty()) return out;
  double mx = -INFINITY;
  for (float x : logits) mx = std::max(mx, double(x));
  double sum = 0;
  for (float x : logits) sum += std::exp(double(x) - mx);
  const double lse = mx + std::log(sum);
  auto lp = [&](int32_t id) { return float(double(logits[size_t(id)]) - lse); };
  out.chosen = {chosen, chosen >= 0 && size_t(chosen) < logits.size() ? lp(chosen) : -INFINITY};
  const size_t k = std::min(size_t(std::max(top_n, 0)), logits.size());
  if (k == 0) return out;
  std::vector<int32_t> ids(logits.size());
  std::iota(ids.begin(), ids.end(), 0);
  std::partial_sort(ids.begin(), ids.begin() + long(k), ids.end(), [&](int32_t a, int32_t b) {
    const float la = logits[size_t(a)], lb = logits[size_t(b)];
    return la != lb ? la > lb : a < b;
  });
  for (size_t i = 0; i < k; ++i) out.top.push_back({ids[i], lp(ids[i])});
  return out;
}

}  // namespace cedar
