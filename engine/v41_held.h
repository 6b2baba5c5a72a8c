// How a released tensor is held in memory under `--weights` (issue 20): its type, its bytes, and
// the conversion that fills a Weight. One implementation for the loader's arena (engine/v41_load.cpp)
// and the on-demand experts (engine/expert_cache.cpp), so an expert read on demand holds the same
// bytes the resident expert would: the forward is bit-identical whichever way an expert arrived.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "engine/model.h"
#include "engine/safetensors.h"
#include "kernels/weight_view.h"

namespace cedar {

class Checkpoint;

// The type a released tensor is held in: matmul weights (IsMatmulTensor, Engram's wkv included)
// converted (bf16, int8) or kept as released (as-stored: FP8 with 32x32 blocks, packed FP4 with
// E8M0 per 32, BF16); the routers (ffn.gate.weight, BF16 as released) BF16 in every mode but f32;
// everything else, and FP8 with other block shapes, dequantised to F32.
kernels::WeightType HeldType(const Checkpoint& ck, const std::string& name, int64_t rows, int64_t cols, WeightPrecision p);
// The same rule from what the file would say: `stored` the tensor's dtype, `scale_shape` its
// `.scale` tensor's shape (FP8 only; empty otherwise). `cedar info --config ... --weights W`
// applies it to the config's tensor list (engine/v41_info.h ComputeV41Held), with no checkpoint.
kernels::WeightType HeldTypeOf(const std::string& name, DType stored, const std::vector<int64_t>& scale_shape, int64_t rows,
                               int64_t cols, WeightPrecision p);
// A router's weight (`layers.N.ffn.gate.weight`, `mtp.S.ffn.gate.weight`).
bool IsReleasedRouter(const std::string& name);
// Bytes of a tensor [rows, cols] held as `t`, each part (elements, scales) rounded up to 64 bytes
// (the arena's alignment).
int64_t HeldBytes(kernels::WeightType t, int64_t rows, int64_t cols);
// Fills `w` (rows and cols already set) with tensor `name` held as `held`: F32 dequantised, BF16
// (released BF16 bits copied, else the F32 values rounded), INT8 (kernels::QuantizeI8 of the F32
// values), FP8 / FP4 (the released bytes and scales copied). Each part comes from alloc(bytes).
void HoldWeight(const Checkpoint& ck, const std::string& name, kernels::WeightType held, Weight* w,
                const std::function<void*(size_t bytes)>& alloc);
// Fills `w` (rows, cols and type set) with f ([rows, cols] F32) converted to w->type
// (kernels::QuantizeWeightInto, on the pool); the elements and scales come from alloc(bytes).
// Shared by HoldWeight and the Cedar-layout loader's --weights conversions (model_precision.cpp).
void HoldConverted(std::span<const float> f, Weight* w, const std::function<void*(size_t bytes)>& alloc);

}  // namespace cedar
