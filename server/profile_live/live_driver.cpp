#include "server/profile_live/live_driver.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <ostream>
#include <stdexcept>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "server/profile_live/http_client.h"

namespace cedar::profile_live {

namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

// GET that must answer 200 with a JSON object; anything else means this is not a usable server.
json GetJson(const HttpClient& client, const std::string& target) {
  const HttpAnswer a = client.Request("GET", target);
  if (a.status == 0) {
    throw std::runtime_error("cannot reach cedar serve at " + client.address() + " (" + a.error +
                             "). Start it first (cedar serve --model DIR --socket PATH) and pass the same --socket, "
                             "or --url http://HOST:PORT for TCP");
  }
  json j = json::parse(a.body, nullptr, false);
  if (a.status != 200 || !j.is_object()) {
    throw std::runtime_error(fmt::format("{} at {} answered HTTP {}: {}", target, client.address(), a.status,
                                         a.body.substr(0, 300)));
  }
  return j;
}

profile::LiveTarget Describe(const HttpClient& client, std::ostream& log) {
  profile::LiveTarget t;
  t.address = client.address();
  const json models = GetJson(client, "/v1/models");
  const json cache = GetJson(client, "/v1/cache");
  try {
    const json& m = models.at("data").at(0);
    const json& c = m.at("cedar");
    t.model_name = m.at("id").get<std::string>();
    t.model_dir = c.value("dir", "");
    t.vocab_size = c.at("vocab_size").get<int>();
    t.max_seq_len = c.at("max_seq_len").get<int64_t>();
    t.n_layers = c.at("n_layers").get<int>();
    t.n_encoder_layers = c.at("n_encoder_layers").get<int>();
    t.window = c.at("window").get<int>();
    t.ram_budget = cache.at("ram").at("budget_bytes").get<uint64_t>();
    t.disk_budget = cache.at("disk").at("budget_bytes").get<uint64_t>();
  } catch (const json::exception& e) {
    throw std::runtime_error("the server at " + client.address() + " does not describe itself like cedar serve (" +
                             e.what() + ")");
  }
  t.page_tokens = cache.value("page_tokens", size_t(0));
  if (cache.contains("policies")) {
    t.restore_policy = cache["policies"].value("restore", "");
    t.decoder_policy = cache["policies"].value("decoder", "");
  } else {
    log << "live: the server does not report its policies (an older cedar serve); assuming restore replay, decoder "
           "auto, pages of 16 tokens\n";
    t.restore_policy = "replay";
    t.decoder_policy = "auto";
  }
  return t;
}

// The request body: token ids written directly (a 100K-token prompt is 600 KB of JSON).
std::string Body(const profile::ReplayRequest& r, int64_t max_tokens) {
  std::string s;
  s.reserve(r.prompt.size() * 6 + 128);
  s += "{\"prompt\":[";
  for (size_t i = 0; i < r.prompt.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(r.prompt[i]);
  }
  s += fmt::format("],\"max_tokens\":{},\"ignore_eos\":true,\"temperature\":0}}", max_tokens);
  return s;
}

// Fills `o` from the server's answer to a completion.
void Read(const HttpAnswer& a, profile::LiveOutcome& o) {
  o.http_status = a.status;
  if (a.status == 0) {
    o.error = a.error;
    return;
  }
  const json j = json::parse(a.body, nullptr, false);
  if (a.status != 200) {
    o.error = j.is_object() && j.contains("error") && j["error"].is_object() ? j["error"].value("message", a.body)
                                                                             : a.body.substr(0, 300);
    return;
  }
  try {
    const json& usage = j.at("usage");
    const json& c = j.at("cedar");
    o.cached_tokens = usage.at("prompt_tokens_details").at("cached_tokens").get<int64_t>();
    o.output_tokens = usage.at("completion_tokens").get<int64_t>();
    const json& tier = c.at("cached_tokens_by_tier");
    o.cached_live = tier.at("live").get<int64_t>();
    o.cached_ram = tier.at("ram").get<int64_t>();
    o.cached_disk = tier.at("disk").get<int64_t>();
    o.snapshot_hit = c.at("snapshot_hit").get<bool>();
    o.encoder_replay_rows = c.at("encoder_replay_rows").get<int64_t>();
    o.prefill_units = c.at("prefill_units").get<int64_t>();
    o.ttft_s = c.at("ttft_ms").get<double>() / 1e3;
    o.ok = true;
  } catch (const json::exception& e) {
    o.error = std::string("unexpected answer: ") + e.what();
  }
}

class ServerDriver final : public profile::LiveDriver {
 public:
  ServerDriver(const ServerAddress& server, const profile::LiveOptions& options, std::ostream& log)
      : options_(options), client_(server.address, server.api_key, options.request_timeout_s) {
    if (options_.concurrency < 1) throw std::invalid_argument("--concurrency must be >= 1");
    if (!(options_.time_scale >= 0)) throw std::invalid_argument("--time-scale must be >= 0");
    target_ = Describe(client_, log);
    for (int i = 0; i < options_.concurrency; ++i) workers_.emplace_back([this] { Work(); });
  }
  ~ServerDriver() override { Stop(); }

  const profile::LiveTarget& target() const override { return target_; }
  const profile::LiveOptions& options() const override { return options_; }
  const std::vector<profile::LiveOutcome>& outcomes() const override { return outcomes_; }
  double wall_s() const override { return wall_s_; }

  void Submit(const profile::ReplayRequest& r) override {
    if (r.index == 0) {
      start_ = Clock::now();
      t0_ = r.trace->t;
    }
    // Due at its scaled arrival time; back to back (scale 0), as soon as it is handed over, so
    // that late_s is the wait for a free slot either way.
    const double due = options_.time_scale > 0 ? std::max(0.0, (r.trace->t - t0_) * options_.time_scale)
                                               : Seconds(start_, Clock::now());
    int64_t max_tokens = r.trace->output_tokens;
    if (options_.max_tokens >= 0) max_tokens = std::min(max_tokens, options_.max_tokens);
    Job job{r.index, due, Body(r, max_tokens)};
    std::this_thread::sleep_until(start_ + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(due)));
    std::unique_lock lk(mu_);
    outcomes_.resize(std::max(outcomes_.size(), r.index + 1));
    // Keeps the concurrency bound here, so a request's lateness is measured from its due time.
    slot_free_.wait(lk, [&] { return in_flight_ < options_.concurrency; });
    ++in_flight_;
    jobs_.push_back(std::move(job));
    work_.notify_one();
  }

  void Finish() override {
    Stop();
    wall_s_ = last_answer_ > start_ ? Seconds(start_, last_answer_) : 0.0;
  }

 private:
  struct Job {
    size_t index;
    double due_s;
    std::string body;
  };

  void Work() {
    for (;;) {
      Job job;
      {
        std::unique_lock lk(mu_);
        work_.wait(lk, [&] { return !jobs_.empty() || closed_; });
        if (jobs_.empty()) return;
        job = std::move(jobs_.front());
        jobs_.pop_front();
      }
      profile::LiveOutcome o;
      const Clock::time_point sent = Clock::now();
      o.sent_s = Seconds(start_, sent);
      o.late_s = std::max(0.0, o.sent_s - job.due_s);
      const HttpAnswer a = client_.Request("POST", "/v1/completions", job.body);
      const Clock::time_point done = Clock::now();
      o.latency_s = Seconds(sent, done);
      Read(a, o);
      if (o.ok) {
        spdlog::debug("live request {}: cached {} (live {}, ram {}, disk {}), snapshot {}, ttft {:.4f} s, latency {:.4f} s",
                      job.index, o.cached_tokens, o.cached_live, o.cached_ram, o.cached_disk, o.snapshot_hit, o.ttft_s,
                      o.latency_s);
      } else {
        spdlog::debug("live request {}: failed (HTTP {}): {}", job.index, o.http_status, o.error);
      }
      std::lock_guard lk(mu_);
      outcomes_[job.index] = std::move(o);
      last_answer_ = std::max(last_answer_, done);
      --in_flight_;
      slot_free_.notify_one();
    }
  }

  void Stop() {
    {
      std::lock_guard lk(mu_);
      closed_ = true;
      work_.notify_all();
    }
    for (std::thread& w : workers_) {
      if (w.joinable()) w.join();
    }
  }

  const profile::LiveOptions options_;
  const HttpClient client_;
  profile::LiveTarget target_;
  Clock::time_point start_{};
  double t0_ = 0;
  double wall_s_ = 0;
  std::vector<std::thread> workers_;

  std::mutex mu_;  // guards the fields below
  std::condition_variable work_, slot_free_;
  std::deque<Job> jobs_;
  int in_flight_ = 0;
  bool closed_ = false;
  std::vector<profile::LiveOutcome> outcomes_;
  Clock::time_point last_answer_{};
};

}  // namespace

std::unique_ptr<profile::LiveDriver> ConnectLiveDriver(const ServerAddress& server, const profile::LiveOptions& options,
                                                       std::ostream& log) {
  return std::make_unique<ServerDriver>(server, options, log);
}

}  // namespace cedar::profile_live
