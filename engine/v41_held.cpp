#include "engine/v41_held.h"

#include <cstring>
#include <vector>

#include <spdlog/spdlog.h>

#include "engine/checkpoint_index.h"
#include "kernels/thread_pool.h"
#include "kernels/weight_quantize.h"

namespace cedar {

kernels::WeightType HeldTypeOf(const std::string& name, DType stored, const std::vector<int64_t>& scale_shape, int64_t rows,
                               int64_t cols, WeightPrecision p) {
  using kernels::WeightType;
  if (p == WeightPrecision::kF32) return WeightType::kF32;
  // The routers as released (BF16): the file's values, held so in every other mode and never
  // quantised (the expert choice is the one place a small weight error changes which weights run).
  if (IsReleasedRouter(name)) return stored == DType::BF16 ? WeightType::kBF16 : WeightType::kF32;
  if (!IsMatmulTensor(name)) return WeightType::kF32;
  if (p == WeightPrecision::kBF16) return WeightType::kBF16;
  if (p == WeightPrecision::kI8) return WeightType::kI8;
  if (stored == DType::BF16) return WeightType::kBF16;
  if (stored == DType::I8 || stored == DType::U8) return cols % 32 == 0 ? WeightType::kFP4 : WeightType::kF32;
  if (stored == DType::F8_E4M3) {
    if (scale_shape.size() == 2 && scale_shape[0] == (rows + 31) / 32 && scale_shape[1] == (cols + 31) / 32) return WeightType::kFP8;
    std::string grid;
    for (int64_t n : scale_shape) grid += (grid.empty() ? "" : ", ") + std::to_string(n);
    spdlog::debug("{}: FP8 scale grid [{}] is not 32x32 blocks of [{}, {}]: dequantised to F32", name, grid, rows, cols);
  }
  return WeightType::kF32;
}

bool IsReleasedRouter(const std::string& name) {
  static const std::string kSuffix = "ffn.gate.weight";
  return name.size() >= kSuffix.size() && name.compare(name.size() - kSuffix.size(), kSuffix.size(), kSuffix) == 0;
}

kernels::WeightType HeldType(const Checkpoint& ck, const std::string& name, int64_t rows, int64_t cols, WeightPrecision p) {
  if (p == WeightPrecision::kF32 || (!IsMatmulTensor(name) && !IsReleasedRouter(name))) return kernels::WeightType::kF32;
  const TensorInfo& t = ck.Get(name);
  std::vector<int64_t> scale_shape;
  if (t.dtype == DType::F8_E4M3 && p == WeightPrecision::kAsStored)
    scale_shape = ck.Get(name.substr(0, name.size() - 7) + ".scale").shape;
  return HeldTypeOf(name, t.dtype, scale_shape, rows, cols, p);
}

int64_t HeldBytes(kernels::WeightType t, int64_t rows, int64_t cols) {
  using kernels::WeightType;
  auto al = [](int64_t b) { return (b + 63) / 64 * 64; };
  const int64_t nb = (cols + 31) / 32;
  switch (t) {
    case WeightType::kBF16: return al(rows * cols * 2);
    case WeightType::kI8: return al(rows * cols) + al(rows * nb * 2);
    case WeightType::kFP8: return al(rows * cols) + al((rows + 31) / 32 * nb);
    case WeightType::kFP4: return al(rows * cols / 2) + al(rows * nb);
    default: return al(rows * cols * int64_t(sizeof(float)));
  }
}

void HoldConverted(std::span<const float> f, Weight* w, const std::function<void*(size_t bytes)>& alloc) {
  const kernels::QuantizedBytes bytes = kernels::QuantizedBytesOf(w->rows, w->cols, w->type);
  void* d = alloc(bytes.data);
  void* s = bytes.scales ? alloc(bytes.scales) : nullptr;
  kernels::QuantizeWeightInto(f, w->rows, w->cols, w->type, d, s);
  w->stored = d;
  w->scales = s;
}

void HoldWeight(const Checkpoint& ck, const std::string& name, kernels::WeightType held, Weight* w,
                const std::function<void*(size_t bytes)>& alloc) {
  using kernels::WeightType;
  const int64_t rows = w->rows, cols = w->cols, n = rows * cols;
  w->type = held;
  if (held == WeightType::kF32) {
    auto* f = static_cast<float*>(alloc(size_t(n) * sizeof(float)));
    ck.DequantizeWeightInto(name, f);
    w->data = f;
    return;
  }
  const TensorInfo& src = ck.Get(name);
  if (held == WeightType::kBF16 && src.dtype == DType::BF16) {
    auto* b = static_cast<uint16_t*>(alloc(size_t(n) * 2));
    kernels::ParallelCopy(b, src.data, size_t(n) * 2);
    w->stored = b;
  } else if (held == WeightType::kBF16 || held == WeightType::kI8) {
    HoldConverted(ck.DequantizeWeight(name), w, alloc);  // one tensor's transient F32 copy
  } else {  // FP8 (E4M3 + [ceil(rows/32), ceil(cols/32)] E8M0) or FP4 (packed + [rows, cols/32] E8M0)
    const TensorInfo& sc = ck.Get(name.substr(0, name.size() - 7) + ".scale");
    void* d = alloc(src.nbytes);
    void* s = alloc(sc.nbytes);
    kernels::ParallelCopy(d, src.data, src.nbytes);
    kernels::ParallelCopy(s, sc.data, sc.nbytes);
    w->stored = d;
    w->scales = s;
  }
}

}  // namespace cedar
