// The AVX2 pieces of the lane-16 order (kernels/gemm_rowinv.h) that MatVec and the few-row
// kernel share, so their bits cannot drift apart: the masks that load a row's last in % 16
// elements as zero-padded lanes, and the 16 lanes' sum in _mm512_reduce_add_ps's order.
#pragma once
#include "kernels/avx2_runtime.h"
#if defined(CEDAR_AVX2_KERNELS)

namespace cedar::kernels::internal {
CEDAR_AVX2_BEGIN

// Lanes [0, rem) of the first 8 (m0) and [8, rem) of the next 8 (m1), for maskload.
inline void Lane16TailMasks(int rem, __m256i* m0, __m256i* m1) {
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  *m0 = _mm256_cmpgt_epi32(_mm256_set1_epi32(rem), lane);
  *m1 = _mm256_cmpgt_epi32(_mm256_set1_epi32(rem - 8), lane);
}

// The sum of 16 lanes held as lo (0-7) and hi (8-15).
inline float Lane16Sum(__m256 lo, __m256 hi) {
  const __m256 t = _mm256_add_ps(lo, hi);
  const __m128 u = _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
  const __m128 v = _mm_add_ps(u, _mm_shuffle_ps(u, u, _MM_SHUFFLE(1, 0, 3, 2)));
  return _mm_cvtss_f32(_mm_add_ss(v, _mm_shuffle_ps(v, v, 1)));
}

CEDAR_AVX2_END
}  // namespace cedar::kernels::internal
#endif
