// The released DeepSeek-V4.1-Flash number formats, scalar and small: decoding tables,
// encoders with the released rounding rules, and the block layouts of the checkpoint.
// Sources for every rule are in docs/v41-contract.md ("Number formats").
//
//  FP8 E4M3 (the "fn" variant): 1 sign, 4 exponent (bias 7), 3 mantissa bits; no infinities,
//    0x7F/0xFF are NaN, largest finite 448, subnormals below 2^-6 in steps of 2^-9.
//  FP4 E2M1: 1 sign, 2 exponent (bias 1), 1 mantissa bit: 0, 0.5, 1, 1.5, 2, 3, 4, 6 and negatives.
//  E8M0 / UE8M0: an unsigned power-of-two exponent byte, 2^(e-127); 0xFF is NaN.
#pragma once
#include <cstddef>
#include <cstdint>

namespace cedar::kernels {

constexpr float kE4M3Max = 448.0f;
constexpr float kE2M1Max = 6.0f;

float DecodeE4M3(uint8_t code);  // NaN for 0x7F, 0xFF
float DecodeE2M1(uint8_t nibble);  // low 4 bits used; code 8 is -0
float DecodeE8M0(uint8_t code);    // 2^(code-127); NaN for 0xFF; code 0 is 2^-127 (a subnormal float)
const float* E8m0Floats();  // DecodeE8M0 of every code, built once (the kernels' scale table)

// Round to nearest, ties to even, saturating to +-448 (the released kernels clamp to the format's
// range before the cast, so nothing becomes NaN). NaN in gives 0x7F.
uint8_t EncodeE4M3(float x);
// Round to nearest, ties to even, saturating to +-6 (PTX cvt.rn.satfinite.e2m1x2). NaN gives 0x7.
uint8_t EncodeE2M1(float x);

// The released power-of-two block scale: 2^ceil(log2(amax * inv_max)) computed on the float bits
// (fast_log2_ceil: exponent - 127, plus one if any mantissa bit is set), returned as the E8M0 byte.
// amax is clamped below to `amax_floor` first (the released act_quant uses 1e-4). inv_max is
// 1/448 for FP8 and 1/6 for FP4, as the float the kernels multiply by.
uint8_t Ue8m0ScaleFor(float amax, float inv_max, float amax_floor = 1e-4f);

// FP8 weight with 2-D block scales: w [rows, cols] E4M3 bytes, scales [ceil(rows/br), ceil(cols/bc)]
// E8M0 bytes; out[r, c] = E4M3(w[r, c]) * 2^(s[r/br, c/bc] - 127). The released dense weights
// use br = bc = 32 (quantization_config.weight_block_size).
void DequantFp8Blocks(const uint8_t* w, const uint8_t* scales, int64_t rows, int64_t cols, int br, int bc, float* out);
// The inverse with the released scale choice per block (2^ceil(log2(amax/448)), floor 1e-4).
void QuantFp8Blocks(const float* x, int64_t rows, int64_t cols, int br, int bc, uint8_t* w, uint8_t* scales);

// Packed FP4: x [rows, cols/2] bytes, element 2k in the LOW nibble and 2k+1 in the high nibble;
// scales [rows, cols/block] E8M0 (block 32 for the released experts).
void DequantFp4Packed(const uint8_t* packed, const uint8_t* scales, int64_t rows, int64_t cols, int block, float* out);
// The inverse with the released MXFP4 scale choice per block (2^ceil(log2(amax/6)), floor 1e-4).
void QuantFp4Packed(const float* x, int64_t rows, int64_t cols, int block, uint8_t* packed, uint8_t* scales);

}  // namespace cedar::kernels
