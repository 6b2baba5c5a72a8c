#include "server/worker_pool.h"

#include <spdlog/spdlog.h>

#include <exception>

namespace cedar::server {

void WorkerPool::Post(std::function<void()> job) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (stopping_) return;
    jobs_.push_back(std::move(job));
    // Idle workers not yet claimed by a queued job can take this one.
    if (idle_ < jobs_.size() && threads_.size() < max_threads_) threads_.emplace_back([this] { Work(); });
  }
  cv_.notify_one();
}

void WorkerPool::Work() {
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    idle_++;
    cv_.wait(lk, [&] { return !jobs_.empty() || stopping_; });
    idle_--;
    if (jobs_.empty()) return;  // stopping and nothing left
    std::function<void()> job = std::move(jobs_.front());
    jobs_.pop_front();
    lk.unlock();
    try {
      job();
    } catch (const std::exception& e) {
      spdlog::error("worker: uncaught exception: {}", e.what());
    }
    job = nullptr;  // release what the job held before waiting again
    lk.lock();
  }
}

void WorkerPool::Join() {
  std::vector<std::thread> threads;
  {
    std::lock_guard<std::mutex> lk(mu_);
    stopping_ = true;
    threads.swap(threads_);
  }
  cv_.notify_all();
  for (std::thread& t : threads) t.join();
}

size_t WorkerPool::threads() const {
  std::lock_guard<std::mutex> lk(mu_);
  return threads_.size();
}

}  // namespace cedar::server
