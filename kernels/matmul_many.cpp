// MatmulMany: several products in one ParallelFor. Every product is cut into column slices
// (at least kMinCols wide, so BLAS still streams whole cache lines of weights) that the
// threads claim one after another.
#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <vector>

#include "kernels/avx2_runtime.h"
#include "kernels/cpu_internal.h"
#include "kernels/lane16_avx2.h"
#include "kernels/gemm_prefill.h"
#include "kernels/gemm_rowinv.h"
#include "kernels/ops.h"
#include "kernels/thread_pool.h"
#include "kernels/work_counters.h"

namespace cedar::kernels {

namespace {

constexpr int kMinCols = 16;

// Columns [col0, col1) of a job, or (rows) its rows [row0, row1) over columns [col0, col1).
struct Slice {
  int job = 0, col0 = 0, col1 = 0;
  double work = 0;
  bool rows = false;  // a block of rows on GemmPrefillRows
  int row0 = 0, row1 = 0;
};

}  // namespace

namespace internal {

#if defined(__AVX512F__)
namespace {

// A thread's slice of a one-row product is read as kMatVecSpread parts side by side (row i of
// every part at once: streams a quarter of the slice apart), not as 8 adjacent rows. On the
// AVX-512 EPYC (Zen 5, 2 cores) the adjacent rows streamed 58-63 GB/s where the read probe gives
// 70-77, and the spread parts 64-76 (a products-only pass over medium's decode shapes,
// alternating; software prefetch on top was 5-15% slower); `cedar bench` medium f32 decode
// 22.2 -> 27.2 tokens/s. Each row keeps its own accumulator: the bits do not change.
constexpr int kMatVecSpread = 4;
constexpr int kSpreadMinRows = 16;  // rows per part at least, else adjacent rows as before

// y[r .. r + R) for R rows of weights read side by side: R streams in flight at once is what
// lets one core pull its share of memory bandwidth (8 rows measured +20% over 4 at 70 GB/s).
// Row k is w + k * w_stride, its output y[k * y_stride].
template <int R>
void MatVecRows(const float* w, size_t w_stride, const float* x, float* y, size_t y_stride, int in) {
  const int in16 = in / 16 * 16;
  const __mmask16 tail = __mmask16((1u << (in % 16)) - 1u);
  __m512 a[R];
  for (int k = 0; k < R; ++k) a[k] = _mm512_setzero_ps();
  for (int i = 0; i < in16; i += 16) {
    const __m512 xv = _mm512_loadu_ps(x + i);
#pragma GCC unroll 8
    for (int k = 0; k < R; ++k) a[k] = _mm512_fmadd_ps(_mm512_loadu_ps(w + k * w_stride + i), xv, a[k]);
  }
  if (tail) {
    const __m512 xv = _mm512_maskz_loadu_ps(tail, x + in16);
#pragma GCC unroll 8
    for (int k = 0; k < R; ++k) a[k] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail, w + k * w_stride + in16), xv, a[k]);
  }
  for (int k = 0; k < R; ++k) y[k * y_stride] = _mm512_reduce_add_ps(a[k]);
}

}  // namespace
#elif defined(CEDAR_AVX2_KERNELS)  // AVX2 builds, and portable ones where the CPU has it
namespace {
CEDAR_AVX2_BEGIN

// The AVX-512 path's reading pattern on AVX2: a thread's slice as kMatVecSpread parts side by
// side, row i of every part at once, without software prefetch. On an AVX2 EPYC (Zen 3 VM, 2
// cores, ~20-35 GB/s) a products-only pass over small's and medium's decode shapes (one-row
// products through MatmulMany, variants alternating in one process, each over the read probe
// taken beside it) streamed 0.89-0.93 of the probe with 4 parts against 0.68-0.78 one row at a
// time with 1 KiB NTA prefetch (the earlier pattern, tuned on an older AVX2 VM), 0.85 with 2
// parts, 0.87-0.94 with 6; 2 or 4 parts with prefetch 0.70-0.71.
constexpr int kMatVecSpread = 4;
constexpr int kSpreadMinRows = 16;  // rows per part at least, else one row at a time

// The AVX-512 path's order on AVX2 (gemm_rowinv.h's lane-16 order): two 8-lane accumulators per
// row stand for lanes 0-7 and 8-15 of the 16-lane one, and the lane sum is
// _mm512_reduce_add_ps's. So decode gives the same bits here as on AVX-512 machines, and the
// row-invariant GEMM reproduces it for any number of rows. R rows a stride apart: 2R
// accumulators and the 2 halves of x (R = 4: 10 of the 16 registers).
// Row k is w + k * w_stride, its output y[k * y_stride].
template <int R>
void MatVecRows(const float* w, size_t w_stride, const float* x, float* y, size_t y_stride, int in) {
  const int in16 = in / 16 * 16;
  __m256 a[R][2];
  for (int k = 0; k < R; ++k) a[k][0] = a[k][1] = _mm256_setzero_ps();
  for (int i = 0; i < in16; i += 16) {
    const __m256 x0 = _mm256_loadu_ps(x + i), x1 = _mm256_loadu_ps(x + i + 8);
#pragma GCC unroll 8
    for (int k = 0; k < R; ++k) {
      a[k][0] = _mm256_fmadd_ps(_mm256_loadu_ps(w + k * w_stride + i), x0, a[k][0]);
      a[k][1] = _mm256_fmadd_ps(_mm256_loadu_ps(w + k * w_stride + i + 8), x1, a[k][1]);
    }
  }
  if (in16 < in) {  // the tail as zero-padded lanes, as the AVX-512 path's masked loads do
    __m256i m0, m1;
    Lane16TailMasks(in - in16, &m0, &m1);
    const __m256 x0 = _mm256_maskload_ps(x + in16, m0), x1 = _mm256_maskload_ps(x + in16 + 8, m1);
    for (int k = 0; k < R; ++k) {
      a[k][0] = _mm256_fmadd_ps(_mm256_maskload_ps(w + k * w_stride + in16, m0), x0, a[k][0]);
      a[k][1] = _mm256_fmadd_ps(_mm256_maskload_ps(w + k * w_stride + in16 + 8, m1), x1, a[k][1]);
    }
  }
  for (int k = 0; k < R; ++k) y[k * y_stride] = Lane16Sum(a[k][0], a[k][1]);
}

CEDAR_AVX2_END
}  // namespace
#endif

#if !(defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__)))
namespace {
// MatVec where the build has no AVX2 and FMA (CEDAR_NATIVE=OFF without an -march) and the CPU
// neither (avx2_runtime.h): each row summed in the lane-16 order (ref::DotLane16, the same bits),
// as 16 independent FMA chains, so a row alone equals the same row of the row-invariant GEMM
// (sgemv, used here before, did not).
void MatVecLane16Portable(const float* w, const float* x, float* y, int rows, int in) {
  for (int r = 0; r < rows; ++r) y[r] = DotLane16Simd(w + size_t(r) * in, x, in);
}
}  // namespace
#endif

void MatVec(const float* w, const float* x, float* y, int rows, int in) {
#if !(defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__)))
  if (!Avx2KernelsRun()) return MatVecLane16Portable(w, x, y, rows, in);
#endif
#if defined(__AVX512F__) || defined(CEDAR_AVX2_KERNELS)
  int r = 0;
  if (rows >= kMatVecSpread * kSpreadMinRows) {
    // The slice as kMatVecSpread equal parts read side by side, row i of each at once.
    const int per = rows / kMatVecSpread;
    for (; r < per; ++r) MatVecRows<kMatVecSpread>(w + size_t(r) * in, size_t(per) * in, x, y + r, size_t(per), in);
    r = per * kMatVecSpread;
  }
#if defined(__AVX512F__)
  for (; r + 8 <= rows; r += 8) MatVecRows<8>(w + size_t(r) * in, in, x, y + r, 1, in);
  if (r + 4 <= rows) {
    MatVecRows<4>(w + size_t(r) * in, in, x, y + r, 1, in);
    r += 4;
  }
#endif
  for (; r < rows; ++r) MatVecRows<1>(w + size_t(r) * in, in, x, y + r, 1, in);
#endif
}

namespace {
std::atomic<bool> row_invariant_matmul{false};
}  // namespace

void MatmulColumns(const MatmulJob& j, int col0, int col1) {
  if (j.wv.type != WeightType::kF32) return MatmulColumnsTyped(j, col0, col1);
  const int cols = col1 - col0;
  if (j.in <= 0) {
    for (int r = 0; r < j.n; ++r) std::fill(j.y + size_t(r) * j.out + col0, j.y + size_t(r) * j.out + col1, 0.0f);
  } else if (j.n == 1) {
    MatVec(j.w + size_t(col0) * j.in, j.x, j.y + col0, cols, j.in);
  } else if (j.n <= kFewRowsMax) {
    MatmulFewRows(j.x, j.w + size_t(col0) * j.in, j.y + col0, j.n, j.in, cols, j.out);
  } else if (row_invariant_matmul.load(std::memory_order_relaxed)) {
    GemmRowInvariant(j.x, j.n, F32Panels(j.w, j.out, j.in), j.y, j.out, col0, col1);
  } else {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, j.n, cols, j.in, 1.0f, j.x, j.in, j.w + size_t(col0) * j.in,
                j.in, 0.0f, j.y + col0, j.out);
  }
}

bool PrefillRowsJob(const MatmulJob& j) {
  return j.n > kFewRowsMax && j.wv.type == WeightType::kF32 &&
         !row_invariant_matmul.load(std::memory_order_relaxed);
}

namespace {

// A typed many-row product whose x is packed once for all its weight panels (RunMatmulJobs).
bool PacksTypedRows(const MatmulJob& m, int threads) {
  if (m.n <= kFewRowsMax || m.out <= 0 || m.in <= 0 || m.wv.type == WeightType::kF32) return false;
  return (m.out + threads - 1) / threads > TypedPanelRows(m.in);
}

// Most F32 floats a typed many-row product is decoded into whole (4 MiB, a panel).
constexpr size_t kWholeDecodeFloats = size_t(1) << 20;

// Rows of x from which decoding whole pays. With 2048 (a prefill chunk) it measured 3-9% faster
// on small's shapes (a products-only driver) and ~5% in small's 4096-token prefill; with 512
// rows 4-10% slower (the decoded weights are shared in L3 instead of each thread's half in L2,
// and the decode pass is one more hand-off): small's 512-token bounded prefill lost ~9%.
constexpr int kWholeDecodeMinRows = 2048;

// A typed many-row product small enough to decode whole and run as an F32 one (RunMatmulJobs).
bool DecodesWhole(const MatmulJob& m, int threads) {
  return m.n >= kWholeDecodeMinRows && m.out > 0 && m.in > 0 && m.wv.type != WeightType::kF32 &&
         !row_invariant_matmul.load(std::memory_order_relaxed) && !PacksTypedRows(m, threads) &&
         size_t(m.out) * size_t(m.in) <= kWholeDecodeFloats;
}

// The jobs with at most kFewRowsMax rows of x (decode's products) read x from 64-byte aligned
// copies where the caller's x is not aligned (returns jobs itself when none needs one). Every
// block of the one-row and few-row kernels loads x 64 bytes at a time, and from an address 16,
// 32 or 48 bytes past a cache line each such load spans two lines. Decode's activations are at
// those offsets in ~9 products of 10 (medium, INT8 `cedar bench`), and a one-row INT8 product in
// L2 (256 x 2048, one thread) took 1.14-1.20 ns a block of 32 with x 16 or 32 bytes off a line
// against 0.86 aligned. The same values in the same order: the same bits. One copy per x per
// call (jobs on the same x share it), on the calling thread, before the slices are handed out.
const MatmulJob* WithAlignedFewRowsX(const MatmulJob* jobs, int n_jobs) {
  // (8-bit- and BF16-activation jobs, and FP8 ones on x times 2^120, read x once, to convert it into
  // their own aligned rows: no copy.)
  auto needs = [](const MatmulJob& m) {
    return m.n >= 1 && m.n <= kFewRowsMax && m.in > 0 && m.out > 0 && reinterpret_cast<uintptr_t>(m.x) % 64 != 0 &&
           !Int8ActivationsApply(m.wv) && !Bf16ActivationsApply(m.wv) && !Fp8PrescaleApplies(m.wv);
  };
  if (std::none_of(jobs, jobs + n_jobs, needs)) return jobs;
  constexpr size_t kLine = 16;  // floats per 64-byte line
  thread_local std::vector<MatmulJob> aligned_jobs_buffer;
  thread_local LineVector<float> aligned_x_buffer;
  std::vector<MatmulJob>& out = aligned_jobs_buffer;
  out.assign(jobs, jobs + n_jobs);
  size_t floats = 0;
  for (int j = 0; j < n_jobs; ++j)
    if (needs(jobs[j])) floats += (size_t(jobs[j].n) * size_t(jobs[j].in) + kLine - 1) / kLine * kLine;
  if (aligned_x_buffer.size() < floats) aligned_x_buffer.resize(floats);
  float* next = aligned_x_buffer.data();  // each copy starts on a line
  for (int j = 0; j < n_jobs; ++j) {
    const MatmulJob& m = jobs[j];
    if (!needs(m)) continue;
    const size_t count = size_t(m.n) * size_t(m.in);
    const float* shared = nullptr;  // an earlier job's copy of the same x
    for (int k = 0; k < j && !shared; ++k)
      if (needs(jobs[k]) && jobs[k].x == m.x && size_t(jobs[k].n) * size_t(jobs[k].in) >= count) shared = out[size_t(k)].x;
    if (!shared) {
      std::copy(m.x, m.x + count, next);
      shared = next;
      next += (count + kLine - 1) / kLine * kLine;
    }
    out[size_t(j)].x = shared;
  }
  return out.data();
}

}  // namespace

// One converted x per job that `applies` (table[j]; null for the others): a job on the same x, n
// and in as an earlier converted job, and that `shares` its conversion, takes that one's pointer;
// any other calls convert(j), which may return null (the job then reads x as given). The table is
// filled only when some job applies (decode's ~300-500 products a token skip the conversions
// they do not use); returns whether one did.
template <class T, class Applies, class Shares, class Convert>
bool ConvertXOnce(const MatmulJob* jobs, int n_jobs, std::vector<const T*>& table, Applies applies, Shares shares, Convert convert) {
  bool any = false;
  for (int j = 0; j < n_jobs; ++j) {
    const MatmulJob& m = jobs[j];
    if (!applies(m)) continue;
    if (!any) any = true, table.assign(size_t(n_jobs), nullptr);
    const T*& mine = table[size_t(j)];
    for (int k = 0; k < j && !mine; ++k)
      if (table[size_t(k)] && jobs[k].x == m.x && jobs[k].n == m.n && jobs[k].in == m.in && shares(jobs[k], m)) mine = table[size_t(k)];
    if (!mine) mine = convert(j);
  }
  return any;
}

double RunMatmulJobs(const MatmulJob* jobs, int n_jobs) {
  EnsureBlasSingleThreaded();
  const int threads = InPoolJob() ? 1 : Threads();
  // Typed products of at most a panel's size (small's shapes, medium's narrow ones) over at
  // least kWholeDecodeMinRows rows of x are decoded whole to F32 first, then run as F32
  // products: blocks of rows that the threads claim, each packing only its own rows of x. As
  // column slices (one panel each) every thread packed all rows of x for its half of the
  // weights, and a thread slowed by the machine left the other waiting. The same GEMM on the
  // same decoded weights: the same bits. (Products of up to 8 MiB decoded whole made medium's
  // bounded prefill 3-8% slower; at 4 MiB it is unchanged.)
  // The caller's buffers, reused across calls (workers reach them through these references).
  thread_local std::vector<std::vector<float>> whole_buffer;
  thread_local std::vector<MatmulJob> whole_jobs_buffer;
  std::vector<std::vector<float>>& whole = whole_buffer;
  if (std::any_of(jobs, jobs + n_jobs, [&](const MatmulJob& m) { return DecodesWhole(m, threads); })) {
    std::vector<MatmulJob>& copy = whole_jobs_buffer;
    copy.assign(jobs, jobs + n_jobs);
    if (whole.size() < size_t(n_jobs)) whole.resize(size_t(n_jobs));
    struct Part {
      int job;
      int64_t r0, r1;
    };
    std::vector<Part> parts;  // ~64K weights each, decoded in one pool pass
    for (int j = 0; j < n_jobs; ++j) {
      MatmulJob& m = copy[size_t(j)];
      if (!DecodesWhole(m, threads)) continue;
      whole[size_t(j)].resize(size_t(m.out) * size_t(m.in));
      const int64_t step = std::max(1, (1 << 16) / m.in);
      for (int64_t r = 0; r < m.out; r += step) parts.push_back({j, r, std::min<int64_t>(m.out, r + step)});
      m.w = whole[size_t(j)].data();  // filled below from jobs[j].wv, which the copy no longer holds
      m.wv = WeightView{WeightType::kF32, m.w, nullptr, m.out, m.in};
    }
    ParallelFor(int64_t(parts.size()), 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        const Part& p = parts[size_t(i)];
        float* out = whole[size_t(p.job)].data() + size_t(p.r0) * size_t(jobs[p.job].in);  // [r1 - r0, in]
        QuantDecodeRows(jobs[p.job].wv, p.r0, p.r1 - p.r0, out);
      }
    });
    jobs = copy.data();
  }
  // One row (decode, MatVec): one slice per thread per job, cut at multiples of 8 rows, since
  // every slice start costs the prefetchers a ramp and MatVec reads a long slice as parts far
  // apart (kMatVecSpread; 4 slices per thread measured 57 GB/s where one reached 70);
  // slices are still claimed, so a worker that wakes late leaves its part to the caller. A
  // few rows (batched decode, MatmulFewRows, compute-bound): several slices per thread,
  // claimed in order, so a thread that starts late takes fewer. Many rows (prefill): one
  // wider slice per thread, because every sgemm call packs all of x again and narrow panels
  // run below sgemm's rate.
  // The caller's buffer, reused across calls; workers reach it through this reference (a
  // thread_local named inside the lambda would be each worker's own).
  thread_local std::vector<Slice> slice_buffer;
  std::vector<Slice>& slices = slice_buffer;
  slices.clear();
  double total = 0;
  for (int j = 0; j < n_jobs; ++j) {
    const MatmulJob& m = jobs[j];
    if (m.n <= 0 || m.out <= 0) continue;
    if (PrefillRowsJob(m)) {
      // Many rows, F32, default mode: blocks of rows that threads claim; each packs only its
      // own rows and reads the weights in place (gemm_prefill.h).
      // Blocks of 48 rows (3 panels), or 32 where that splits the rows more evenly over the
      // threads (512 rows: 11 blocks of 48 left one thread 272 rows and the other 240; 16 of
      // 32 give each 256).
      auto busiest = [&](int b) {
        const int blocks = (m.n + b - 1) / b;
        return std::min(m.n, (blocks + threads - 1) / threads * b);
      };
      // Up to 48 rows: one block (three panels per tile), which the column cut below shares out
      // when there are fewer blocks than threads.
      const int block = m.n <= kPrefillRowBlock ? m.n : busiest(32) < busiest(kPrefillRowBlock) ? 32 : kPrefillRowBlock;
      for (int r = 0; r < m.n; r += block) {
        Slice s{j, 0, m.out, 0, true, r, std::min(m.n, r + block)};
        s.work = double(s.row1 - s.row0) * std::max(m.in, 1) * m.out;
        total += s.work;
        slices.push_back(s);
      }
      continue;
    }
    const bool few_rows = m.n <= internal::kFewRowsMax;
    const int max_parts = threads == 1 ? 1 : m.n == 1 ? threads : few_rows ? 4 * threads : threads;
    const int parts = std::max(1, std::min(max_parts, m.out / (few_rows ? kMinCols : 4 * kMinCols)));
    const int align = few_rows ? 8 : 1;
    auto cut = [&](int p) { return p == parts ? m.out : int(int64_t(m.out) * p / parts / align * align); };
    for (int p = 0; p < parts; ++p) {
      Slice s{j, cut(p), cut(p + 1), 0};
      s.work = double(m.n) * std::max(m.in, 1) * (s.col1 - s.col0);
      total += s.work;
      slices.push_back(s);
    }
  }
  if (slices.empty()) return 0;
  jobs = WithAlignedFewRowsX(jobs, n_jobs);
  // x of an 8-bit-activation product quantised once here, for all of its slices (only with the
  // mode on: the default path does not touch these buffers); jobs on the same x share it where
  // their weights are both FP4 or both not (QuantiseRows' one difference).
  auto few_rows = [](const MatmulJob& m) { return m.n >= 1 && m.n <= kFewRowsMax && m.out > 0; };
  thread_local std::vector<I8A8Rows> a8_buffer;
  thread_local std::vector<const I8A8Rows*> a8_rows_table;
  std::vector<const I8A8Rows*>& a8_rows = a8_rows_table;  // the caller's, in the workers too
  auto fp4 = [](const MatmulJob& m) { return m.wv.type == WeightType::kFP4; };
  const bool a8 = Int8Activations() && ConvertXOnce(
      jobs, n_jobs, a8_rows, [&](const MatmulJob& m) { return few_rows(m) && Int8ActivationsApply(m.wv); },
      [&](const MatmulJob& a, const MatmulJob& b) { return fp4(a) == fp4(b); },
      [&](int j) {
        if (a8_buffer.size() < size_t(n_jobs)) a8_buffer.resize(size_t(n_jobs));
        QuantiseRows(jobs[j].x, jobs[j].n, jobs[j].in, a8_buffer[size_t(j)], fp4(jobs[j]));
        return &a8_buffer[size_t(j)];
      });
  // Likewise x of a BF16-activation product, converted once (jobs on the same x and weight type,
  // whose kernels read the same order, share it).
  thread_local std::vector<Bf16Rows> bf16_buffer;
  thread_local std::vector<const Bf16Rows*> bf16_rows_table;
  std::vector<const Bf16Rows*>& bf16_rows = bf16_rows_table;  // the caller's, in the workers too
  const bool bf16a = Bf16Activations() && ConvertXOnce(
      jobs, n_jobs, bf16_rows, [&](const MatmulJob& m) { return few_rows(m) && Bf16ActivationsApply(m.wv); },
      [](const MatmulJob& a, const MatmulJob& b) { return a.wv.type == b.wv.type; },
      [&](int j) {
        if (bf16_buffer.size() < size_t(n_jobs)) bf16_buffer.resize(size_t(n_jobs));
        ConvertRowsBf16(jobs[j].x, jobs[j].n, jobs[j].in, jobs[j].wv.type, bf16_buffer[size_t(j)]);
        return &bf16_buffer[size_t(j)];
      });
  if (threads > 1 && slices.size() < size_t(threads) &&
      std::any_of(slices.begin(), slices.end(), [](const Slice& s) { return s.rows; })) {
    // Fewer row blocks than threads (a product of 17-48 rows, e.g. a chunk's projections):
    // cut each block into column parts too, so no thread idles. Every output is its own FMA
    // chain, so the bits do not depend on the cut.
    std::vector<Slice> split;
    for (const Slice& s : slices) {
      const MatmulJob& m = jobs[s.job];
      const int parts = s.rows ? std::max(1, std::min(threads, m.out / 48)) : 1;
      for (int p = 0; p < parts; ++p) {
        Slice t = s;
        t.col0 = p == 0 ? 0 : int(int64_t(m.out) * p / parts / 6 * 6);  // whole 6-output tiles
        t.col1 = p + 1 == parts ? m.out : int(int64_t(m.out) * (p + 1) / parts / 6 * 6);
        if (s.rows) t.work = double(t.row1 - t.row0) * std::max(m.in, 1) * (t.col1 - t.col0);
        split.push_back(t);
      }
    }
    slices.swap(split);
  }
  // Likewise x of an FP8 few-row product times 2^120 (Fp8PrescaleApplies), once for all of its
  // slices and shared by jobs on the same x; a null entry (some |x| >= 2^8) keeps QuantFewRows.
  thread_local std::vector<LineVector<float>> fp8x_buffer;
  thread_local std::vector<const float*> fp8x_table;
  std::vector<const float*>& fp8x = fp8x_table;  // the caller's, in the workers too
  const bool any_fp8x = ConvertXOnce(
      jobs, n_jobs, fp8x, [&](const MatmulJob& m) { return few_rows(m) && m.in > 0 && Fp8PrescaleApplies(m.wv); },
      [](const MatmulJob&, const MatmulJob&) { return true; },
      [&](int j) -> const float* {
        if (fp8x_buffer.size() < size_t(n_jobs)) fp8x_buffer.resize(size_t(n_jobs));
        LineVector<float>& b = fp8x_buffer[size_t(j)];
        return XTimes2p120(jobs[j].x, int64_t(jobs[j].n) * jobs[j].in, b) ? b.data() : nullptr;
      });
  // x of a typed many-row product packed once here for every weight panel of every slice
  // (gemm_prefill.h PackedRows), where a slice holds more than one panel (medium's 2048- and
  // 4096-wide products: 2-4 per slice; a thread packing x for each measured 4-7% slower in
  // bench-style runs of the product). A typed product whose slices hold one panel each and
  // that was not decoded whole above (fewer rows: a chunk's experts, a 512-token prompt) runs as
  // column slices, each thread packing x as it goes: packing once beforehand measured 1-4%
  // slower there (one more hand-off, and the panels then come from the other core's cache).
  // Products over the same x (Wq_a and Wkv) share one packing.
  // The buffers are kept for the next call (no allocation per product): they hold what the
  // largest call packed, as many floats as the x rows of its packed products. The table is
  // filled and read only when some job is packed (decode's ~300-500 calls a token never are).
  thread_local std::vector<PackedRows> packed_buffer;
  thread_local std::vector<const PackedRows*> packed_table;
  std::vector<const PackedRows*>& packed = packed_table;  // the caller's, in the workers too
  const bool any_packed = ConvertXOnce(
      jobs, n_jobs, packed, [&](const MatmulJob& m) { return PacksTypedRows(m, threads); },
      [](const MatmulJob&, const MatmulJob&) { return true; },
      [&](int j) {
        if (packed_buffer.size() < size_t(n_jobs)) packed_buffer.resize(size_t(n_jobs));
        packed_buffer[size_t(j)].Pack(jobs[j].x, jobs[j].n, jobs[j].in);
        return &packed_buffer[size_t(j)];
      });
  std::atomic<size_t> next{0};
  ParallelFor(std::min<int64_t>(threads, int64_t(slices.size())), 1, [&](int64_t, int64_t) {
    for (size_t k; (k = next.fetch_add(1, std::memory_order_relaxed)) < slices.size();) {
      const Slice& s = slices[k];
      const MatmulJob& m = jobs[s.job];
      if (s.rows)
        GemmPrefillRows(m.x, m.w + size_t(s.col0) * m.in, m.y + s.col0, m.in, s.col1 - s.col0, m.out, s.row0, s.row1);
      else if (const I8A8Rows* q = a8 ? a8_rows[size_t(s.job)] : nullptr) I8A8Quantised(*q, m.n, m.wv, s.col0, s.col1, m.y + s.col0, m.out);
      else if (const Bf16Rows* c = bf16a ? bf16_rows[size_t(s.job)] : nullptr) Bf16AConverted(*c, m.n, m.wv, s.col0, s.col1, m.y + s.col0, m.out);
      else if (const float* xs = any_fp8x ? fp8x[size_t(s.job)] : nullptr) Fp8XFewRows(xs, m.n, m.wv, s.col0, s.col1, m.y + s.col0, m.out);
      else if (const PackedRows* px = any_packed ? packed[size_t(s.job)] : nullptr) MatmulColumnsTyped(m, s.col0, s.col1, px);
      else MatmulColumns(m, s.col0, s.col1);
    }
  });
  return 2.0 * total;
}

}  // namespace internal

void SetRowInvariantMatmul(bool on) { internal::row_invariant_matmul.store(on); }
bool RowInvariantMatmul() { return internal::row_invariant_matmul.load(std::memory_order_relaxed); }

void MatmulMany(const MatmulJob* jobs, int n_jobs) {
  if (!internal::WorkCountersOn()) {
    internal::RunMatmulJobs(jobs, n_jobs);
    return;
  }
  const auto t0 = std::chrono::steady_clock::now();
  const double flops = internal::RunMatmulJobs(jobs, n_jobs);
  const double s = InPoolJob() ? 0.0 : std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  double bytes = 0;  // each job's weight once (its rows of x share every byte)
  for (int j = 0; j < n_jobs; ++j)
    if (jobs[j].n > 0) bytes += double(jobs[j].out) * WeightRowBytes(jobs[j].w ? WeightType::kF32 : jobs[j].wv.type, jobs[j].in);
  internal::CountMatmul(flops, s, bytes);
}

}  // namespace cedar::kernels
