// The exponential of the AVX2 attention kernels (attention_row.cpp, attention_tiled.cpp), one
// definition so both give internal::ExpNonPositive's bits, and how those kernels are compiled
// where the build has no AVX2. Internal to kernels/.
#pragma once

// A GCC build for x86-64 without -mavx2 (a portable build: no -march) compiles the AVX2 attention
// kernels too, each between CEDAR_AVX2_BEGIN and CEDAR_AVX2_END (a target pragma), and runs them
// where Avx2KernelsRun() says the CPU has AVX2 and FMA, as the products' target_clones pick their
// AVX2 clone at load. One answer serves the whole process, so every row, chunk and head group of
// a run takes the same kernel. (There the scalar ExpNonPositive is compiled without FMA, so
// ExpNonPositive8 does not give its bits: attention's bits differ by ISA, as they already do.)
#if !defined(__AVX2__) && defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define CEDAR_AVX2_AT_RUNTIME 1
#define CEDAR_AVX2_BEGIN _Pragma("GCC push_options") _Pragma("GCC target(\"avx2,fma\")")
#define CEDAR_AVX2_END _Pragma("GCC pop_options")
#else
#define CEDAR_AVX2_BEGIN
#define CEDAR_AVX2_END
#endif
#if (defined(__AVX2__) && defined(__FMA__)) || defined(CEDAR_AVX2_AT_RUNTIME)
#define CEDAR_AVX2_KERNELS 1
#endif

#if defined(CEDAR_AVX2_KERNELS)
#include <immintrin.h>

namespace cedar::kernels::internal {

// Whether the AVX2 kernels may run here: always in a build for AVX2 and FMA; in a portable build,
// where the CPU has both.
inline bool Avx2KernelsRun() {
#if defined(CEDAR_AVX2_AT_RUNTIME)
  static const bool ok = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return ok;
#else
  return true;
#endif
}

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
