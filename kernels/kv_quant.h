// The row formats DeepSeek-V4.1 stores its KV in (docs/v41-contract.md §3, "KV as released"):
// quantise-dequantise of rows (what the released forward does before anything reads them), and the
// stored bytes of a row. Scalar and bit-exact; the cost is a few operations per value, small next
// to the matmul that produced the row, so there is no separate fast path.
//
// A row of n values is cut into blocks of B channels, each with one scale:
//   kFp8Ue8m0  (window entries)  B = 32: E4M3 codes, UE8M0 scale 2^ceil(log2(max(amax,1e-4)*f32(1/448)))
//   kFp4E4m3   (main entries)    B = 16: E2M1 codes, E4M3 scale E4M3_RNE_sat(f32(max(amax,6*2^-9)/6))
//   kMxfp4     (index K and Q)   B = 32: E2M1 codes, UE8M0 scale 2^ceil(log2(max(amax,6*2^-126)*f32(1/6)))
// Codes are x / scale clamped to the format's range and rounded to nearest, ties to even.
// Stored row: the codes (E4M3 one per byte; E2M1 two per byte, element 2k in the low nibble), then
// the n/B scale bytes.
#pragma once
#include <cstddef>
#include <cstdint>

namespace cedar::kernels {

enum class KvRowFormat { kFp8Ue8m0, kFp4E4m3, kMxfp4 };

// Channels per scale block: 32, 16, 32.
int KvBlock(KvRowFormat f);
// Stored bytes of one row of n values (n a multiple of KvBlock): n + n/32, n/2 + n/16, n/2 + n/32.
size_t KvRowBytes(KvRowFormat f, int n);
const char* KvFormatName(KvRowFormat f);

// x [rows, n] <- the released quantise-dequantise of each row (decode(code) * scale, exact in F32).
// Throws std::invalid_argument when n is not a multiple of the block.
void QdqKvRows(KvRowFormat f, float* x, int64_t rows, int n);

// The stored form of raw values with the released scale rule: out [KvRowBytes(f, n)].
void EncodeKvRow(KvRowFormat f, const float* x, int n, uint8_t* out);
// Values of a stored row: out [n]; equals QdqKvRows of the raw values EncodeKvRow was given.
void DecodeKvRow(KvRowFormat f, const uint8_t* in, int n, float* out);
// Bytes for a row that is already rounded (a QdqKvRows result): a scale and codes per block that
// decode to exactly these float bits (the released rule is tried first; re-deriving a scale from
// rounded values can land one step off, so other scales are searched when it does). Returns false
// when no representation exists, i.e. the values were not a row of this format.
bool EncodeRoundedKvRow(KvRowFormat f, const float* x, int n, uint8_t* out);

}  // namespace cedar::kernels
