// The exponential of the AVX2 kernels (attention_row.cpp, attention_tiled.cpp, SwiGLU), one
// definition so all give internal::ExpNonPositive's bits. Internal to kernels/.
#pragma once

#include "kernels/avx2_runtime.h"

// (In a portable build the scalar ExpNonPositive is compiled without FMA, so ExpNonPositive8 does
// not give its bits there: attention's bits differ by ISA, as they already do between builds.)
#if defined(CEDAR_AVX2_KERNELS)
namespace cedar::kernels::internal {

CEDAR_AVX2_BEGIN

// internal::ExpNonPositive on 8 lanes with the operations GCC emits for the scalar function here
// (-O3, FMA contraction): n = floor(fma(x, log2e, 0.5)); r = fma(n, c2, fnma(n, c1, x)); the
// polynomial as a chain of fma(p, r, c); fma(r, r * p, r) + 1; times 2^n. Lanes below -87 are not
// handled (the caller takes those blocks to the scalar function).
inline __m256 ExpNonPositive8(__m256 x) {
  const __m256 n = _mm256_floor_ps(_mm256_fmadd_ps(x, _mm256_set1_ps(1.44269504088896341f), _mm256_set1_ps(0.5f)));
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fmadd_ps(n, _mm256_set1_ps(2.12194440e-4f), r);
  __m256 p = _mm256_fmadd_ps(r, _mm256_set1_ps(1.9875691500e-4f), _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  const __m256 t = _mm256_mul_ps(r, p);
  const __m256 e = _mm256_add_ps(_mm256_fmadd_ps(r, t, r), _mm256_set1_ps(1.0f));
  const __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvttps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(e, _mm256_castsi256_ps(bits));
}

// The same on 4 lanes, with lanes below -87 clamped there (as the scalar function clamps).
inline __m128 ExpNonPositive4(__m128 x) {
  const __m128 c = _mm_max_ps(x, _mm_set1_ps(-87.0f));
  return _mm256_castps256_ps128(ExpNonPositive8(_mm256_set_m128(c, c)));
}

CEDAR_AVX2_END

}  // namespace cedar::kernels::internal

#endif
