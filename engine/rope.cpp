// Per-layer RoPE tables (engine/rope.h).
#include "engine/rope.h"

#include <algorithm>
#include <cmath>

#include "kernels/ops.h"

namespace cedar {

bool UsesYarn(const ModelConfig& c, int layer) {
  return c.RatioOf(layer) > 0 && c.rope_factor > 1.0f && c.rope_original_seq_len > 0;
}

std::vector<double> YarnInvFreq(int r, double base, double factor, int64_t original, double beta_fast, double beta_slow) {
  const int half = r / 2;
  std::vector<double> f(static_cast<size_t>(half));
  for (int i = 0; i < half; ++i) f[size_t(i)] = std::pow(base, -2.0 * i / r);
  if (original <= 0) return f;
  // The (fractional) pair index whose wavelength makes `rot` turns over `original` tokens.
  auto dim = [&](double rot) { return r * std::log(double(original) / (rot * 2 * M_PI)) / (2 * std::log(base)); };
  const double low = std::max(std::floor(dim(beta_fast)), 0.0);
  const double high = std::min(std::ceil(dim(beta_slow)), double(r - 1));
  for (int i = 0; i < half; ++i) {
    const double ramp = std::clamp((i - low) / std::max(high - low, 1e-3), 0.0, 1.0);
    f[size_t(i)] = f[size_t(i)] / factor * ramp + f[size_t(i)] * (1.0 - ramp);
  }
  return f;
}

void RopeLayer(const ModelConfig& c, int layer, float* x, int n_rows, int n_vecs, int vec_dim,
               const int64_t* positions, int sign) {
  const int r = c.rope_dim, half = r / 2;
  if (!UsesYarn(c, layer)) {
    kernels::Rope(x, n_rows, n_vecs, vec_dim, r, positions, c.RopeBaseOf(layer), sign);
    return;
  }
  if (half <= 0) return;
  // r/2 pows per call: nothing next to the rotations themselves.
  const std::vector<double> freq =
      YarnInvFreq(r, c.compress_rope_theta, c.rope_factor, c.rope_original_seq_len, c.rope_beta_fast, c.rope_beta_slow);
  // As kernels::Rope: angles and their cos/sin in double, the rotation in float.
  std::vector<float> cs(static_cast<size_t>(half)), sn(static_cast<size_t>(half));
  for (int row = 0; row < n_rows; ++row) {
    for (int i = 0; i < half; ++i) {
      const double ang = double(positions[row]) * freq[size_t(i)] * sign;
      cs[size_t(i)] = float(std::cos(ang));
      sn[size_t(i)] = float(std::sin(ang));
    }
    for (int v = 0; v < n_vecs; ++v) {
      float* p = x + (size_t(row) * n_vecs + v) * vec_dim + (vec_dim - r);
      for (int i = 0; i < half; ++i) {
        const float x0 = p[2 * i], x1 = p[2 * i + 1];
        p[2 * i] = x0 * cs[size_t(i)] - x1 * sn[size_t(i)];
        p[2 * i + 1] = x0 * sn[size_t(i)] + x1 * cs[size_t(i)];
      }
    }
  }
}

}  // namespace cedar
