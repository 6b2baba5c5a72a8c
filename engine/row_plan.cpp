#include "engine/row_plan.h"

#include <algorithm>

namespace cedar {

std::vector<int64_t> DecoderPhaseStarts(const ModelConfig& c, PrefillMode mode, int64_t N, int64_t decoder_pos,
                                        int64_t h_e_lo) {
  const int E = c.n_encoder_layers, L = c.n_layers;
  const int64_t W = c.window, R = std::min<int64_t>(W, N);
  std::vector<int64_t> a(size_t(L), 0);
  if (mode != PrefillMode::kExact) {
    std::fill(a.begin() + E, a.end(), N - R);
  } else {
    const int64_t p0 = std::min(decoder_pos, N);
    a[size_t(L - 1)] = std::max<int64_t>(p0, N - W);
    for (int l = L - 2; l >= E; --l) a[size_t(l)] = std::max<int64_t>(p0, a[size_t(l + 1)] - W + 1);
  }
  a[size_t(E)] = std::max(a[size_t(E)], h_e_lo);
  for (int l = E + 1; l < L; ++l) a[size_t(l)] = std::max(a[size_t(l)], a[size_t(l - 1)]);
  return a;
}

int64_t DecoderPhaseFloor(const ModelConfig& c, PrefillMode mode, int l, int64_t N) {
  const bool bounded = mode != PrefillMode::kExact;
  if (bounded && (l > c.n_encoder_layers || mode == PrefillMode::kBoundedPaper)) return N - std::min<int64_t>(c.window, N);
  return 0;
}

int64_t WindowKeepFrom(const ModelConfig& c, int l, int64_t pos, int64_t keep_extra_rows) {
  const int64_t W = c.window;
  return pos - keep_extra_rows - (l == c.n_encoder_layers ? 2 * W - 1 : W);
}

int64_t HeKeepFrom(const ModelConfig& c, int64_t pos, int64_t keep_extra_rows, int64_t keep_h_e_rows) {
  return pos - keep_extra_rows - std::max<int64_t>(c.window, keep_h_e_rows);
}

int64_t ExactFrontier(const ModelConfig& c, int l, int64_t floor) {
  return floor > 0 ? floor + int64_t(l) * (c.window - 1) : 0;
}

}  // namespace cedar
