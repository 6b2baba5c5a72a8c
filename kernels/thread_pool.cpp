#include "kernels/thread_pool.h"

#include <atomic>
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

// Workers wait for a new job generation: they spin briefly (a layer issues jobs back to back,
// and waking a sleeping thread costs tens of microseconds), then sleep on the condition.
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
    fn_ = &fn;
    n_ = n;
    parts_ = parts;
    pending_.store(parts - 1, std::memory_order_relaxed);
    {
      std::lock_guard<std::mutex> lk(mutex_);
      generation_.fetch_add(1, std::memory_order_release);
    }
    cv_.notify_all();
    RunPart(0);
    for (int spin = 0; pending_.load(std::memory_order_acquire) > 0; ++spin) {
      if (spin < 100000) CpuRelax();
      else std::this_thread::yield();
    }
    t_in_pool_job = false;
  }

 private:
  void RunPart(int part) {
    const int64_t begin = n_ * part / parts_, end = n_ * (part + 1) / parts_;
    if (begin < end) (*fn_)(begin, end);
  }

  void Start(int n) {
    stop_ = false;
    // The generation is read here, not in the new thread: a job posted before the thread
    // first runs must still count as new to it.
    const uint64_t start_generation = generation_.load(std::memory_order_acquire);
    for (int i = 1; i < std::max(n, 1); ++i)
      workers_.emplace_back([this, i, start_generation] { Loop(i, start_generation); });
  }

  void Stop() {
    {
      std::lock_guard<std::mutex> lk(mutex_);
      stop_ = true;
      generation_.fetch_add(1, std::memory_order_release);
    }
    cv_.notify_all();
    for (auto& t : workers_) t.join();
    workers_.clear();
  }

  void Loop(int index, uint64_t seen) {
    t_in_pool_job = true;
    for (;;) {
      uint64_t g = seen;
      for (int spin = 0; spin < 200000 && (g = generation_.load(std::memory_order_acquire)) == seen; ++spin)
        CpuRelax();
      if (g == seen) {
        std::unique_lock<std::mutex> lk(mutex_);
        cv_.wait(lk, [&] { return generation_.load(std::memory_order_acquire) != seen; });
        g = generation_.load(std::memory_order_acquire);
      }
      seen = g;
      if (stop_) return;
      if (index < parts_) {
        RunPart(index);
        pending_.fetch_sub(1, std::memory_order_acq_rel);
      }
    }
  }

  std::vector<std::thread> workers_;
  std::mutex mutex_, run_mutex_;
  std::condition_variable cv_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  bool stop_ = false;
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
void SetPoolThreads(int n) { GlobalPool().Resize(n); }

}  // namespace cedar::kernels
