// The scalar side of the typed weights (kernels/weight_view.h): one element as a float, and the
// reference product. Kept apart from the fast kernels so that targets holding only the scalar
// references (the GPU tests' cedar_gpu_test_main, which links no OpenBLAS) can link them.
#include <cstdint>
#include <cstddef>

#include "kernels/quant_formats.h"
#include "kernels/weight_view.h"

namespace cedar::kernels {

float WeightAt(const WeightView& w, int64_t r, int64_t c) {
  const int64_t nb = (w.cols + kQuantBlock - 1) / kQuantBlock;
  const int64_t b = c / kQuantBlock;
  switch (w.type) {
    case WeightType::kF32: return static_cast<const float*>(w.data)[r * w.cols + c];
    case WeightType::kBF16: return Bf16ToFloat(static_cast<const uint16_t*>(w.data)[r * w.cols + c]);
    case WeightType::kI8:
      return float(static_cast<const int8_t*>(w.data)[r * w.cols + c]) * I8ScaleAt(w.scales, r * nb + b);
    case WeightType::kFP8:
      return DecodeE4M3(static_cast<const uint8_t*>(w.data)[r * w.cols + c]) *
             DecodeE8M0(static_cast<const uint8_t*>(w.scales)[((w.row0 + r) / kQuantBlock) * nb + b]);
    case WeightType::kFP4: {
      const uint8_t byte = static_cast<const uint8_t*>(w.data)[r * (w.cols / 2) + c / 2];
      return DecodeE2M1(c % 2 ? uint8_t(byte >> 4) : uint8_t(byte & 0xF)) *
             DecodeE8M0(static_cast<const uint8_t*>(w.scales)[r * nb + b]);
    }
  }
  return 0;
}

namespace ref {
void MatmulW(const float* x, const WeightView& w, float* y, int n) {
  for (int b = 0; b < n; ++b)
    for (int64_t r = 0; r < w.rows; ++r) {
      double s = 0;
      for (int64_t c = 0; c < w.cols; ++c) s += double(x[size_t(b) * size_t(w.cols) + size_t(c)]) * WeightAt(w, r, c);
      y[size_t(b) * size_t(w.rows) + size_t(r)] = float(s);
    }
}
}  // namespace ref

}  // namespace cedar::kernels
