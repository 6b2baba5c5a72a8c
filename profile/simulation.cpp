// Simulation: the designs without a cache are costed inline; each cache design (at the main
// budget and at every sweep budget) runs on a worker thread that owns its PrefixCache.
#include <algorithm>
#include <condition_variable>
#include <deque>
#include <exception>
#include <future>
#include <mutex>
#include <thread>

#include "profile/simulator.h"

namespace cedar::profile {

namespace {

// One request's tokens, shared by every worker until the last one is done with it.
struct Job {
  size_t index = 0;
  const TraceRequest* trace = nullptr;
  std::vector<int32_t> prompt, output;
};

// A single-producer queue with a capacity, so a slow worker holds back the producer instead of
// letting the queue grow. Pop() returns null once the queue is closed and empty.
class JobQueue {
 public:
  void Push(std::shared_ptr<const Job> job) {
    std::unique_lock lock(mu_);
    not_full_.wait(lock, [&] { return jobs_.size() < kCapacity; });
    jobs_.push_back(std::move(job));
    not_empty_.notify_one();
  }
  std::shared_ptr<const Job> Pop() {
    std::unique_lock lock(mu_);
    not_empty_.wait(lock, [&] { return !jobs_.empty() || closed_; });
    if (jobs_.empty()) return nullptr;
    auto job = std::move(jobs_.front());
    jobs_.pop_front();
    not_full_.notify_one();
    return job;
  }
  void Close() {
    std::lock_guard lock(mu_);
    closed_ = true;
    not_empty_.notify_all();
  }

 private:
  static constexpr size_t kCapacity = 8;
  std::mutex mu_;
  std::condition_variable not_empty_, not_full_;
  std::deque<std::shared_ptr<const Job>> jobs_;
  bool closed_ = false;
};

struct SimSpec {
  Design design;
  uint64_t ram_budget;
  bool keep_outcomes;  // the main budget keeps every request's outcome
};

// What one cache design produced; written only by its worker, read after the join.
struct SimResult {
  std::vector<Outcome> outcomes;
  Totals totals;
  cache::CacheCounters counters;
  cache::CacheSizes sizes;
};

}  // namespace

struct Simulation::Workers {
  struct Worker {
    std::vector<size_t> sims;  // indexes into specs / results
    JobQueue queue;
    std::thread thread;
    std::exception_ptr error;
  };
  std::vector<SimSpec> specs;
  std::vector<SimResult> results;
  std::vector<std::unique_ptr<Worker>> workers;
  bool joined = false;

  void Run(const SimConfig& config, Worker& w, std::promise<void>& opened);
  void Join() {
    if (joined) return;
    joined = true;
    for (auto& w : workers) w->queue.Close();
    for (auto& w : workers) w->thread.join();
  }
};

// The worker's loop. Its caches are created, used and destroyed on this thread. After an error
// it keeps draining its queue so the producer never blocks.
void Simulation::Workers::Run(const SimConfig& config, Worker& w, std::promise<void>& opened) {
  std::vector<std::unique_ptr<CacheSim>> sims;
  try {
    for (size_t k : w.sims) sims.push_back(std::make_unique<CacheSim>(specs[k].design, config, specs[k].ram_budget));
    opened.set_value();
  } catch (...) {
    sims.clear();
    opened.set_exception(std::current_exception());
    while (w.queue.Pop()) {
    }
    return;
  }
  try {
    while (std::shared_ptr<const Job> job = w.queue.Pop()) {
      const ReplayRequest r{job->index, job->trace, job->prompt, job->output};
      for (size_t i = 0; i < sims.size(); ++i) {
        SimResult& res = results[w.sims[i]];
        const Outcome o = sims[i]->Run(r);
        res.totals.Add(o, int64_t(job->prompt.size()));
        if (specs[w.sims[i]].keep_outcomes) res.outcomes.push_back(o);
      }
    }
    for (size_t i = 0; i < sims.size(); ++i) {
      results[w.sims[i]].counters = sims[i]->counters();
      results[w.sims[i]].sizes = sims[i]->sizes();
    }
  } catch (...) {
    w.error = std::current_exception();
    while (w.queue.Pop()) {
    }
  }
  sims.clear();
}

Simulation::Simulation(const SimConfig& config) : config_(config), workers_(std::make_unique<Workers>()) {
  for (Design d : kAllDesigns) runs_.push_back(DesignRun{d, {}, {}, {}, {}});
  std::vector<uint64_t> budgets = config_.sweep_ram;
  budgets.push_back(config_.ram_budget);
  std::sort(budgets.begin(), budgets.end());
  budgets.erase(std::unique(budgets.begin(), budgets.end()), budgets.end());
  Workers& ws = *workers_;
  ws.specs = {{Design::kCedar, config_.ram_budget, true}, {Design::kDecoderOnlyLru, config_.ram_budget, true}};
  for (uint64_t b : budgets) {
    sweep_.push_back(SweepPoint{b, {}, {}, {}, {}});
    if (b == config_.ram_budget) continue;  // the main caches serve this point
    ws.specs.push_back({Design::kCedar, b, false});
    ws.specs.push_back({Design::kDecoderOnlyLru, b, false});
  }
  ws.results.resize(ws.specs.size());
  size_t threads = config_.threads > 0 ? size_t(config_.threads) : std::max(1u, std::thread::hardware_concurrency());
  threads = std::min(threads, ws.specs.size());
  for (size_t t = 0; t < threads; ++t) ws.workers.push_back(std::make_unique<Workers::Worker>());
  for (size_t k = 0; k < ws.specs.size(); ++k) ws.workers[k % threads]->sims.push_back(k);
  std::vector<std::promise<void>> opened(threads);
  for (size_t t = 0; t < threads; ++t) {
    Workers::Worker* w = ws.workers[t].get();
    std::promise<void>* p = &opened[t];
    w->thread = std::thread([this, w, p] { workers_->Run(config_, *w, *p); });
  }
  try {
    for (auto& p : opened) p.get_future().get();
  } catch (...) {
    ws.Join();
    throw;
  }
}

Simulation::~Simulation() { workers_->Join(); }

void Simulation::Submit(const ReplayRequest& r) {
  const int64_t n = int64_t(r.prompt.size());
  prompt_tokens_.push_back(n);
  auto job = std::make_shared<Job>();
  job->index = r.index;
  job->trace = r.trace;
  job->prompt.assign(r.prompt.begin(), r.prompt.end());
  job->output.assign(r.output.begin(), r.output.end());
  for (auto& w : workers_->workers) w->queue.Push(job);
  for (DesignRun& run : runs_) {
    if (HasCache(run.design)) continue;
    Outcome o;
    if (run.design == Design::kCedNoCache) {
      o.units = CedNoCacheUnits(config_.model, n);
      o.encoder_units = n * config_.model.n_encoder_layers;
      o.decoder_units = o.units - o.encoder_units;
    } else {
      o.units = DecoderOnlyUnits(config_.model, n, 0);
    }
    if (config_.cost.has_time()) o.ttft_s = config_.cost.Seconds(o.units, 0);
    run.totals.Add(o, n);
    run.outcomes.push_back(o);
  }
}

void Simulation::Finish() {
  Workers& ws = *workers_;
  ws.Join();
  for (auto& w : ws.workers) {
    if (w->error) std::rethrow_exception(w->error);
  }
  for (size_t k = 0; k < 2; ++k) {
    SimResult& res = ws.results[k];
    DesignRun& run = runs_[k];  // kAllDesigns starts with cedar, decoder-only-lru
    run.outcomes = std::move(res.outcomes);
    run.totals = res.totals;
    run.counters = res.counters;
    run.final_sizes = res.sizes;
  }
  size_t k = 2;
  for (SweepPoint& p : sweep_) {
    const bool main = p.ram_budget == config_.ram_budget;
    const SimResult& c = main ? ws.results[0] : ws.results[k];
    const SimResult& d = main ? ws.results[1] : ws.results[k + 1];
    p.cedar = main ? runs_[0].totals : c.totals;
    p.decoder_only = main ? runs_[1].totals : d.totals;
    p.cedar_counters = c.counters;
    p.decoder_only_counters = d.counters;
    if (!main) k += 2;
  }
}

}  // namespace cedar::profile
