#include "kernels/hw_probe.h"

#include <malloc.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include <cblas.h>

#include "kernels/avx2_runtime.h"
#include "kernels/cpu_internal.h"
#include "kernels/ops.h"
#include "kernels/thread_pool.h"

namespace cedar::kernels {

std::string KernelIsa() {
#if defined(__AVX512F__)
  std::string isa = "avx512";
#if defined(__AVX512VNNI__)
  isa += "-vnni";
#endif
#if defined(__AVX512BF16__) && defined(__AVX512VBMI__)
  isa += "-bf16";
#endif
  return isa;
#elif defined(__AVX2__) && defined(__FMA__)
  return "avx2";
#else
  return internal::Avx2KernelsRun() ? "avx2-at-run-time" : "plain";
#endif
}

namespace {
double Seconds(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}
}  // namespace

namespace {
// y[n, m] = x[n, k] w[m, k]^T on OpenBLAS's sgemm, in column slices of at least 64 over the
// pool (what Matmul ran for every many-row product before kernels/gemm_prefill.h): the
// reference rate, not Cedar's own kernel.
void PoolSgemm(const float* x, const float* w, float* y, int n, int k, int m) {
  internal::EnsureBlasSingleThreaded();
  ParallelFor(m, 64, [&](int64_t b, int64_t e) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, int(e - b), k, 1.0f, x, k, w + size_t(b) * k, k, 0.0f, y + b, m);
  });
}
}  // namespace

std::string BlasCore() {
  const char* name = openblas_get_corename();
  return name ? name : "";
}

double MeasureSgemmGflops(int n, int k, int m, int reps) {
  std::vector<float> x(size_t(n) * k, 0.5f), w(size_t(m) * k, 0.25f), y(size_t(n) * m);
  // Warm-up for 0.3 s: the first products of a process ran up to 35% slower here (clock
  // ramp, page faults), which made the benchmark's fractions read above 100%.
  for (auto t0 = std::chrono::steady_clock::now(); Seconds(t0, std::chrono::steady_clock::now()) < 0.3;)
    PoolSgemm(x.data(), w.data(), y.data(), n, k, m);
  // The best of at least `reps` runs and 0.5 s of them: one product is ~6 ms here, and on a
  // shared machine any single one can lose its core for a while (the best of 5 read 88 GFLOP/s
  // at load 1 where the quiet machine reads ~180, which inflated every fraction).
  double best = 1e30;
  const auto start = std::chrono::steady_clock::now();
  for (int r = 0; r < reps || Seconds(start, std::chrono::steady_clock::now()) < 0.5; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    PoolSgemm(x.data(), w.data(), y.data(), n, k, m);
    best = std::min(best, Seconds(t0, std::chrono::steady_clock::now()));
  }
  return 2.0 * n * k * m / best / 1e9;
}

namespace {
// Sum of [b, e) read as S streams side by side (the slice cut in S consecutive parts), each with
// its own vector accumulator, as decode's one-row products read a thread's slice as parts side by
// side: one stream per thread read ~20% slower than 8, which put decode above "its" bound
// (fraction_of_bound 1.19). Which count reads fastest depends on the machine: on the AVX-512 EPYC
// (Zen 5, 2 threads, 1 GiB on huge pages, six alternating rounds, session 31) 8 streams of 256-bit
// loads read 70.6-73.7 GB/s, 8 of 512-bit 76.1-80.6, 4 of 512-bit 79.9-84.2 (F32's MatVec,
// 4 parts with an FMA each, 80.5-82.2), 16 about 50; the probe takes the best of 4 and 8.
template <int S>
float StreamSum(const float* p, size_t b, size_t e) {
  typedef float V __attribute__((vector_size(64)));  // 16 floats: one 512-bit load where there is one
  const size_t len = (e - b) / S / 16 * 16;  // floats per stream, whole vectors
  V acc[S] = {};
  for (size_t i = 0; i < len; i += 16)
#pragma GCC unroll 8
    for (int k = 0; k < S; ++k) {
      V v;
      __builtin_memcpy(&v, p + b + size_t(k) * len + i, sizeof v);
      acc[k] += v;
    }
  float s = 0;
  for (int k = 0; k < S; ++k)
    for (int j = 0; j < 16; ++j) s += acc[k][j];
  for (size_t i = b + S * len; i < e; ++i) s += p[i];
  return s;
}
}  // namespace

namespace {
// The probe's buffer in transparent huge pages where the kernel grants them, as the loaded weights
// are (engine/weight_arena.h): with THP in "madvise" mode a std::vector gets 4 KiB pages, and the
// probe read ~8.4 GB/s on one core where a huge-page buffer read ~12-17 (so decode's own matmuls
// outran "its" bound). Unmapped when it goes out of scope.
struct ProbeBuffer {
  explicit ProbeBuffer(size_t n) : bytes(n * sizeof(float)) {
    void* m = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) {
      fallback.assign(n, 1.0f);
      p = fallback.data();
      return;
    }
#ifdef MADV_HUGEPAGE
    ::madvise(m, bytes, MADV_HUGEPAGE);
#endif
    p = static_cast<float*>(m);
    std::fill(p, p + n, 1.0f);
  }
  ~ProbeBuffer() {
    if (fallback.empty()) ::munmap(p, bytes);
  }
  ProbeBuffer(const ProbeBuffer&) = delete;
  ProbeBuffer& operator=(const ProbeBuffer&) = delete;
  const float* data() const { return p; }
  size_t bytes;
  float* p = nullptr;
  std::vector<float> fallback;
};
}  // namespace

double MeasureReadBandwidthGBs(int mbytes, int reps) {
  const size_t n = size_t(mbytes) * 1024 * 1024 / sizeof(float);
  const ProbeBuffer buf(n);
  double best = 1e30;
  volatile float sink = 0;
  std::vector<float> partial(static_cast<size_t>(Threads()));
  // Each rep reads the buffer once with 4 streams a thread and once with 8 (alternating, so both
  // see the same machine state); the bound takes the fastest pass.
  for (int r = 0; r < 2 * reps; ++r) {
    const bool four = r % 2 == 0;
    auto t0 = std::chrono::steady_clock::now();
    // Every pool thread streams its slice, as the decode's weight reads do.
    ParallelFor(int64_t(Threads()), 1, [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) {
        const size_t lo = n * size_t(t) / size_t(Threads()), hi = n * size_t(t + 1) / size_t(Threads());
        partial[size_t(t)] = four ? StreamSum<4>(buf.data(), lo, hi) : StreamSum<8>(buf.data(), lo, hi);
      }
    });
    best = std::min(best, Seconds(t0, std::chrono::steady_clock::now()));
    for (float p : partial) sink = sink + p;
  }
  return double(n * sizeof(float)) / best / 1e9;
}

int64_t PhysicalMemoryBytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? int64_t(pages) * int64_t(page) : 0;
}

void KeepLargeAllocations() {
  mallopt(M_MMAP_THRESHOLD, 256 << 20);  // buffers below 256 MiB come from the heap
  mallopt(M_TRIM_THRESHOLD, 1 << 30);    // and up to 1 GiB of free heap is kept
}

}  // namespace cedar::kernels
