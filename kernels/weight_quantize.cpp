#include "kernels/weight_quantize.h"

#include <cstring>
#include <stdexcept>

#include "kernels/quant_formats.h"

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
      QuantFp8Blocks(w.data(), rows, cols, 32, 32, s.data.data(), s.scales.data());
      break;
    case WeightType::kFP4:
      s.data.resize(w.size() / 2);
      s.scales.resize(size_t(rows * nb));
      QuantFp4Packed(w.data(), rows, cols, 32, s.data.data(), s.scales.data());
      break;
  }
  s.view.data = s.data.data();
  s.view.scales = s.scales.empty() ? nullptr : s.scales.data();
  return s;
}

}  // namespace cedar::kernels
