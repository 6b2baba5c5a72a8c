// Typed weights: names, sizes, conversion at load, the scalar element decoder and the reference
// product. The fast products are in matmul_quant.cpp.
#include "kernels/weight_view.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "kernels/cpu_internal.h"
#include "kernels/ops.h"
#include "kernels/quant_formats.h"

namespace cedar::kernels {

const char* WeightTypeName(WeightType t) {
  switch (t) {
    case WeightType::kF32: return "f32";
    case WeightType::kBF16: return "bf16";
    case WeightType::kI8: return "int8";
    case WeightType::kFP8: return "fp8";
    case WeightType::kFP4: return "fp4";
  }
  return "?";
}

double WeightRowBytes(WeightType t, int64_t cols) {
  const double blocks = double((cols + kQuantBlock - 1) / kQuantBlock);
  switch (t) {
    case WeightType::kF32: return 4.0 * double(cols);
    case WeightType::kBF16: return 2.0 * double(cols);
    case WeightType::kI8: return double(cols) + 2.0 * blocks;
    case WeightType::kFP8: return double(cols) + blocks / kQuantBlock;  // one byte per 32 x 32
    case WeightType::kFP4: return double(cols) / 2.0 + blocks;
  }
  return 0;
}

WeightView WeightView::Rows(int64_t r, int64_t n) const {
  if (r < 0 || n < 0 || r + n > rows)
    throw std::out_of_range("WeightView::Rows: rows [" + std::to_string(r) + ", " + std::to_string(r + n) +
                            ") of a view with " + std::to_string(rows));
  WeightView v = *this;
  v.rows = n;
  switch (type) {
    case WeightType::kF32: v.data = static_cast<const float*>(data) + r * cols; break;
    case WeightType::kBF16: v.data = static_cast<const uint16_t*>(data) + r * cols; break;
    case WeightType::kI8:
      v.data = static_cast<const int8_t*>(data) + r * cols;
      v.scales = static_cast<const uint16_t*>(scales) + r * ((cols + kQuantBlock - 1) / kQuantBlock);
      break;
    case WeightType::kFP8:
      v.data = static_cast<const uint8_t*>(data) + r * cols;
      v.row0 = row0 + r;  // the scale grid stays whole: row (row0 + i) uses scale row (row0 + i) / 32
      break;
    case WeightType::kFP4:
      v.data = static_cast<const uint8_t*>(data) + r * (cols / 2);
      v.scales = static_cast<const uint8_t*>(scales) + r * ((cols + kQuantBlock - 1) / kQuantBlock);
      break;
  }
  return v;
}

uint16_t FloatToBf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  if (std::isnan(x)) return uint16_t((u >> 16) | 0x40);  // quiet NaN stays NaN
  u += 0x7FFF + ((u >> 16) & 1);                           // round to nearest, ties to even
  return uint16_t(u >> 16);
}

void QuantizeI8(const float* w, int64_t rows, int64_t cols, int8_t* q, uint16_t* scales) {
  const int64_t nb = (cols + kQuantBlock - 1) / kQuantBlock;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < nb; ++b) {
      const int64_t c0 = b * kQuantBlock, c1 = std::min(cols, c0 + kQuantBlock);
      float amax = 0;
      for (int64_t c = c0; c < c1; ++c) amax = std::max(amax, std::fabs(w[r * cols + c]));
      const uint16_t code = FloatToBf16(amax / 127.0f);
      scales[r * nb + b] = code;
      const float s = Bf16ToFloat(code);
      const float inv = s > 0 ? 1.0f / s : 0.0f;
      for (int64_t c = c0; c < c1; ++c)
        q[r * cols + c] = int8_t(std::clamp(std::nearbyint(w[r * cols + c] * inv), -127.0f, 127.0f));
    }
}

void MatmulW(const float* x, const WeightView& w, float* y, int n) {
  if (w.type == WeightType::kF32) {
    Matmul(x, static_cast<const float*>(w.data), y, n, int(w.cols), int(w.rows));  // today's path, unchanged
    return;
  }
  if (n <= 0 || w.rows <= 0) return;
  MatmulJob job{x, nullptr, y, n, int(w.cols), int(w.rows)};
  job.wv = w;
  MatmulMany(&job, 1);
}


}  // namespace cedar::kernels
