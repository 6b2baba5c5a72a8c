// MatmulMany: several products in one ParallelFor. Every product is cut into column slices
// (at least kMinCols wide, so BLAS still streams whole cache lines of weights); slices are
// dealt to the threads in order, each thread taking an equal share of the total work.
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <vector>

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
    cblas_sgemv(CblasRowMajor, CblasNoTrans, cols, j.in, 1.0f, j.w + size_t(s.col0) * j.in, j.in, j.x, 1, 0.0f,
                j.y + s.col0, 1);
  } else {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, j.n, cols, j.in, 1.0f, j.x, j.in, j.w + size_t(s.col0) * j.in,
                j.in, 0.0f, j.y + s.col0, j.out);
  }
}

}  // namespace

void MatmulMany(const MatmulJob* jobs, int n_jobs) {
  internal::EnsureBlasSingleThreaded();
  const int threads = InPoolJob() ? 1 : Threads();
  std::vector<Slice> slices;
  double total = 0;
  for (int j = 0; j < n_jobs; ++j) {
    const MatmulJob& m = jobs[j];
    if (m.n <= 0 || m.out <= 0) continue;
    const int parts = std::max(1, std::min(threads, m.out / kMinCols));
    for (int p = 0; p < parts; ++p) {
      Slice s{j, int(int64_t(m.out) * p / parts), int(int64_t(m.out) * (p + 1) / parts), 0};
      s.work = double(m.n) * std::max(m.in, 1) * (s.col1 - s.col0);
      total += s.work;
      slices.push_back(s);
    }
  }
  if (slices.empty()) return;
  const auto t0 = std::chrono::steady_clock::now();
  // Thread t runs the slices whose work midpoints fall in [t, t+1) * total / threads.
  std::vector<size_t> first(size_t(threads) + 1, slices.size());
  double acc = 0;
  size_t i = 0;
  for (int t = 0; t < threads; ++t) {
    first[size_t(t)] = i;
    while (i < slices.size() && acc + slices[i].work / 2 < total * (t + 1) / threads) acc += slices[i++].work;
  }
  first[size_t(threads)] = slices.size();
  ParallelFor(threads, 1, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t)
      for (size_t k = first[size_t(t)]; k < first[size_t(t) + 1]; ++k) RunSlice(jobs[slices[k].job], slices[k]);
  });
  if (internal::WorkCountersOn()) {
    const double s = InPoolJob() ? 0.0 : std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    internal::CountMatmul(2.0 * total, s);
  }
}

}  // namespace cedar::kernels
