#include "cache/remote_store.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <signal.h>
#include <cstring>
#include <sys/time.h>

#include "cache/entry_codec.h"

#if defined(CEDAR_HAVE_HIREDIS)
#include <hiredis/hiredis.h>
#endif

namespace cedar::cache::detail {

using Clock = std::chrono::steady_clock;

struct RemoteStore::Counters {
  std::atomic<uint64_t> reads{0}, page_hits{0}, page_misses{0}, snapshot_hits{0}, corrupt{0}, timeouts{0}, errors{0},
      skipped{0}, outages{0}, reconnects{0}, pages_written{0}, snapshots_written{0}, refreshed{0}, write_failures{0},
      writes_dropped{0};
  std::atomic<bool> down{false};        // an outage is in progress (logged once)
  std::atomic<bool> reader_up{false};
  std::string where;

  // The first fault after a working connection (or at start) is logged; the rest of the outage
  // is counted only.
  void Fault(const std::string& what) {
    if (!down.exchange(true)) {
      ++outages;
      spdlog::warn("remote cache tier {}: {}; turns compute what they miss, reconnecting with backoff (logged once "
                   "per outage)", where, what);
    } else {
      spdlog::debug("remote cache tier {}: {}", where, what);
    }
  }
  void Up() {
    if (down.exchange(false)) {
      ++reconnects;
      spdlog::info("remote cache tier {}: connected again", where);
    }
  }
};

#if defined(CEDAR_HAVE_HIREDIS)

namespace {
struct ReplyDeleter {
  void operator()(redisReply* r) const {
    if (r) freeReplyObject(r);
  }
};
using Reply = std::unique_ptr<redisReply, ReplyDeleter>;

timeval ToTimeval(std::chrono::microseconds d) {
  if (d.count() < 1000) d = std::chrono::microseconds(1000);  // a zero timeval means "block forever"
  return timeval{static_cast<time_t>(d.count() / 1'000'000), static_cast<suseconds_t>(d.count() % 1'000'000)};
}
}  // namespace

// One hiredis context and its reconnect schedule. Used by one thread only.
class RemoteConnection {
 public:
  RemoteConnection(const RemoteEndpoint& e, const RemoteTierConfig& c, RemoteStore::Counters* counters)
      : endpoint_(e), config_(c), counters_(counters) {}
  ~RemoteConnection() { Close(); }

  // A usable context, connecting if the backoff allows; null (counted as skipped or an error)
  // when Redis cannot be reached now. `budget` bounds the connect.
  redisContext* Get(std::chrono::microseconds budget) {
    if (ctx_) return ctx_;
    const auto now = Clock::now();
    if (now < next_attempt_) {
      ++counters_->skipped;
      return nullptr;
    }
    const timeval tv = ToTimeval(budget);
    redisContext* c = endpoint_.unix_socket ? redisConnectUnixWithTimeout(endpoint_.path.c_str(), tv)
                                            : redisConnectWithTimeout(endpoint_.host.c_str(), endpoint_.port, tv);
    if (c == nullptr || c->err) {
      ++counters_->errors;
      Failed(c ? std::string("cannot connect: ") + c->errstr : "cannot allocate a hiredis context");
      if (c) redisFree(c);
      return nullptr;
    }
    ctx_ = c;
    if (endpoint_.db != 0) {
      Reply r(static_cast<redisReply*>(redisCommand(ctx_, "SELECT %d", endpoint_.db)));
      if (!r || r->type == REDIS_REPLY_ERROR) {
        ++counters_->errors;
        Failed(fmt::format("SELECT {} failed: {}", endpoint_.db, r ? std::string(r->str, r->len) : ctx_->errstr));
        return nullptr;
      }
    }
    backoff_ = std::chrono::milliseconds(0);
    counters_->Up();
    return ctx_;
  }

  // Sets the socket timeout for the next replies (the time left until the deadline).
  void SetTimeout(std::chrono::microseconds d) {
    if (ctx_) redisSetTimeout(ctx_, ToTimeval(d));
  }

  // The connection failed (I/O error, timeout, protocol): drop it and schedule the next attempt.
  void Failed(const std::string& what) {
    Close();
    backoff_ = backoff_.count() == 0 ? config_.backoff_min : std::min(backoff_ * 2, config_.backoff_max);
    next_attempt_ = Clock::now() + backoff_;
    counters_->Fault(what);
  }

  bool connected() const { return ctx_ != nullptr; }

  void Close() {
    if (ctx_) redisFree(ctx_);
    ctx_ = nullptr;
  }

 private:
  const RemoteEndpoint endpoint_;
  const RemoteTierConfig config_;
  RemoteStore::Counters* counters_;
  redisContext* ctx_ = nullptr;
  std::chrono::milliseconds backoff_{0};
  Clock::time_point next_attempt_{};
};

#else  // !CEDAR_HAVE_HIREDIS

class RemoteConnection {
 public:
  RemoteConnection(const RemoteEndpoint&, const RemoteTierConfig&, RemoteStore::Counters*) {}
};

#endif

Result<std::unique_ptr<RemoteStore>> RemoteStore::Open(const RemoteTierConfig& config, ModelFingerprint fingerprint,
                                                       size_t page_tokens) {
#if !defined(CEDAR_HAVE_HIREDIS)
  return Status::FailedPrecondition("--cache-remote: this build has no Redis client (libhiredis-dev was not found)");
#else
  auto endpoint = ParseRemoteUrl(config.url);
  if (!endpoint.ok()) return endpoint.status();
  if (config.timeout.count() <= 0) return Status::InvalidArgument("--cache-remote-timeout must be > 0");
  if (config.ttl.count() < 1000) return Status::InvalidArgument("--cache-remote-ttl must be at least 1s");
  // hiredis writes with write(2): a Redis that goes away mid-write raises SIGPIPE, whose default
  // action ends the process. A fault must be a miss, so the signal is ignored (write then fails
  // with EPIPE) unless the program installed its own handler (`cedar serve` ignores it already).
  struct sigaction old {};
  if (::sigaction(SIGPIPE, nullptr, &old) == 0 && old.sa_handler == SIG_DFL) {
    std::signal(SIGPIPE, SIG_IGN);
    spdlog::debug("remote cache tier: SIGPIPE ignored (a Redis that goes away is a miss)");
  }
  std::unique_ptr<RemoteStore> store(new RemoteStore(config, endpoint.value(), fingerprint, page_tokens));
  spdlog::info("remote cache tier: {} (ttl {} s, read deadline {} ms)", store->endpoint_.Describe(),
               config.ttl.count() / 1000, config.timeout.count());
  return store;
#endif
}

RemoteStore::RemoteStore(const RemoteTierConfig& config, const RemoteEndpoint& endpoint, ModelFingerprint fingerprint,
                         size_t page_tokens)
    : config_(config), endpoint_(endpoint), fingerprint_(fingerprint), page_tokens_(page_tokens),
      counters_(std::make_unique<Counters>()) {
  counters_->where = endpoint_.Describe();
  reader_ = std::make_unique<RemoteConnection>(endpoint_, config_, counters_.get());
  writer_ = std::make_unique<RemoteConnection>(endpoint_, config_, counters_.get());
  writer_thread_ = std::thread([this] { WriterLoop(); });
}

RemoteStore::~RemoteStore() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  if (writer_thread_.joinable()) writer_thread_.join();
}

std::string RemoteStore::Key(uint64_t digest, EntryKind kind) const {
  return fmt::format("cedar:{:016x}:{:016x}:{}", fingerprint_, digest, kind == EntryKind::kPage ? 'p' : 's');
}

RemoteStats RemoteStore::Stats() const {
  const Counters& c = *counters_;
  RemoteStats s;
  s.reads = c.reads;
  s.page_hits = c.page_hits;
  s.page_misses = c.page_misses;
  s.snapshot_hits = c.snapshot_hits;
  s.corrupt = c.corrupt;
  s.timeouts = c.timeouts;
  s.errors = c.errors;
  s.skipped = c.skipped;
  s.outages = c.outages;
  s.reconnects = c.reconnects;
  s.pages_written = c.pages_written;
  s.snapshots_written = c.snapshots_written;
  s.refreshed = c.refreshed;
  s.write_failures = c.write_failures;
  s.writes_dropped = c.writes_dropped;
  s.connected = c.reader_up;
  {
    std::lock_guard lock(const_cast<std::mutex&>(mu_));
    s.queued_bytes = queued_bytes_;
  }
  return s;
}

// ---- Writes ----

bool RemoteStore::Enqueue(WriteJob job) {
  std::lock_guard lock(mu_);
  if (queued_bytes_ + job.bytes() > config_.max_queued_bytes) {
    ++counters_->writes_dropped;
    return false;
  }
  queued_bytes_ += job.bytes();
  ++queued_epoch_;
  queue_.push_back(std::move(job));
  return true;
}

Status RemoteStore::Put(std::span<const PageWrite> pages, std::span<const SnapshotWrite> snapshots) {
  for (const PageWrite& p : pages) {
    WriteJob j;
    j.kind = EntryKind::kPage;
    j.page = p.meta;
    j.tokens.assign(p.tokens.begin(), p.tokens.end());
    j.payload = p.payload;
    Enqueue(std::move(j));
  }
  for (const SnapshotWrite& s : snapshots) {
    WriteJob j;
    j.kind = EntryKind::kSnapshot;
    j.snapshot = s.meta;
    j.payload = s.payload;
    Enqueue(std::move(j));
  }
  if (!pages.empty() || !snapshots.empty()) wake_.notify_one();
  return Status::Ok();
}

void RemoteStore::Refresh(std::span<const PageWrite> pages) {
  for (const PageWrite& p : pages) {
    WriteJob j;
    j.kind = EntryKind::kPage;
    j.refresh = true;
    j.page = p.meta;
    j.tokens.assign(p.tokens.begin(), p.tokens.end());
    j.payload = p.payload;
    Enqueue(std::move(j));
  }
  if (!pages.empty()) wake_.notify_one();
}

void RemoteStore::Drain() {
  std::unique_lock lock(mu_);
  const uint64_t target = queued_epoch_;
  wake_.notify_one();
  drained_.wait(lock, [&] { return sent_epoch_ >= target || stop_; });
}

void RemoteStore::WriterLoop() {
  constexpr size_t kMaxBatchJobs = 256;
  constexpr uint64_t kMaxBatchBytes = 64ull << 20;
  const auto stop_deadline_budget = std::chrono::seconds(1);
  std::optional<Clock::time_point> stop_deadline;
  for (;;) {
    std::vector<WriteJob> batch;
    {
      std::unique_lock lock(mu_);
      wake_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (stop_ && !stop_deadline) stop_deadline = Clock::now() + stop_deadline_budget;
      if (queue_.empty() || (stop_deadline && Clock::now() > *stop_deadline)) {
        counters_->writes_dropped += queue_.size();
        queue_.clear();
        queued_bytes_ = 0;
        sent_epoch_ = queued_epoch_;
        drained_.notify_all();
        if (stop_) return;
        continue;
      }
      uint64_t bytes = 0;
      while (!queue_.empty() && batch.size() < kMaxBatchJobs && (batch.empty() || bytes < kMaxBatchBytes)) {
        bytes += queue_.front().bytes();
        batch.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
      queued_bytes_ -= bytes;
    }
    SendBatch(batch);
    {
      std::lock_guard lock(mu_);
      sent_epoch_ += batch.size();
    }
    drained_.notify_all();
  }
}

void RemoteStore::SendBatch(std::vector<WriteJob>& batch) {
#if defined(CEDAR_HAVE_HIREDIS)
  // Writes are off the turn's path: a more generous deadline per reply than a read's (a batch
  // may carry tens of MB), yet short enough that a stalled Redis does not hold the queue long.
  const auto budget = std::max<std::chrono::microseconds>(config_.timeout * 5, std::chrono::milliseconds(250));
  redisContext* c = writer_->Get(budget);
  if (c == nullptr) {
    counters_->writes_dropped += batch.size();
    return;
  }
  writer_->SetTimeout(budget);
  const std::string ttl_ms = std::to_string(config_.ttl.count());
  // Round 1: EXPIRE (in ms) of every refresh; an entry found keeps its value and gets a new TTL.
  std::vector<size_t> refresh;
  for (size_t i = 0; i < batch.size(); ++i) {
    if (!batch[i].refresh) continue;
    const std::string key = Key(batch[i].page.digest, batch[i].kind);
    const char* argv[] = {"PEXPIRE", key.c_str(), ttl_ms.c_str()};
    const size_t len[] = {7, key.size(), ttl_ms.size()};
    redisAppendCommandArgv(c, 3, argv, len);
    refresh.push_back(i);
  }
  std::vector<bool> send(batch.size(), true);
  for (size_t i : refresh) {
    void* raw = nullptr;
    if (redisGetReply(c, &raw) != REDIS_OK) {
      writer_->Failed(fmt::format("write pipeline: {}", c->errstr));
      counters_->writes_dropped += batch.size();
      return;
    }
    Reply r(static_cast<redisReply*>(raw));
    if (r->type == REDIS_REPLY_INTEGER && r->integer == 1) {
      send[i] = false;
      ++counters_->refreshed;
    }
  }
  // Round 2: SET key value PX ttl for the new entries and the refreshes Redis had lost.
  std::vector<size_t> sent;
  std::string value;
  for (size_t i = 0; i < batch.size(); ++i) {
    if (!send[i]) continue;
    WriteJob& j = batch[i];
    if (!j.payload) continue;  // a refresh of a page no longer in RAM: nothing to resend
    uint64_t digest = 0;
    if (j.kind == EntryKind::kPage) {
      value.resize(PageValueBytes(j.tokens.size(), j.payload->size()));
      EncodePageValue(j.page, fingerprint_, j.tokens, *j.payload, reinterpret_cast<uint8_t*>(value.data()));
      digest = j.page.digest;
    } else {
      value.resize(SnapshotValueBytes(j.payload->size()));
      EncodeSnapshotValue(j.snapshot, fingerprint_, *j.payload, reinterpret_cast<uint8_t*>(value.data()));
      digest = j.snapshot.digest;
    }
    const std::string key = Key(digest, j.kind);
    const char* argv[] = {"SET", key.c_str(), value.data(), "PX", ttl_ms.c_str()};
    const size_t len[] = {3, key.size(), value.size(), 2, ttl_ms.size()};
    redisAppendCommandArgv(c, 5, argv, len);  // copies the arguments into hiredis's buffer
    sent.push_back(i);
  }
  for (size_t i : sent) {
    void* raw = nullptr;
    if (redisGetReply(c, &raw) != REDIS_OK) {
      writer_->Failed(fmt::format("write pipeline: {}", c->errstr));
      counters_->writes_dropped += sent.size();
      return;
    }
    Reply r(static_cast<redisReply*>(raw));
    if (r->type == REDIS_REPLY_ERROR) {
      // Full under maxmemory noeviction ("OOM command not allowed ..."): the entry is not kept.
      ++counters_->write_failures;
      spdlog::debug("remote cache tier: SET refused: {}", std::string(r->str, r->len));
      continue;
    }
    ++(batch[i].kind == EntryKind::kPage ? counters_->pages_written : counters_->snapshots_written);
  }
#else
  counters_->writes_dropped += batch.size();
#endif
}

// ---- Reads ----

#if defined(CEDAR_HAVE_HIREDIS)
namespace {

// Sends `commands` (argv lists) as one pipeline and collects the replies, within `deadline`.
// False on a connection fault or a timeout (the connection is dropped: replies may be pending).
bool Pipeline(RemoteConnection& conn, redisContext* c, const std::vector<std::vector<std::string>>& commands,
              Clock::time_point deadline, std::vector<Reply>* replies, RemoteStore::Counters& counters) {
  for (const auto& cmd : commands) {
    std::vector<const char*> argv;
    std::vector<size_t> len;
    for (const std::string& a : cmd) {
      argv.push_back(a.data());
      len.push_back(a.size());
    }
    redisAppendCommandArgv(c, int(argv.size()), argv.data(), len.data());
  }
  for (size_t i = 0; i < commands.size(); ++i) {
    const auto left = std::chrono::duration_cast<std::chrono::microseconds>(deadline - Clock::now());
    if (left.count() <= 0) {
      ++counters.timeouts;
      conn.Failed("a read passed its deadline");
      return false;
    }
    conn.SetTimeout(left);
    void* raw = nullptr;
    if (redisGetReply(c, &raw) != REDIS_OK) {
      // hiredis reports a socket timeout as an I/O error whose text is strerror(EAGAIN).
      const bool timed_out = c->err == REDIS_ERR_IO && (std::strcmp(c->errstr, std::strerror(EAGAIN)) == 0 ||
                                                        std::strcmp(c->errstr, std::strerror(EWOULDBLOCK)) == 0);
      ++(timed_out ? counters.timeouts : counters.errors);
      conn.Failed(timed_out ? std::string("a read passed its deadline") : std::string("read: ") + c->errstr);
      return false;
    }
    replies->emplace_back(static_cast<redisReply*>(raw));
  }
  return true;
}

std::span<const uint8_t> BytesOf(const redisReply& r) {
  return {reinterpret_cast<const uint8_t*>(r.str), r.len};
}

}  // namespace
#endif

RemoteStore::FetchResult RemoteStore::Fetch(std::span<const PageRead> pages,
                                            std::span<const SnapshotMeta> snapshot_candidates,
                                            size_t base_tokens) const {
  FetchResult out;
#if defined(CEDAR_HAVE_HIREDIS)
  if (pages.empty() && snapshot_candidates.empty()) return out;
  const auto deadline = Clock::now() + config_.timeout;
  redisContext* c = reader_->Get(config_.timeout);
  counters_->reader_up = c != nullptr;
  if (c == nullptr) return out;
  ++counters_->reads;
  std::vector<std::vector<std::string>> cmds;
  for (const PageRead& p : pages) cmds.push_back({"GET", Key(p.meta.digest, EntryKind::kPage)});
  for (const SnapshotMeta& s : snapshot_candidates) cmds.push_back({"EXISTS", Key(s.digest, EntryKind::kSnapshot)});
  std::vector<Reply> replies;
  if (!Pipeline(*reader_, c, cmds, deadline, &replies, *counters_)) {
    counters_->reader_up = false;
    return out;
  }
  for (size_t i = 0; i < pages.size(); ++i) {
    const redisReply& r = *replies[i];
    if (r.type != REDIS_REPLY_STRING) {
      if (i == 0) ++counters_->page_misses;
      break;
    }
    auto payload = VerifyPageValue(BytesOf(r), fingerprint_, page_tokens_, pages[i]);
    if (!payload.ok()) {
      ++counters_->corrupt;
      spdlog::debug("remote cache tier: page {} rejected: {}", pages[i].meta.page_index, payload.status().message());
      break;
    }
    out.pages.push_back(MakePayload(std::vector<uint8_t>(payload->begin(), payload->end())));
  }
  counters_->page_hits += out.pages.size();
  // The deepest existing candidate within reach, then the next ones if it fails verification.
  const size_t reach = base_tokens + out.pages.size() * page_tokens_;
  std::vector<size_t> order;
  for (size_t i = 0; i < snapshot_candidates.size(); ++i) {
    const redisReply& r = *replies[pages.size() + i];
    if (r.type == REDIS_REPLY_INTEGER && r.integer == 1 && snapshot_candidates[i].position <= reach) order.push_back(i);
  }
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return snapshot_candidates[a].position > snapshot_candidates[b].position; });
  for (size_t i : order) {
    std::vector<Reply> got;
    if (!Pipeline(*reader_, c, {{"GET", Key(snapshot_candidates[i].digest, EntryKind::kSnapshot)}}, deadline, &got,
                  *counters_)) {
      counters_->reader_up = false;
      break;
    }
    if (got[0]->type != REDIS_REPLY_STRING) continue;  // evicted since the EXISTS
    auto payload = VerifySnapshotValue(BytesOf(*got[0]), fingerprint_, snapshot_candidates[i]);
    if (!payload.ok()) {
      ++counters_->corrupt;
      spdlog::debug("remote cache tier: snapshot at {} rejected: {}", snapshot_candidates[i].position,
                    payload.status().message());
      continue;
    }
    out.snapshot = snapshot_candidates[i];
    out.snapshot_payload = MakePayload(std::vector<uint8_t>(payload->begin(), payload->end()));
    ++counters_->snapshot_hits;
    break;
  }
#endif
  return out;
}

Status RemoteStore::Read(std::span<const PageRead> pages, std::vector<Payload>* out) const {
  FetchResult r = Fetch(pages, {}, 0);
  const size_t got = r.pages.size();
  for (Payload& p : r.pages) out->push_back(std::move(p));
  if (got < pages.size()) return Status::NotFound(fmt::format("page {} is not in the remote tier (or failed verification)", got));
  return Status::Ok();
}

Result<Payload> RemoteStore::ReadSnapshot(const SnapshotMeta& want) const {
  FetchResult r = Fetch({}, {&want, 1}, want.position);
  if (!r.snapshot) return Status::NotFound(fmt::format("no usable snapshot at {} in the remote tier", want.position));
  return r.snapshot_payload;
}

}  // namespace cedar::cache::detail
