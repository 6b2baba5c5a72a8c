// Shared by the fast CPU kernels' files (not part of the kernels' interface).
#pragma once

#include <cstddef>
#include <cstdint>
#include <new>
#include <vector>

#include "kernels/ops.h"

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace cedar::kernels::internal {

#if defined(__AVX512F__)
// 16 bfloat16s (bits) as floats, each widened by a 16-bit shift (exact): BF16 weights, and INT8's
// bfloat16 block scales.
inline __m512 Bf16x16ToFloats(__m256i h) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); }
#endif

class PackedRows;  // gemm_prefill.h

// The first 64-byte aligned float of buf, grown to hold `floats` from there. Packed tiles are read
// a vector at a time, and a buffer only 16-byte aligned (what malloc gives) splits every other
// load across two cache lines.
inline float* Aligned64(std::vector<float>& buf, size_t floats) {
  buf.resize(floats + 16);
  return buf.data() + ((64 - reinterpret_cast<uintptr_t>(buf.data()) % 64) % 64) / sizeof(float);
}

// BLAS runs single-threaded; parallelism comes from our pool (see thread_pool.h). Idempotent.
void EnsureBlasSingleThreaded();

// GCC's _mm512_reduce_add_ps order over a[0..16): the lane-16 order's add tree (gemm_rowinv.h).
inline float Reduce16(const float* a) {
  float t[8], u[4];
  for (int i = 0; i < 8; ++i) t[i] = a[i] + a[i + 8];
  for (int i = 0; i < 4; ++i) u[i] = t[i] + t[i + 4];
  return (u[0] + u[2]) + (u[1] + u[3]);
}

// One output in the lane-16 order (gemm_rowinv.h; ref::DotLane16's bits) as 16 independent FMA
// chains the compiler vectorises: the kernels' plain loops (builds without AVX2 and FMA, on CPUs
// without them or with CEDAR_NO_AVX2 set: kernels/avx2_runtime.h).
inline float DotLane16Simd(const float* w, const float* x, int in) {
  const int in16 = in / 16 * 16;
  float acc[16] = {};
  for (int k0 = 0; k0 < in16; k0 += 16) {
#pragma omp simd
    for (int j = 0; j < 16; ++j) acc[j] = __builtin_fmaf(w[k0 + j], x[k0 + j], acc[j]);
  }
  if (in16 < in)  // the last block zero-padded, as the definition pads K to a multiple of 16
    for (int j = 0; j < 16; ++j) {
      const bool in_row = in16 + j < in;
      acc[j] = __builtin_fmaf(in_row ? w[in16 + j] : 0.0f, in_row ? x[in16 + j] : 0.0f, acc[j]);
    }
  return Reduce16(acc);
}

// y[r] = w[r, :] . x for r in [0, rows): the one-row product (decode). Every ISA sums each output
// in the lane-16 order (gemm_rowinv.h), so it equals the same row inside a many-row product;
// OpenBLAS's sgemv does not (and takes a lock per call, which two threads slicing a layer's
// products contended on: ~4% of decode). Its weights are read once, so the SIMD paths prefetch
// them non-temporally.
void MatVec(const float* w, const float* x, float* y, int rows, int in);

// Products of x with at most this many rows run on MatmulFewRows, not sgemm.
constexpr int kFewRowsMax = 16;

// y[b * y_stride + r] = x[b, :] . w[r, :] for b < n, r < rows (x: [n, in], w: [rows, in]):
// batched decode's products, each weight read once for all n rows; each output summed in the
// order MatVec uses, so a batched row equals the same row alone bit for bit.
void MatmulFewRows(const float* x, const float* w, float* y, int n, int in, int rows, int y_stride);

// Columns [col0, col1) of one product with beta = 0, on the calling thread: MatVec for one
// row, MatmulFewRows up to kFewRowsMax rows, sgemm above.
void MatmulColumns(const MatmulJob& j, int col0, int col1);

// The typed-weight products (matmul_quant.cpp): y[b * ys + (r - r0)] = x[b, :] . w[r, :] for
// b < n <= kFewRowsMax, r in [r0, r1), weights decoded in registers, row invariant; rows
// [r0, r0 + n) decoded to F32 (out[n, cols]); a typed job's columns (few rows, or panels + sgemm).
void QuantFewRows(const float* x, int n, const WeightView& w, int64_t r0, int64_t r1, float* y, int64_t ys);
void QuantDecodeRows(const WeightView& w, int64_t r0, int64_t n, float* out);
// px (optional): j.x packed once for the product (gemm_prefill.h PackedRows); many-row panels
// then read it instead of packing x again for every panel.
void MatmulColumnsTyped(const MatmulJob& j, int col0, int col1, const PackedRows* px = nullptr);
// Weight rows per decoded panel of a typed many-row product with `in` columns (~4 MiB of F32).
int64_t TypedPanelRows(int in);

// INT8 and FP4 weights times 8-bit activations (matmul_i8a8.cpp): whether w's few-row products take
// that path (INT8 or FP4, cols a multiple of 32, SetInt8Activations on), and QuantFewRows on it.
bool Int8ActivationsApply(const WeightView& w);
void I8A8FewRows(const float* x, int n, const WeightView& w, int64_t r0, int64_t r1, float* y, int64_t ys);
// A vector whose elements start on a 64-byte cache line: the kernels load 64 bytes at a time
// from it, and a load that spans two lines costs ~1.3x (docs/WEIGHTS.md, session 25).
template <class T>
struct Line64Allocator {
  using value_type = T;
  Line64Allocator() = default;
  template <class U>
  Line64Allocator(const Line64Allocator<U>&) {}
  T* allocate(size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t(64))); }
  void deallocate(T* p, size_t) { ::operator delete(p, std::align_val_t(64)); }
  template <class U>
  bool operator==(const Line64Allocator<U>&) const { return true; }
};
template <class T>
using LineVector = std::vector<T, Line64Allocator<T>>;

// FP8 few-row products on x times 2^120 (matmul_quant.cpp, DecFp8X: the same bits, no multiply per
// weight): whether w's products take it (FP8, AVX2 running in a build without AVX-512,
// SetFp8PrescaledActivations on, no BF16 activations); x[0, count) times 2^120 into out, false
// where some |x| >= 2^8 or is NaN (the product then keeps QuantFewRows); the products on that copy.
// MatmulMany makes the copy once per product, for all of its slices.
bool Fp8PrescaleApplies(const WeightView& w);
bool XTimes2p120(const float* x, int64_t count, LineVector<float>& out);
void Fp8XFewRows(const float* xs, int n, const WeightView& w, int64_t r0, int64_t r1, float* y, int64_t ys);

// Rows of x quantised for that path: RunMatmulJobs quantises a product's x once, not once per
// column slice (a batched-decode product has up to 4 slices per thread). The arrays the kernels
// load 64 bytes at a time from start on a cache line (LineVector).
struct I8A8Rows {
  struct Row {
    LineVector<uint8_t> absq;   // [pairs * 64] |q|, zero padded to whole pairs of blocks
    std::vector<uint64_t> neg;  // [pairs] bit j: element 64 p + j is negative
    LineVector<float> sa16;     // [pairs * 16] s_a of block 2p (lanes 0-7) and 2p + 1 (8-15)
    LineVector<int8_t> sq;      // [pairs * 64] q itself (the AVX2 path's vpsignb; not filled on VNNI builds)
    // Rows quantised for FP4 weights (QuantiseRows' fp4) also hold x in the order FP4's unpacked
    // nibbles come in. AVX2 builds: absq4 and sq4 with each pair's 64 bytes as [2p: 0-15,
    // 2p+1: 0-15, 2p: 16-31, 2p+1: 16-31]. VNNI builds, per group of 4 blocks g (4g..4g+3, whole
    // groups only): absq4 [groups * 128] = u: blocks 4g..4g+3 elements 0-15, then v: their
    // elements 16-31; neg4 [groups * 2] u's and v's sign bits (bit j: byte j). Both: s_a as
    // [pairs * 8]: block 2p (lanes 0-3), 2p + 1 (4-7).
    LineVector<uint8_t> absq4;
    LineVector<int8_t> sq4;
    std::vector<uint64_t> neg4;
    LineVector<float> sa8;
  };
  std::vector<Row> rows;  // [n] (grown, never shrunk: reused across products)
};
// fp4: the rows are for FP4 weights (AVX2 builds also fill the Row's FP4-order arrays).
void QuantiseRows(const float* x, int n, int64_t in, I8A8Rows& q, bool fp4);
void I8A8Quantised(const I8A8Rows& q, int n, const WeightView& w, int64_t r0, int64_t r1, float* y, int64_t ys);

// FP8, FP4 and INT8 weights times BF16 activations (matmul_bf16a.cpp): whether w's few-row products
// take that path (FP8 or FP4, also where 8-bit activations are on; INT8 where they are not; cols a multiple of 64;
// SetBf16Activations on), rows of x converted once for it (Bf16Rows: each row's words in the
// order the kernel for that weight type reads, on a cache line), and the products on converted
// rows (or on x, converting it first).
bool Bf16ActivationsApply(const WeightView& w);
struct Bf16Rows {
  std::vector<LineVector<uint16_t>> rows;  // [n][in rounded up to a step] (grown, never shrunk: reused)
  WeightType type = WeightType::kFP8;      // whose step order the words are in (FP8 and INT8 pairs, FP4 quads)
};
void ConvertRowsBf16(const float* x, int n, int64_t in, WeightType type, Bf16Rows& rows);
void Bf16AConverted(const Bf16Rows& rows, int n, const WeightView& w, int64_t r0, int64_t r1, float* y, int64_t ys);
void Bf16AFewRows(const float* x, int n, const WeightView& w, int64_t r0, int64_t r1, float* y, int64_t ys);

// True for a job RunMatmulJobs runs on GemmPrefillRows (gemm_prefill.h) in blocks of rows:
// F32 weights, more than kFewRowsMax rows, row-invariant mode off, the AVX2 kernel compiled in.
bool PrefillRowsJob(const MatmulJob& j);

// MatmulMany without the work counters (Matmul counts its own calls); returns the FLOPs.
double RunMatmulJobs(const MatmulJob* jobs, int n_jobs);

// The 16 lanes of the 8-bit- and BF16-activation kernels summed in one fixed order (their
// scalar references and vector paths both end with it): HSum8(a[0..7] + a[8..15]),
// HSum8 = ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7)).
inline float HSum16(const float a[16]) {
  float h[8];
  for (int i = 0; i < 8; ++i) h[i] = a[i] + a[8 + i];
  return ((h[0] + h[4]) + (h[2] + h[6])) + ((h[1] + h[5]) + (h[3] + h[7]));
}

// e^x for x <= 0 (larger x is not used by the callers), in a form the compiler vectorises:
// Cody-Waite range reduction and Cephes' degree-6 polynomial, ~1 ulp; x < -87 is clamped to
// e^-87 (~1.6e-38: negligible next to the row maximum's 1). std::exp does not vectorise
// without -ffast-math and the attention softmax calls it once per (row, head, entry).
inline float ExpNonPositive(float x) {
  x = x < -87.0f ? -87.0f : x;
  const float n = __builtin_floorf(x * 1.44269504088896341f + 0.5f);
  const float r = x - n * 0.693359375f + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const int bits = (int(n) + 127) << 23;
  float scale;
  __builtin_memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

}  // namespace cedar::kernels::internal
