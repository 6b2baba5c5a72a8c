// Threads that may block: each runs one request's handler (which waits for its turn) at a
// time. A job goes to an idle worker, or to a new one while fewer than `max_threads` exist;
// beyond that it queues. Threads stay until Join (the pool only grows to the peak of
// concurrent requests).
//
// Thread contract: Post from any thread; Join once, from a thread that is not a worker.
#pragma once
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace cedar::server {

class WorkerPool {
 public:
  explicit WorkerPool(size_t max_threads) : max_threads_(max_threads < 1 ? 1 : max_threads) {}
  ~WorkerPool() { Join(); }
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  void Post(std::function<void()> job);
  // Runs every queued job, then joins the threads. Later Posts run nothing.
  void Join();
  size_t threads() const;

 private:
  void Work();

  const size_t max_threads_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  std::vector<std::thread> threads_;
  size_t idle_ = 0;
  bool stopping_ = false;
};

}  // namespace cedar::server
