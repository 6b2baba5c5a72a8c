// The one thread pool of the CPU backend. Matmuls split their output columns (or rows) over
// it, each part calling single-threaded BLAS; attention splits its query rows. One pool means
// no second set of spinning threads competing for the cores (measured: 2-20x slower on two
// cores when OpenBLAS's and OpenMP's pools coexisted).
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>

namespace cedar::kernels {

// Runs fn(begin, end) over [0, n) split into at most Threads() contiguous parts, at least
// `grain` items each; the caller runs one part. Nested calls run inline. Blocks until done.
void ParallelFor(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);
int Threads();
// True inside a pool job (on a worker, or on the caller while it runs its own part).
bool InPoolJob();
// memcpy(dst, src, bytes) in parts of 1 MiB on the pool's threads: loading weights is mostly
// first touches of fresh pages and reads of a file's mapping, which every core can do at once.
void ParallelCopy(void* dst, const void* src, size_t bytes);
// Sets the pool size (1 = everything on the caller). Not while a ParallelFor runs.
void SetPoolThreads(int n);

}  // namespace cedar::kernels
