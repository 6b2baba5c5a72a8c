// `--weights`: the precision a model's matmul weights are held in (issue 20). Its own header so
// that engine/engram.h, which engine/model.h includes, can take it too.
#pragma once
#include <string>

namespace cedar {

// The precision of the matmul weights in memory (`--weights`). Embeddings, norms and the mHC mixes
// stay F32 in every mode, and so do the routers of a Cedar-layout model; a released checkpoint's
// routers (BF16 in the file) are held as BF16 in every mode but f32, never quantised
// (engine/v41_held.h).
enum class WeightPrecision {
  kF32,       // today's behaviour: F32 copied, BF16 converted to F32
  kBF16,      // BF16 kept, F32 rounded to BF16 (nearest even)
  kI8,        // symmetric INT8 with one bfloat16 scale per 32 inputs (kernels::QuantizeI8)
  kAsStored,  // as in the file: F32 stays F32, BF16 stays BF16, the released FP8/FP4 stay FP8/FP4
  // The released checkpoint's precisions, converted at load (Cedar-layout files; a released-layout
  // model already holds them: as-stored): routed experts FP4 E2M1 with an E8M0 scale per 32
  // inputs, the head BF16, every other matmul weight FP8 E4M3 with 32x32 E8M0 blocks. What those
  // formats cost on a trained model (docs/WEIGHTS.md).
  kFp8Fp4,
};
const char* WeightPrecisionName(WeightPrecision p);  // "f32", "bf16", "int8", "as-stored", "fp8-fp4"
// Parses a `--weights` value; throws std::invalid_argument naming the accepted values.
WeightPrecision ParseWeightPrecision(const std::string& s);

}  // namespace cedar
