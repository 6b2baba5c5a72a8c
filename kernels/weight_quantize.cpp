#include "kernels/weight_quantize.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

#include "kernels/quant_formats.h"
#include "kernels/thread_pool.h"

namespace cedar::kernels {

OwnedWeight QuantizeWeight(std::span<const float> w, int64_t rows, int64_t cols, WeightType type) {
  if (int64_t(w.size()) != rows * cols) throw std::invalid_argument("QuantizeWeight: w is not [rows, cols]");
  OwnedWeight s;
  const int64_t nb = (cols + 31) / 32;  // blocks of 32 along a row
  s.view.type = type;
  s.view.rows = rows;
  s.view.cols = cols;
  switch (type) {
    case WeightType::kF32:
      s.data.resize(w.size() * 4);
      std::memcpy(s.data.data(), w.data(), s.data.size());
      break;
    case WeightType::kBF16: {
      s.data.resize(w.size() * 2);
      auto* p = reinterpret_cast<uint16_t*>(s.data.data());
      for (size_t i = 0; i < w.size(); ++i) p[i] = FloatToBf16(w[i]);
      break;
    }
    case WeightType::kI8:
      s.data.resize(w.size());
      s.scales.resize(size_t(rows * nb) * 4);
      QuantizeI8(w.data(), rows, cols, reinterpret_cast<int8_t*>(s.data.data()), reinterpret_cast<float*>(s.scales.data()));
      break;
    case WeightType::kFP8:
      s.data.resize(w.size());
      s.scales.resize(size_t((rows + 31) / 32 * nb));
      // Rows of 32-row blocks on the pool's threads: each call writes its own bytes and scales, so
      // the result is the one call's (medium's load as fp8-fp4 went 22 -> 7 s with the encoders).
      ParallelFor((rows + 31) / 32, 1, [&](int64_t b0, int64_t b1) {
        const int64_t r0 = b0 * 32, r1 = std::min(rows, b1 * 32);
        QuantFp8Blocks(w.data() + r0 * cols, r1 - r0, cols, 32, 32, s.data.data() + r0 * cols, s.scales.data() + b0 * nb);
      });
      break;
    case WeightType::kFP4:
      s.data.resize(w.size() / 2);
      s.scales.resize(size_t(rows * nb));
      // Shape checked here, where its exception reaches the caller (a pool worker's would not).
      if (cols % 32 != 0)
        throw std::invalid_argument("QuantizeWeight: FP4 needs cols divisible by the block 32, found " + std::to_string(cols));
      ParallelFor(rows, 32, [&](int64_t r0, int64_t r1) {  // rows on the pool's threads, as FP8's
        QuantFp4Packed(w.data() + r0 * cols, r1 - r0, cols, 32, s.data.data() + r0 * cols / 2, s.scales.data() + r0 * nb);
      });
      break;
  }
  s.view.data = s.data.data();
  s.view.scales = s.scales.empty() ? nullptr : s.scales.data();
  return s;
}

}  // namespace cedar::kernels
