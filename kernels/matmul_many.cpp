// MatmulMany: several products in one ParallelFor. Every product is cut into column slices
// (at least kMinCols wide, so BLAS still streams whole cache lines of weights) that the
// threads claim one after another.
#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <vector>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "kernels/cpu_internal.h"
#include "kernels/ops.h"
#include "kernels/thread_pool.h"
#include "kernels/work_counters.h"

namespace cedar::kernels {

namespace {

constexpr int kMinCols = 16;

struct Slice {
  int job = 0, col0 = 0, col1 = 0;
  double work = 0;
};

void RunSlice(const MatmulJob& j, const Slice& s) {
  const int cols = s.col1 - s.col0;
  if (j.in <= 0) {
    for (int r = 0; r < j.n; ++r) std::fill(j.y + size_t(r) * j.out + s.col0, j.y + size_t(r) * j.out + s.col1, 0.0f);
  } else if (j.n == 1) {
    internal::MatVec(j.w + size_t(s.col0) * j.in, j.x, j.y + s.col0, cols, j.in);
  } else {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, j.n, cols, j.in, 1.0f, j.x, j.in, j.w + size_t(s.col0) * j.in,
                j.in, 0.0f, j.y + s.col0, j.out);
  }
}

}  // namespace

namespace internal {

void MatVec(const float* w, const float* x, float* y, int rows, int in) {
#if defined(__AVX512F__)
  const int in16 = in / 16 * 16;
  const __mmask16 tail = __mmask16((1u << (in % 16)) - 1u);
  int r = 0;
  for (; r + 4 <= rows; r += 4) {  // four rows' weights streamed side by side
    const float* w0 = w + size_t(r) * in;
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (int i = 0; i < in16; i += 16) {
      const __m512 xv = _mm512_loadu_ps(x + i);
      a0 = _mm512_fmadd_ps(_mm512_loadu_ps(w0 + i), xv, a0);
      a1 = _mm512_fmadd_ps(_mm512_loadu_ps(w0 + in + i), xv, a1);
      a2 = _mm512_fmadd_ps(_mm512_loadu_ps(w0 + 2 * size_t(in) + i), xv, a2);
      a3 = _mm512_fmadd_ps(_mm512_loadu_ps(w0 + 3 * size_t(in) + i), xv, a3);
    }
    if (tail) {
      const __m512 xv = _mm512_maskz_loadu_ps(tail, x + in16);
      a0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail, w0 + in16), xv, a0);
      a1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail, w0 + in + in16), xv, a1);
      a2 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail, w0 + 2 * size_t(in) + in16), xv, a2);
      a3 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail, w0 + 3 * size_t(in) + in16), xv, a3);
    }
    y[r] = _mm512_reduce_add_ps(a0);
    y[r + 1] = _mm512_reduce_add_ps(a1);
    y[r + 2] = _mm512_reduce_add_ps(a2);
    y[r + 3] = _mm512_reduce_add_ps(a3);
  }
  for (; r < rows; ++r) {
    const float* wr = w + size_t(r) * in;
    __m512 a = _mm512_setzero_ps();
    for (int i = 0; i < in16; i += 16) a = _mm512_fmadd_ps(_mm512_loadu_ps(wr + i), _mm512_loadu_ps(x + i), a);
    if (tail) a = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail, wr + in16), _mm512_maskz_loadu_ps(tail, x + in16), a);
    y[r] = _mm512_reduce_add_ps(a);
  }
#else
  cblas_sgemv(CblasRowMajor, CblasNoTrans, rows, in, 1.0f, w, in, x, 1, 0.0f, y, 1);
#endif
}

double RunMatmulJobs(const MatmulJob* jobs, int n_jobs) {
  EnsureBlasSingleThreaded();
  const int threads = InPoolJob() ? 1 : Threads();
  // Few rows (decode): several slices per thread, claimed in order, so a thread that starts
  // late (a worker waking up) takes fewer instead of the caller waiting for its share. Many
  // rows (prefill): one slice per thread and wider ones, because every sgemm call packs all
  // of x again and narrow column panels run below sgemm's rate.
  // The caller's buffer, reused across calls; workers reach it through this reference (a
  // thread_local named inside the lambda would be each worker's own).
  thread_local std::vector<Slice> slice_buffer;
  std::vector<Slice>& slices = slice_buffer;
  slices.clear();
  double total = 0;
  for (int j = 0; j < n_jobs; ++j) {
    const MatmulJob& m = jobs[j];
    if (m.n <= 0 || m.out <= 0) continue;
    const bool few_rows = m.n < 8;
    const int max_parts = threads == 1 ? 1 : few_rows ? 4 * threads : threads;
    const int parts = std::max(1, std::min(max_parts, m.out / (few_rows ? kMinCols : 4 * kMinCols)));
    for (int p = 0; p < parts; ++p) {
      Slice s{j, int(int64_t(m.out) * p / parts), int(int64_t(m.out) * (p + 1) / parts), 0};
      s.work = double(m.n) * std::max(m.in, 1) * (s.col1 - s.col0);
      total += s.work;
      slices.push_back(s);
    }
  }
  if (slices.empty()) return 0;
  std::atomic<size_t> next{0};
  ParallelFor(std::min<int64_t>(threads, int64_t(slices.size())), 1, [&](int64_t, int64_t) {
    for (size_t k; (k = next.fetch_add(1, std::memory_order_relaxed)) < slices.size();)
      RunSlice(jobs[slices[k].job], slices[k]);
  });
  return 2.0 * total;
}

}  // namespace internal

void MatmulMany(const MatmulJob* jobs, int n_jobs) {
  if (!internal::WorkCountersOn()) {
    internal::RunMatmulJobs(jobs, n_jobs);
    return;
  }
  const auto t0 = std::chrono::steady_clock::now();
  const double flops = internal::RunMatmulJobs(jobs, n_jobs);
  const double s = InPoolJob() ? 0.0 : std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  internal::CountMatmul(flops, s);
}

}  // namespace cedar::kernels
