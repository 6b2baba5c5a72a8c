#include "engine/sampling.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <numeric>

namespace cedar {

int32_t Argmax(const std::vector<float>& logits) {
  int32_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i)
    if (logits[i] > logits[size_t(best)]) best = int32_t(i);
  return best;
}

namespace {

// The order of Sample's definition: logits descending, ties by the lower id (what a stable sort
// of the ids by `logit >` gives).
bool Before(const std::vector<float>& logits, int32_t a, int32_t b) {
  const float la = logits[size_t(a)], lb = logits[size_t(b)];
  return la > lb || (la == lb && a < b);
}

// A uint32 whose ascending order is the descending order of finite floats (-0 == +0).
uint32_t DescendingKey(float f) {
  const uint32_t bits = f == 0.0f ? 0u : std::bit_cast<uint32_t>(f);
  const uint32_t ascending = (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
  return ~ascending;
}

// The permutation that puts `keys` in ascending order, equal keys keeping their input order:
// a stable LSD radix sort (3 passes of 11 bits), O(n); with DescendingKey over ids in ascending
// id order it is the stable comparison sort's order.
std::vector<uint32_t> RadixOrder(std::vector<uint32_t> keys) {
  const size_t n = keys.size();
  std::vector<uint32_t> order(n), keys_tmp(n), order_tmp(n);
  std::iota(order.begin(), order.end(), 0u);
  for (int shift = 0; shift < 32; shift += 11) {
    size_t count[2049] = {};
    for (size_t i = 0; i < n; ++i) ++count[((keys[i] >> shift) & 2047u) + 1];
    for (size_t b = 1; b < 2049; ++b) count[b] += count[b - 1];
    for (size_t i = 0; i < n; ++i) {
      const size_t at = count[(keys[i] >> shift) & 2047u]++;
      keys_tmp[at] = keys[i];
      order_tmp[at] = order[i];
    }
    keys.swap(keys_tmp);
    order.swap(order_tmp);
  }
  return order;
}

}  // namespace

// Definition (what every path must reproduce bit for bit; SampleFullSort in
// tests/sampling_test.cpp is this definition written out): order the ids by Before; p[i] =
// exp((logit - max) / T) in that order; sum them in that order; top-p keeps the shortest
// prefix whose running share reaches top_p; draw x in [0, kept) and walk the prefix
// subtracting p until x < 0 (the last kept id if rounding never gets there).
//
// Why not a partial selection (nth_element to the top-p boundary): the sum runs over the whole
// vocabulary in sorted order, and in double precision the tail (129,280 ids of a real or random
// model) changes its last bits, so any other order could move x across a boundary. What makes
// this exact and fast instead: an id whose p is exactly 0 (exp underflow, or the -inf of a
// grammar mask) adds exactly nothing and sorts after every id with p > 0, so only the ids with
// p > 0 are ordered (a grammar-constrained step has a handful), by a comparison sort when they
// are few and an O(n) radix sort when they are many.
int32_t Sampler::Sample(const std::vector<float>& logits) {
  if (params_.temperature <= 0.0f || logits.size() <= 1) return Argmax(logits);
  const size_t n = logits.size();
  float mx_f = logits[0];
  bool nan = false;
  for (float l : logits) {
    mx_f = std::max(mx_f, l);
    nan |= std::isnan(l);
  }
  // Non-finite maximum (all masked, or +inf) or a NaN: the definition's arithmetic is NaN-laden
  // there; run it literally.
  if (nan || !std::isfinite(mx_f)) return SampleFullSort(logits);
  const double mx = mx_f;
  const double temperature = params_.temperature;

  // The ids with p > 0 in ascending id order, with their p. An id's p depends on its logit
  // alone, so computing it by id gives the definition's values; -inf (a mask) is p = 0 unasked.
  std::vector<int32_t> pos_ids;
  std::vector<double> pos_p;
  int32_t last_zero = -1;  // the id the definition orders last among p == 0, if any
  for (size_t i = 0; i < n; ++i) {
    const double p = logits[i] == -std::numeric_limits<float>::infinity()
                         ? 0.0 : std::exp((double(logits[i]) - mx) / temperature);
    if (p > 0) {
      pos_ids.push_back(int32_t(i));
      pos_p.push_back(p);
    } else if (last_zero < 0 || !Before(logits, int32_t(i), last_zero)) {
      last_zero = int32_t(i);
    }
  }
  const size_t m = pos_ids.size();  // >= 1: the maximum has p = 1
  std::vector<uint32_t> order;       // [m] positions in pos_ids, in Before order
  if (m > 1024) {
    std::vector<uint32_t> keys(m);
    for (size_t i = 0; i < m; ++i) keys[i] = DescendingKey(logits[size_t(pos_ids[i])]);
    order = RadixOrder(std::move(keys));
  } else {
    order.resize(m);
    std::iota(order.begin(), order.end(), 0u);
    std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return Before(logits, pos_ids[a], pos_ids[b]); });
  }
  std::vector<int32_t> ids(m);
  std::vector<double> p(m);
  double sum = 0;
  for (size_t i = 0; i < m; ++i) {
    ids[i] = pos_ids[order[i]];
    p[i] = pos_p[order[i]];
    sum += p[i];  // the zeros after these add nothing
  }
  size_t keep = m;
  bool cut = false;
  if (params_.top_p < 1.0f) {
    double mass = 0;
    for (size_t i = 0; i < m; ++i) {
      mass += p[i] / sum;
      if (mass >= params_.top_p) {
        keep = i + 1;
        cut = true;
        break;
      }
    }
  }
  const double kept = std::accumulate(p.begin(), p.begin() + long(keep), 0.0);
  std::uniform_real_distribution<double> u(0.0, kept);
  double x = u(rng_);
  for (size_t i = 0; i < keep; ++i) {
    x -= p[i];
    if (x < 0) return ids[i];
  }
  // The definition's fallback: its last kept id, which without a cut is the last of all ids.
  if (!cut && last_zero >= 0) return last_zero;
  return ids[keep - 1];
}

int32_t Sampler::SampleFullSort(const std::vector<float>& logits) {
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
