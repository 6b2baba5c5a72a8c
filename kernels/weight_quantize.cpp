#include "kernels/weight_quantize.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

#include "kernels/quant_formats.h"
#include "kernels/thread_pool.h"

namespace cedar::kernels {

QuantizedBytes QuantizedBytesOf(int64_t rows, int64_t cols, WeightType type) {
  const size_t n = size_t(rows * cols), nb = size_t((cols + 31) / 32);  // blocks of 32 along a row
  switch (type) {
    case WeightType::kF32: return {n * 4, 0};
    case WeightType::kBF16: return {n * 2, 0};
    case WeightType::kI8: return {n, size_t(rows) * nb * 2};
    case WeightType::kFP8: return {n, size_t((rows + 31) / 32) * nb};
    case WeightType::kFP4: return {n / 2, size_t(rows) * nb};
  }
  return {};
}

void QuantizeWeightInto(std::span<const float> w, int64_t rows, int64_t cols, WeightType type, void* data, void* scales) {
  if (int64_t(w.size()) != rows * cols) throw std::invalid_argument("QuantizeWeight: w is not [rows, cols]");
  // Shapes checked here, where an exception reaches the caller (a pool worker's would not).
  if (type == WeightType::kFP4 && cols % 32 != 0)
    throw std::invalid_argument("QuantizeWeight: FP4 needs cols divisible by the block 32, found " + std::to_string(cols));
  const int64_t nb = (cols + 31) / 32;
  auto* d = static_cast<uint8_t*>(data);
  auto* sc = static_cast<uint8_t*>(scales);
  // Rows (FP8: rows of 32-row blocks) on the pool's threads: each part writes its own bytes and
  // scales, so the result is one thread's (medium's load as fp8-fp4 went 22 -> 7 s with the encoders).
  switch (type) {
    case WeightType::kF32:
      ParallelCopy(d, w.data(), w.size() * 4);
      break;
    case WeightType::kBF16:
      ParallelFor(int64_t(w.size()), int64_t(1) << 20, [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) reinterpret_cast<uint16_t*>(d)[i] = FloatToBf16(w[size_t(i)]);
      });
      break;
    case WeightType::kI8:
      ParallelFor(rows, 32, [&](int64_t r0, int64_t r1) {
        QuantizeI8(w.data() + r0 * cols, r1 - r0, cols, reinterpret_cast<int8_t*>(d) + r0 * cols, reinterpret_cast<uint16_t*>(sc) + r0 * nb);
      });
      break;
    case WeightType::kFP8:
      ParallelFor((rows + 31) / 32, 1, [&](int64_t b0, int64_t b1) {
        const int64_t r0 = b0 * 32, r1 = std::min(rows, b1 * 32);
        QuantFp8Blocks(w.data() + r0 * cols, r1 - r0, cols, 32, 32, d + r0 * cols, sc + b0 * nb);
      });
      break;
    case WeightType::kFP4:
      ParallelFor(rows, 32, [&](int64_t r0, int64_t r1) {
        QuantFp4Packed(w.data() + r0 * cols, r1 - r0, cols, 32, d + r0 * cols / 2, sc + r0 * nb);
      });
      break;
  }
}

OwnedWeight QuantizeWeight(std::span<const float> w, int64_t rows, int64_t cols, WeightType type) {
  OwnedWeight s;
  const QuantizedBytes bytes = QuantizedBytesOf(rows, cols, type);
  s.data.resize(bytes.data);
  s.scales.resize(bytes.scales);
  QuantizeWeightInto(w, rows, cols, type, s.data.data(), s.scales.data());
  s.view.type = type;
  s.view.rows = rows;
  s.view.cols = cols;
  s.view.data = s.data.data();
  s.view.scales = s.scales.empty() ? nullptr : s.scales.data();
  return s;
}

}  // namespace cedar::kernels
