#include "engine/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace cedar {

int32_t Argmax(const std::vector<float>& logits) {
  int32_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i)
    if (logits[i] > logits[size_t(best)]) best = int32_t(i);
  return best;
}

int32_t Sampler::Sample(const std::vector<float>& logits) {
  if (params_.temperature <= 0.0f || logits.size() <= 1) return Argmax(logits);
  const size_t n = logits.size();
  std::vector<int32_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return logits[size_t(a)] > logits[size_t(b)]; });
  std::vector<double> p(n);
  const double mx = logits[size_t(order[0])];
  double sum = 0;
  for (size_t i = 0; i < n; ++i) {
    p[i] = std::exp((double(logits[size_t(order[i])]) - mx) / params_.temperature);
    sum += p[i];
  }
  size_t keep = n;
  if (params_.top_p < 1.0f) {
    double mass = 0;
    for (size_t i = 0; i < n; ++i) {
      mass += p[i] / sum;
      if (mass >= params_.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  double kept = std::accumulate(p.begin(), p.begin() + long(keep), 0.0);
  std::uniform_real_distribution<double> u(0.0, kept);
  double x = u(rng_);
  for (size_t i = 0; i < keep; ++i) {
    x -= p[i];
    if (x < 0) return order[i];
  }
  return order[keep - 1];
}

std::vector<double> SamplingProbs(const std::vector<float>& logits, const SamplingParams& params) {
  const size_t n = logits.size();
  std::vector<int32_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return logits[size_t(a)] > logits[size_t(b)]; });
  std::vector<double> p(n), out(n, 0.0);
  const double mx = logits[size_t(order[0])];
  double sum = 0;
  for (size_t i = 0; i < n; ++i) {
    p[i] = std::exp((double(logits[size_t(order[i])]) - mx) / params.temperature);
    sum += p[i];
  }
  size_t keep = n;
  if (params.top_p < 1.0f) {
    double mass = 0;
    for (size_t i = 0; i < n; ++i) {
      mass += p[i] / sum;
      if (mass >= params.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  const double kept = std::accumulate(p.begin(), p.begin() + long(keep), 0.0);
  for (size_t i = 0; i < keep; ++i) out[size_t(order[i])] = p[i] / kept;
  return out;
}

int32_t SampleFrom(const std::vector<double>& probs, std::mt19937_64& rng) {
  const double total = std::accumulate(probs.begin(), probs.end(), 0.0);
  std::uniform_real_distribution<double> u(0.0, total);
  double x = u(rng);
  int32_t last = 0;
  for (size_t i = 0; i < probs.size(); ++i) {
    if (probs[i] <= 0) continue;
    last = int32_t(i);
    x -= probs[i];
    if (x < 0) return int32_t(i);
  }
  return last;
}

}  // namespace cedar
