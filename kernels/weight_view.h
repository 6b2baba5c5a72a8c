// A weight matrix in the precision it is stored in (issue 20): F32, BF16, INT8 with one bfloat16
// scale per block of 32 along the input dimension, the released FP8 E4M3 with 2-D E8M0 block scales, or
// the released packed FP4 E2M1 with one E8M0 scale per 32. Activations and outputs stay F32.
// The products decode each weight in registers on the way to the FMA (kernels/matmul_quant.cpp),
// so decode streams only the stored bytes. Row-major [rows = out, cols = in] like Matmul's w.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace cedar::kernels {

enum class WeightType : uint8_t {
  kF32,   // float [rows, cols]
  kBF16,  // uint16 bfloat16 bits [rows, cols]
  kI8,    // int8 [rows, cols] + bfloat16 scales [rows, ceil(cols / 32)]: w = q * scale, symmetric
  kFP8,   // E4M3 bytes [rows, cols] + E8M0 scales [ceil(rows / 32), ceil(cols / 32)] (32x32 blocks)
  kFP4,   // packed E2M1 [rows, cols / 2] (element 2k in the low nibble) + E8M0 scales [rows, ceil(cols / 32)]
};

constexpr int kQuantBlock = 32;  // elements per scale along the input dimension (I8, FP8, FP4)

const char* WeightTypeName(WeightType t);  // "f32", "bf16", "int8", "fp8", "fp4"
// Bytes one row of `cols` weights occupies, scales included (FP8: its share of the 2-D scales).
double WeightRowBytes(WeightType t, int64_t cols);

struct WeightView {
  WeightType type = WeightType::kF32;
  const void* data = nullptr;    // the elements, layout per type above
  const void* scales = nullptr;  // I8: bfloat16 bits; FP8/FP4: E8M0 bytes; F32/BF16: unused
  int64_t rows = 0, cols = 0;
  int64_t row0 = 0;  // FP8 only: the first row's index in the full tensor (its scales are per 32 rows)

  // Rows [r, r + n) of this view (FP8 keeps the whole scale grid and moves row0).
  WeightView Rows(int64_t r, int64_t n) const;
};

// y[n, rows] = x[n, cols] * w^T. F32 views run Matmul (bit for bit); the others decode in
// registers: one row of x reads each weight byte once (decode), up to kFewRowsMax rows of x
// share each decoded weight and every row is summed in the order one row alone is (batched
// decode == decode, bit for bit), more rows decode a panel of weights to F32 once and run sgemm.
void MatmulW(const float* x, const WeightView& w, float* y, int n);
// Whether this process's products with weights of type t load each weight times a power of two
// above 1 and undo it once per output (INT8 x 2^24 where AVX2 runs without AVX-512; never under
// CEDAR_NO_AVX2=1 or without AVX2). That gives the documented order's bits unless a product w x is
// subnormal (|w x| < 2^-126), where the scaled product keeps bits the unscaled one loses, or |x| is
// beyond ~2^96, where it overflows (kernels/matmul_quant.cpp, DecI8).
bool ProductsScaleWeights(WeightType t);

// ---- Conversion (load time, `--weights`, `cedar init --dtype`) ----
// Round to nearest even; NaN stays NaN.
uint16_t FloatToBf16(float x);
inline float Bf16ToFloat(uint16_t b) {
  const uint32_t u = uint32_t(b) << 16;
  float f;
  __builtin_memcpy(&f, &u, 4);
  return f;
}
// INT8's scale i of a scale array (bfloat16 bits) as a float.
inline float I8ScaleAt(const void* scales, int64_t i) { return Bf16ToFloat(static_cast<const uint16_t*>(scales)[i]); }
// Symmetric INT8 per block of 32 along cols: scale = amax / 127 rounded to the nearest bfloat16
// (0 for an all-zero block), q = round-to-nearest(w / scale). The rounding moves the scale by at
// most 2^-9 of itself, so |w / scale| <= 127 * (1 + 2^-8) < 127.5 and |q| <= 127 unclamped, and
// every element stays within half a scale. Two bytes of scale a block instead of an F32's four:
// 6% fewer bytes a weight (common 8-bit CPU formats keep an F16 scale; bfloat16 keeps F32's range).
// q: [rows, cols], scales: [rows, ceil(cols/32)] bfloat16 bits.
void QuantizeI8(const float* w, int64_t rows, int64_t cols, int8_t* q, uint16_t* scales);
// The element (r, c) of a view as F32 (scalar; the references and tests use it).
float WeightAt(const WeightView& w, int64_t r, int64_t c);
// Rows [r0, r0 + n) of w as F32 into out[n, cols] (the many-row panels; scalar-exact).
void DecodeRows(const WeightView& w, int64_t r0, int64_t n, float* out);

namespace ref {
// Plain loops over WeightAt, double accumulation.
void MatmulW(const float* x, const WeightView& w, float* y, int n);
// INT8 or FP4 weights (cols a multiple of 32) times x quantised to 8 bits per block of 32, in the
// order kernels/matmul_i8a8.cpp defines (SetInt8Activations' products equal it bit for bit).
void MatmulI8A8(const float* x, const WeightView& w, float* y, int n);
// FP8 or FP4 weights (cols a multiple of 64) times x rounded to bf16, in the order
// kernels/matmul_bf16a.cpp defines (SetBf16Activations' products equal it bit for bit).
void MatmulBf16A(const float* x, const WeightView& w, float* y, int n);
}  // namespace ref

}  // namespace cedar::kernels
