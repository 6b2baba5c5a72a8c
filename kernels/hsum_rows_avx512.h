// HSum16 (cpu_internal.h) of several rows' accumulators at once, for the few-row products that end
// every output row with it and the row-invariant GEMM's tiles: one halving butterfly over the
// vectors (a[i] + a[i + 8], then + [i + 4], + [i + 2], + [i + 1]) is HSum16's own pairing, so every
// sum has the bits of HSum16 on that row alone, for ~3 instructions a row where a store and 15
// scalar adds were ~20.
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

// HSum16 of four 16-lane accumulators at once, written side by side: out[0..4) = [y(a), y(b),
// y(c), y(d)]. (A masked store of the first 4 lanes: GCC 12's _mm512_castps512_ps128 extracts
// from an undefined vector and warned -Wmaybe-uninitialized at every caller.)
inline void HSum16x4(float* out, __m512 a, __m512 b, __m512 c, __m512 d) {
  // t = lo8 + hi8: tab = [t(a)[0:4], t(a)[4:8], t(b)[0:4], t(b)[4:8]], tcd likewise.
  const __m512 tab = _mm512_add_ps(ShuffleQuarters<0x44>(a, b), ShuffleQuarters<0xEE>(a, b));
  const __m512 tcd = _mm512_add_ps(ShuffleQuarters<0x44>(c, d), ShuffleQuarters<0xEE>(c, d));
  // u = t[0:4] + t[4:8]: one output's u per 128-bit lane, in the order a, b, c, d.
  const __m512 u = _mm512_add_ps(ShuffleQuarters<0x88>(tab, tcd), ShuffleQuarters<0xDD>(tab, tcd));
  // v = [u0 + u2, u1 + u3, ...] per lane, then y = v0 + v1 in each lane's first float.
  const __m512 v = _mm512_add_ps(u, _mm512_mask_permute_ps(u, 0xFFFF, u, _MM_SHUFFLE(1, 0, 3, 2)));
  const __m512 y = _mm512_add_ps(v, _mm512_mask_permute_ps(v, 0xFFFF, v, _MM_SHUFFLE(2, 3, 0, 1)));
  const __m512i firsts = _mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
  _mm512_mask_storeu_ps(out, 0x000F, _mm512_mask_permutexvar_ps(y, 0xFFFF, firsts, y));
}

// out[j] = HSum16(a[j]) for j < 16; a: [16 rows][16 lanes], 64-byte aligned.
inline void HSum16Rows(const float (*a)[16], float* out) {
  for (int q = 0; q < 16; q += 4)
    HSum16x4(out + q, _mm512_load_ps(a[q]), _mm512_load_ps(a[q + 1]), _mm512_load_ps(a[q + 2]), _mm512_load_ps(a[q + 3]));
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
