#include "kernels/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

namespace cedar::kernels {

namespace {

// True on pool workers and on a caller inside Run: a ParallelFor from there runs inline.
thread_local bool t_in_pool_job = false;

// A short wait inside a spin loop: the CPU's pause hint, not a system call (sched_yield in the
// spin took a third of decode time).
inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Jobs are split into parts that threads CLAIM (the caller included), rather than parts
// assigned to workers: when the machine is oversubscribed and a worker is not running, the
// caller does its parts instead of spinning until the scheduler runs the worker again (with
// assigned parts a 2-core machine busy with a compiler measured 3 decode tokens/s, not 100).
// Workers spin briefly between jobs (a layer issues jobs back to back, and waking a sleeping
// thread costs tens of microseconds), then sleep on the condition variable. Briefly = kSpinNs,
// a time, not a count of pause hints (a pause is 10-140 cycles depending on the CPU): 200000
// pauses (milliseconds here) measured 3.9 decode tokens/s on 2 cores at load 15 (cedar bench
// small, bf16, batch 1) against 6.4 with a ~100 us spin, because a spinning worker holds a core
// that a runnable thread, the caller among them, could have had; the gaps between a decode
// step's jobs are microseconds, so the short spin still catches them.
class Pool {
 public:
  explicit Pool(int n) { Start(n); }
  ~Pool() { Stop(); }

  int size() const { return int(workers_.size()) + 1; }

  void Resize(int n) {
    Stop();
    Start(n);
  }

  void Run(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
    int parts = int(std::min<int64_t>(size(), grain > 0 ? (n + grain - 1) / grain : n));
    if (t_in_pool_job || parts <= 1) {
      if (n > 0) fn(0, n);
      return;
    }
    t_in_pool_job = true;
    std::lock_guard<std::mutex> run_lock(run_mutex_);
    const uint64_t job = ++jobs_;
    fn_ = &fn;
    n_ = n;
    parts_ = parts;
    done_.store(0, std::memory_order_relaxed);
    {
      std::lock_guard<std::mutex> lk(mutex_);
      state_.store(Pack(job, 0, parts), std::memory_order_release);
    }
    cv_.notify_all();
    for (int part; Claim(job, &part);) Finish(part);
    for (int spin = 0; done_.load(std::memory_order_acquire) < parts; ++spin) {
      if (spin < 100000) CpuRelax();
      else std::this_thread::yield();
    }
    t_in_pool_job = false;
  }

 private:
  // state_ = job id (32 bits) | next unclaimed part (16) | parts (16): one word, so a claim
  // can never take a part of a job other than the one the claimer saw.
  static uint64_t Pack(uint64_t job, uint64_t next, uint64_t parts) { return job << 32 | next << 16 | parts; }

  bool Claim(uint64_t job, int* part) {
    uint64_t s = state_.load(std::memory_order_acquire);
    for (;;) {
      const uint64_t next = (s >> 16) & 0xffff, parts = s & 0xffff;
      if ((s >> 32) != (job & 0xffffffffu) || next >= parts) return false;
      if (state_.compare_exchange_weak(s, s + (uint64_t(1) << 16), std::memory_order_acq_rel)) {
        *part = int(next);
        return true;
      }
    }
  }

  // A claimed part of an unfinished job: the job's fields stay valid until it is done.
  void Finish(int part) {
    const int64_t begin = n_ * part / parts_, end = n_ * (part + 1) / parts_;
    if (begin < end) (*fn_)(begin, end);
    done_.fetch_add(1, std::memory_order_acq_rel);
  }

  void Start(int n) {
    stop_ = false;
    for (int i = 1; i < std::max(n, 1); ++i) workers_.emplace_back([this] { Loop(); });
  }

  void Stop() {
    {
      std::lock_guard<std::mutex> lk(mutex_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : workers_) t.join();
    workers_.clear();
  }

  uint64_t CurrentJob() const { return state_.load(std::memory_order_acquire) >> 32; }

  void Loop() {
    t_in_pool_job = true;
    uint64_t seen = CurrentJob();  // a job posted before this thread runs is still claimable
    bool first = true;
    for (;;) {
      uint64_t job = CurrentJob();
      if (job == seen && !first) {
        const auto until = std::chrono::steady_clock::now() + std::chrono::nanoseconds(kSpinNs);
        for (int spin = 1; job == seen; ++spin) {
          CpuRelax();
          job = CurrentJob();
          if (spin % 64 == 0 && std::chrono::steady_clock::now() > until) break;
        }
      }
      if (job == seen && !first) {
        std::unique_lock<std::mutex> lk(mutex_);
        cv_.wait(lk, [&] { return stop_ || CurrentJob() != seen; });
        if (stop_) return;
        job = CurrentJob();
      }
      first = false;
      if (stop_) return;
      for (int part; Claim(job, &part);) Finish(part);
      seen = job;
    }
  }

  static constexpr int64_t kSpinNs = 100'000;

  std::vector<std::thread> workers_;
  std::mutex mutex_, run_mutex_;
  std::condition_variable cv_;
  std::atomic<uint64_t> state_{0};
  std::atomic<int> done_{0};
  uint64_t jobs_ = 0;
  std::atomic<bool> stop_{false};
  const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
  int64_t n_ = 0;
  int parts_ = 0;
};

Pool& GlobalPool() {
  static Pool pool(int(std::max(1u, std::thread::hardware_concurrency())));
  return pool;
}

}  // namespace

void ParallelFor(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) { GlobalPool().Run(n, grain, fn); }
int Threads() { return GlobalPool().size(); }
bool InPoolJob() { return t_in_pool_job; }

void ParallelCopy(void* dst, const void* src, size_t bytes) {
  constexpr size_t kPart = size_t(1) << 20;
  ParallelFor(int64_t((bytes + kPart - 1) / kPart), 1, [&](int64_t p0, int64_t p1) {
    const size_t b0 = size_t(p0) * kPart, b1 = std::min(bytes, size_t(p1) * kPart);
    std::memcpy(static_cast<char*>(dst) + b0, static_cast<const char*>(src) + b0, b1 - b0);
  });
}
void SetPoolThreads(int n) { GlobalPool().Resize(n); }

}  // namespace cedar::kernels
