// A weight converted from F32 into one of the stored types, owning its bytes: what tests and
// benchmarks of the typed products need (the engine converts at load into its arena instead,
// engine/model_precision.cpp).
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "kernels/weight_view.h"

namespace cedar::kernels {

struct OwnedWeight {
  std::vector<uint8_t> data;    // the weight's bytes in view.type's layout
  std::vector<uint8_t> scales;  // its block scales (INT8: bfloat16 per 32 inputs; FP8: E8M0 per 32x32; FP4: E8M0 per 32)
  WeightView view;              // points into data / scales

  OwnedWeight() = default;
  OwnedWeight(OwnedWeight&&) = default;  // the vectors' buffers move: the view stays valid
  OwnedWeight& operator=(OwnedWeight&&) = default;
  OwnedWeight(const OwnedWeight&) = delete;  // a copy would point into the original
  OwnedWeight& operator=(const OwnedWeight&) = delete;
};

// Bytes of a [rows, cols] weight of `type` and of its block scales, in QuantizeWeight's layout.
struct QuantizedBytes {
  size_t data = 0, scales = 0;
};
QuantizedBytes QuantizedBytesOf(int64_t rows, int64_t cols, WeightType type);
// QuantizeWeight into caller memory (QuantizedBytesOf's sizes; scales unused for F32 / BF16), the
// rows split over the thread pool: each part writes its own rows, so the bytes are one thread's.
void QuantizeWeightInto(std::span<const float> w, int64_t rows, int64_t cols, WeightType type, void* data, void* scales);
// w: [rows, cols] row-major F32. INT8 as QuantizeI8, FP8 E4M3 in the released 32x32 blocks,
// FP4 E2M1 packed two per byte with one scale per 32 (REQUIRES: rows * cols even for FP4).
OwnedWeight QuantizeWeight(std::span<const float> w, int64_t rows, int64_t cols, WeightType type);

}  // namespace cedar::kernels
