// HSum16 (cpu_internal.h) of 16 rows' accumulators at once, for the few-row products that end
// every output row with it: one halving butterfly over the 16 vectors (a[i] + a[i + 8], then
// + [i + 4], + [i + 2], + [i + 1]) is HSum16's own pairing, so every sum has the bits of HSum16 on
// that row alone, for ~3 instructions a row where a store and 15 scalar adds were ~20.
// Measured (session 29, medium's shapes, weights in cache, one thread): two rows of x FP8 54 -> 63
// GB/s, FP4 42.5 -> 53.5; eight rows FP8 97-99 -> 115-117, FP4 61 -> 73 (row-bytes); one row FP8
// 58.5 -> 65, FP4 41 -> 49.5. One-row products (decode) still end each row alone (HSum16Row):
// in `cedar bench` medium fp8-fp4 decode, tokens alternating in one process, the batched sums
// were 1.0-1.5% slower (3 runs, against a null toggle's +0.5%): decode streams from memory,
// and holding the rows bought nothing there. Batch 8 decode was unchanged either way.
#pragma once

#if defined(__AVX512F__)
#include <immintrin.h>

#include "kernels/cpu_internal.h"

namespace cedar::kernels::internal {

// GCC's plain forms pass an undefined vector as the merge source, which -Wmaybe-uninitialized
// reports once inlined; an all-ones mask over a defined source is the same instruction.
template <int kImm>
inline __m512 ShuffleQuarters(__m512 a, __m512 b) { return _mm512_mask_shuffle_f32x4(a, 0xFFFF, a, b, kImm); }

// HSum16 of one row's lanes.
inline float HSum16Row(__m512 a) {
  alignas(64) float v[16];
  _mm512_store_ps(v, a);
  return HSum16(v);
}

// out[j] = HSum16(a[j]) for j < 16; a: [16 rows][16 lanes], 64-byte aligned.
inline void HSum16Rows(const float (*a)[16], float* out) {
  __m512 v1[8], v2[4], v3[2];
  for (int j = 0; j < 8; ++j) {  // quarters [A.b0-3, A.b4-7, B.b0-3, B.b4-7], b_i = a_i + a_{i+8}
    const __m512 A = _mm512_load_ps(a[2 * j]), B = _mm512_load_ps(a[2 * j + 1]);
    v1[j] = _mm512_add_ps(ShuffleQuarters<0x44>(A, B), ShuffleQuarters<0xEE>(A, B));
  }
  for (int j = 0; j < 4; ++j)  // quarter k = row 4j + k's c0-3, c_i = b_i + b_{i+4}
    v2[j] = _mm512_add_ps(ShuffleQuarters<0x88>(v1[2 * j], v1[2 * j + 1]), ShuffleQuarters<0xDD>(v1[2 * j], v1[2 * j + 1]));
  for (int j = 0; j < 2; ++j)  // quarter k = rows 8j + k and 8j + 4 + k, each d0, d1 (d_i = c_i + c_{i+2})
    v3[j] = _mm512_add_ps(_mm512_shuffle_ps(v2[2 * j], v2[2 * j + 1], 0x44), _mm512_shuffle_ps(v2[2 * j], v2[2 * j + 1], 0xEE));
  // lane 4k + m = row 4m + k's d0 + d1
  const __m512 r = _mm512_add_ps(_mm512_shuffle_ps(v3[0], v3[1], 0x88), _mm512_shuffle_ps(v3[0], v3[1], 0xDD));
  const __m512i to_rows = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  _mm512_storeu_ps(out, _mm512_mask_permutexvar_ps(r, 0xFFFF, to_rows, r));
}

// A kernel's finished rows: Add(acc, dst) holds a row's 16 lanes until 16 rows are held, then
// writes each row's HSum16 to its dst; Flush() at the end writes the rest.
class RowSums16 {
 public:
  void Add(__m512 acc, float* dst) {
    if (n_ == 16) Flush();
    _mm512_store_ps(rows_[n_], acc);
    dst_[n_++] = dst;
  }
  void Flush() {
    if (n_ == 0) return;
    for (int j = n_; j < 16; ++j) _mm512_store_ps(rows_[j], _mm512_setzero_ps());
    alignas(64) float sums[16];
    HSum16Rows(rows_, sums);
    for (int j = 0; j < n_; ++j) *dst_[j] = sums[j];
    n_ = 0;
  }

 private:
  alignas(64) float rows_[16][16];  // [row, lane]
  float* dst_[16];
  int n_ = 0;
};

}  // namespace cedar::kernels::internal

#endif
