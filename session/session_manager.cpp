#include "session/session_manager.h"

#include <spdlog/spdlog.h>
#include <sys/random.h>

#include <cerrno>

#include <algorithm>
#include <cstdio>
#include <condition_variable>
#include <deque>
#include <limits>
#include <list>
#include <mutex>
#include <set>
#include <thread>
#include <unordered_map>

#include "cache/prefix_cache.h"
#include "cache/state_codec.h"
#include "kernels/ops.h"
#include "session/manager_impl.h"
#include "session/turn.h"

namespace cedar::session {

namespace {
// "sess_" + 32 hex digits: 128 bits from getrandom(2) (the kernel's CSPRNG), so one client
// cannot guess another's generated id.
std::string RandomSessionId() {
  unsigned char bytes[16];
  size_t got = 0;
  while (got < sizeof bytes) {
    const ssize_t n = getrandom(bytes + got, sizeof bytes - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw std::runtime_error("getrandom failed: cannot make a session id");
    got += size_t(n);
  }
  static const char* kHex = "0123456789abcdef";
  std::string id = "sess_";
  for (unsigned char b : bytes) {
    id += kHex[b >> 4];
    id += kHex[b & 15];
  }
  return id;
}

double Ms(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}
}  // namespace

void SessionManager::Impl::Loop() {
  for (;;) {
    std::deque<std::function<void()>> batch;
    {
      std::unique_lock<std::mutex> lk(mu);
      cv.wait(lk, [&] { return !tasks.empty() || !active.empty() || !waiting.empty() || stopping; });
      batch.swap(tasks);
      if (stopping && batch.empty() && active.empty() && waiting.empty()) break;
    }
    for (auto& f : batch) f();
    bool cancel;
    {
      std::lock_guard<std::mutex> lk(mu);
      cancel = cancel_all;
    }
    if (cancel) {
      for (ActiveTurn& t : waiting) Cancel(t);
      for (ActiveTurn& t : active)
        if (!t.done) t.phase == ActiveTurn::Phase::kDecoding ? Finish(t, "cancelled") : Cancel(t);
    }
    Step();
    waiting.remove_if([](const ActiveTurn& t) { return t.done; });
    active.remove_if([](const ActiveTurn& t) { return t.done; });
    PublishStats();
  }
  for (auto& [id, s] : sessions) s.prefix.Release();  // handles must go before the cache
  if (cache) {
    cache::Status s = cache->Flush();
    if (!s.ok()) spdlog::warn("cache flush at shutdown: {}", s.ToString());
  }
}

std::string SessionManager::Impl::Key(SessionOwner owner, const std::string& id) {
  char prefix[24];
  std::snprintf(prefix, sizeof prefix, "%016llx/", (unsigned long long)owner);
  return prefix + id;
}

void SessionManager::Impl::PublishStats() {
  EngineMetrics m = metrics;
  m.sessions = int64_t(sessions.size());
  m.max_sessions = opt.max_sessions;
  for (const auto& [key, s] : sessions) m.live_sessions += s.live ? 1 : 0;
  m.live_state_bytes = LiveBytes();
  m.session_pinned_bytes = SessionPinnedBytes();
  m.session_ram_budget = SessionRamBudget();
  const cache::CacheSizes s = cache->Sizes();
  const cache::CacheCounters c = cache->Counters();
  m.ram_bytes = s.ram.used_bytes();
  m.disk_bytes = s.disk.used_bytes();
  m.ram_budget = s.ram.budget_bytes;
  m.disk_budget = s.disk.budget_bytes;
  m.page_tokens = int64_t(opt.page_tokens);
  m.snapshots_dropped = c.snapshots_dropped;
  m.pages_spilled = c.pages_spilled;
  m.disk_entries_deleted = c.disk_entries_deleted;
  m.corrupt_entries = c.corrupt_entries_dropped;
  m.remote_enabled = cache->has_remote_tier();
  m.remote = cache->RemoteCounters();
  for (const ActiveTurn& t : active) {
    if (t.done) continue;
    (t.phase == ActiveTurn::Phase::kDecoding ? m.decoding_turns : m.prefilling_turns)++;
  }
  {
    std::lock_guard<std::mutex> lk(mu);
    m.queued_turns = queued;
    m.turns_queue_full = queue_full_refusals;
  }
  std::lock_guard<std::mutex> lk(stats_mu);
  stats = m;
}

std::unique_ptr<SessionManager> SessionManager::Start(std::shared_ptr<const Model> model, ManagerOptions options) {
  auto impl = std::make_unique<Impl>();
  impl->model = model;
  impl->opt = options;
  impl->backend = MakeBackend(*impl->model, options.backend);  // first: a missing device fails before the cache opens
  spdlog::info("session manager on {}", impl->backend->Describe());
  Impl::CheckSpeculation(*impl->model, *impl->backend, options);
  cache::PrefixCacheConfig cc;
  cc.page_tokens = options.page_tokens;
  cc.ram_budget_bytes = options.cache_ram_bytes;
  cc.disk_dir = options.cache_dir;
  cc.disk_budget_bytes = options.cache_disk_bytes;
  cc.remote = options.cache_remote;
  auto opened = cache::PrefixCache::Open(model->fingerprint(), cc);
  if (!opened.ok()) throw std::runtime_error("cannot open the prefix cache: " + opened.status().ToString());
  impl->cache = std::move(opened).value();
  spdlog::info("session memory budget {} bytes (live states + pinned prefixes), at most {} sessions",
               impl->SessionRamBudget(), options.max_sessions);
  std::unique_ptr<SessionManager> m(new SessionManager(std::move(model), std::move(impl)));
  m->device_ = m->impl_->backend->name();
  m->device_detail_ = m->impl_->backend->Describe();
  if (options.scheduler.kind == SchedulerKind::kMixed && !m->impl_->backend->SupportsChunkedPrefill()) {
    spdlog::warn("the {} backend has no chunked prefill: the serial scheduler runs every prefill whole", m->device_);
    m->impl_->opt.scheduler.kind = SchedulerKind::kSerial;
  }
  if (options.scheduler.batch_prefill && !m->impl_->backend->SupportsBatchedPrefill())
    spdlog::warn("the {} backend has no batched prefill: each turn's chunks run alone", m->device_);
  m->scheduler_ = m->impl_->opt.scheduler.kind;
  spdlog::info("scheduler {}: step {} tokens{}, prefill chunks of {} ({}){}{}, {} prefilling turns at most, {} queued turns at most",
               SchedulerName(m->scheduler_), options.scheduler.step_tokens,
               options.scheduler.step_ms > 0 ? fmt::format(" or {} ms", options.scheduler.step_ms) : "",
               options.scheduler.max_prefill_chunk,
               PrefillOrderName(options.scheduler.prefill_order),
               options.scheduler.batch_prefill ? " (batched across turns)" : "",
               options.scheduler.decoder_phase_in_parts ? ", decoder phases in parts" : "",
               options.scheduler.max_prefilling_turns, options.scheduler.max_queued_turns);
  Impl* raw = m->impl_.get();
  raw->PublishStats();  // before the engine thread starts: the budgets are known at once
  raw->engine = std::thread([raw] { raw->Loop(); });
  return m;
}

SessionManager::SessionManager(std::shared_ptr<const Model> model, std::unique_ptr<Impl> impl)
    : model_(std::move(model)), impl_(std::move(impl)) {}

SessionManager::~SessionManager() { Shutdown(true); }

void SessionManager::Shutdown(bool cancel) {
  {
    std::lock_guard<std::mutex> lk(impl_->mu);
    impl_->stopping = true;
    impl_->cancel_all = impl_->cancel_all || cancel;
  }
  impl_->cv.notify_one();
  if (impl_->engine.joinable()) impl_->engine.join();
}

std::future<TurnResult> SessionManager::Submit(TurnRequest request) {
  auto turn = std::make_shared<ActiveTurn>();
  turn->request = std::move(request);
  turn->submitted = std::chrono::steady_clock::now();
  std::future<TurnResult> fut = turn->promise.get_future();
  auto refuse = [&](ErrorKind k, const std::string& msg) {
    TurnResult r;
    r.finish_reason = "error";
    r.error_kind = k;
    r.error = msg;
    turn->promise.set_value(std::move(r));
  };
  {
    std::lock_guard<std::mutex> lk(impl_->mu);
    if (impl_->stopping) {
      refuse(ErrorKind::kShuttingDown, "the server is shutting down");
      return fut;
    }
    const std::string& sid = turn->request.session_id;
    if (!sid.empty()) {
      const std::string key = Impl::Key(turn->request.owner, sid);
      if (!impl_->ids.count(key)) {
        refuse(ErrorKind::kSessionNotFound, "unknown session '" + sid + "'");
        return fut;
      }
      if (impl_->busy.count(key)) {
        refuse(ErrorKind::kSessionBusy, "session '" + sid + "' already has a turn in flight");
        return fut;
      }
    }
    const int64_t limit = impl_->opt.scheduler.max_queued_turns;
    if (limit > 0 && impl_->queued >= limit) {
      impl_->queue_full_refusals++;
      refuse(ErrorKind::kQueueFull, std::to_string(impl_->queued) + " turns are waiting already (--max-queued-turns " +
                                        std::to_string(limit) + "); retry later");
      return fut;
    }
    if (!sid.empty()) impl_->busy.insert(Impl::Key(turn->request.owner, sid));
    impl_->queued++;
    turn->seq = impl_->next_seq++;
    Impl* impl = impl_.get();
    impl_->tasks.push_back([impl, turn] {
      // Into the queue; Step admits it (by priority, then arrival).
      impl->waiting.push_back(ActiveTurn{});
      ActiveTurn& t = impl->waiting.back();
      t.request = std::move(turn->request);
      t.promise = std::move(turn->promise);
      t.submitted = turn->submitted;
      t.seq = turn->seq;
    });
  }
  impl_->cv.notify_one();
  return fut;
}

std::string SessionManager::CreateSession(const std::string& id, const std::vector<int32_t>& pin_prefix, double pin_ttl_s,
                                          SessionOwner owner, cache::TenantSalt salt) {
  return impl_->Call<std::string>([this, id, pin_prefix, pin_ttl_s, owner, salt]() -> std::string {
    Impl& I = *impl_;
    std::string sid = id;
    if (sid.empty()) {
      do sid = RandomSessionId();
      while (I.sessions.count(Impl::Key(owner, sid)));
    } else if (I.sessions.count(Impl::Key(owner, sid))) {
      throw std::invalid_argument("session '" + sid + "' already exists");
    }
    // Every session counts, live or demoted into the cache: ids and histories are bounded too.
    if (int64_t(I.sessions.size()) >= int64_t(I.opt.max_sessions))
      throw SessionLimitError("session limit reached: " + std::to_string(I.sessions.size()) +
                              " sessions exist (--max-sessions " + std::to_string(I.opt.max_sessions) +
                              "); delete one first");
    Session s;
    s.id = sid;
    s.owner = owner;
    s.pin_salt = salt;
    if (!pin_prefix.empty()) {
      const ModelConfig& c = I.model->config();
      for (int32_t t : pin_prefix)
        if (t < 0 || t >= c.vocab_size) throw std::invalid_argument("pin prefix: token outside the vocabulary");
      if (int64_t(pin_prefix.size()) > c.max_seq_len) throw std::invalid_argument("pin prefix longer than the model's limit");
      // Prefill it once (the encoder makes everything the cache keeps), snapshot at its last
      // page boundary, insert, and soft-pin: sessions sharing it restore exactly.
      std::unique_ptr<Sequence> seq = I.backend->NewSequence();
      I.PrepareState(*seq);
      PrefillOptions po;
      po.mode = PrefillMode::kBounded;
      po.chunk_size = 2048;
      I.backend->Prefill(*seq, pin_prefix, po);
      std::optional<SequenceState> copy;
      const SequenceState& st = I.HostView(*seq, copy);  // one Download on a device
      std::vector<cache::SnapshotInput> snaps;
      const int64_t b = int64_t(pin_prefix.size() / I.opt.page_tokens * I.opt.page_tokens);
      if (auto snap = I.SnapshotAt(st, b)) snaps.push_back(*snap);
      I.InsertIntoCache(st, snaps, salt, &s);
      auto pinned = I.cache->SoftPin(pin_prefix, salt, std::chrono::milliseconds(int64_t(pin_ttl_s * 1000)));
      if (!pinned.ok()) spdlog::warn("session {}: soft pin refused: {}", sid, pinned.status().ToString());
      s.pinned_prefix = pin_prefix;
    }
    const std::string key = Impl::Key(owner, sid);
    I.sessions.emplace(key, std::move(s));
    {
      std::lock_guard<std::mutex> lk(I.mu);
      I.ids.insert(key);
    }
    return sid;
  });
}

namespace {
SessionInfo InfoOf(const Session& s) {
  SessionInfo info;
  info.id = s.id;
  info.live = s.live != nullptr;
  info.tokens = s.live ? s.live->pos() : 0;
  info.turns = s.turns;
  info.pinned_tokens = int64_t(s.pinned_prefix.size());
  info.idle_seconds = Ms(s.last_used, std::chrono::steady_clock::now()) / 1000.0;
  return info;
}
}  // namespace

std::optional<SessionInfo> SessionManager::GetSession(const std::string& id, SessionOwner owner) {
  return impl_->Call<std::optional<SessionInfo>>([this, id, owner]() -> std::optional<SessionInfo> {
    auto it = impl_->sessions.find(Impl::Key(owner, id));
    if (it == impl_->sessions.end()) return std::nullopt;
    return InfoOf(it->second);
  });
}

std::vector<SessionInfo> SessionManager::ListSessions(SessionOwner owner) {
  return ListSessions(std::numeric_limits<size_t>::max(), "", owner).data;
}

// One engine round trip per page; the ids are sorted here (max_sessions bounds the work).
SessionPage SessionManager::ListSessions(size_t limit, const std::string& after, SessionOwner owner) {
  return impl_->Call<SessionPage>([this, limit, after, owner] {
    std::vector<const Session*> all;
    for (const auto& [key, s] : impl_->sessions)
      if (s.owner == owner && (after.empty() || s.id > after)) all.push_back(&s);
    std::sort(all.begin(), all.end(), [](const Session* a, const Session* b) { return a->id < b->id; });
    SessionPage page;
    page.has_more = all.size() > limit;
    if (page.has_more) all.resize(limit);
    for (const Session* s : all) page.data.push_back(InfoOf(*s));
    return page;
  });
}

SessionManager::DeleteOutcome SessionManager::DeleteSession(const std::string& id, SessionOwner owner) {
  const std::string key = Impl::Key(owner, id);
  return impl_->Call<DeleteOutcome>([this, key] {
    {
      // Under the lock Submit admits turns with: no turn can be admitted on `key` after this.
      std::lock_guard<std::mutex> lk(impl_->mu);
      if (impl_->busy.count(key)) return DeleteOutcome::kBusy;
      if (!impl_->ids.erase(key)) return DeleteOutcome::kNotFound;
    }
    auto it = impl_->sessions.find(key);
    if (it == impl_->sessions.end()) return DeleteOutcome::kNotFound;  // not reached: ids mirrors sessions
    if (!it->second.pinned_prefix.empty()) (void)impl_->cache->SoftUnpin(it->second.pinned_prefix, it->second.pin_salt);
    it->second.prefix.Release();
    impl_->sessions.erase(it);
    return DeleteOutcome::kDeleted;
  });
}

size_t SessionManager::FlushCachePartition(cache::TenantSalt salt) {
  return impl_->Call<size_t>([this, salt] { return impl_->cache->DropPartition(salt); });
}

std::string SessionManager::CheckCacheIntegrity() {
  return impl_->Call<std::string>([this] {
    const cache::Status s = impl_->cache->CheckIntegrity();
    return s.ok() ? std::string() : s.ToString();
  });
}

void SessionManager::DrainRemoteWrites() {
  impl_->Call<int>([this] {
    impl_->cache->DrainRemoteWrites();
    impl_->PublishStats();
    return 0;
  });
}

EngineMetrics SessionManager::Metrics() {
  EngineMetrics m;
  {
    std::lock_guard<std::mutex> lk(impl_->stats_mu);
    m = impl_->stats;
  }
  // The queue as Submit sees it now (it changes without the engine thread).
  std::lock_guard<std::mutex> lk(impl_->mu);
  m.queued_turns = impl_->queued;
  m.turns_queue_full = impl_->queue_full_refusals;
  return m;
}

}  // namespace cedar::session
