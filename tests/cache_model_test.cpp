// Randomized model-based test of the prefix cache: random inserts, acquires, pins, snapshots,
// evictions, flushes and restarts under tiny budgets, checked after every step against a
// reference model and CheckIntegrity().
//
// The reference model: a page's payload is a pure function of (tenant, tokens up to the page
// end), so anything the cache returns can be checked exactly; the latest snapshot set for each
// prefix is recorded. Properties:
//   - every returned page payload equals the payload inserted for those tokens;
//   - a returned snapshot is the latest one set for its prefix (also after restarts: a replaced
//     snapshot never comes back from disk);
//   - every held handle's prefix stays fully matchable, in RAM;
//   - a restart after a successful Flush() keeps every cached prefix and every snapshot (pages
//     and snapshots survive restarts when flushed);
//   - with budgets too large to evict, everything inserted, snapshots included, stays matchable
//     and acquirable (across restarts).
#include <doctest/doctest.h>
#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <random>

#include "cache/prefix_cache.h"

namespace cedar::cache {
namespace {

struct Scenario {
  uint64_t seed;
  size_t page;
  bool disk;
  bool weak_digest;     // digests with 2 bits: collisions everywhere, in RAM and on disk
  uint64_t ram_budget;
  uint64_t disk_budget;
  bool roomy;           // budgets that never evict: nothing inserted may be lost
};

using Prompt = std::pair<TenantSalt, std::vector<TokenId>>;

uint32_t PrefixHash(TenantSalt salt, std::span<const TokenId> tokens, size_t end) {
  uint32_t h = 2166136261u ^ static_cast<uint32_t>(salt);
  for (size_t i = 0; i < end; ++i) h = (h ^ static_cast<uint32_t>(tokens[i] + 1)) * 16777619u;
  return h;
}

// Payload of the page ending at `end`; its size varies with the prefix (1..40 bytes).
Payload PagePayload(TenantSalt salt, std::span<const TokenId> tokens, size_t end) {
  const uint32_t h = PrefixHash(salt, tokens, end);
  std::vector<uint8_t> b(1 + h % 40);
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<uint8_t>((h >> (i % 4 * 8)) ^ (i * 31));
  return MakePayload(std::move(b));
}

class ModelRun {
 public:
  explicit ModelRun(const Scenario& s) : sc_(s), rng_(s.seed) {
    if (sc_.disk) {
      char name[] = "/tmp/cedar_cache_model_XXXXXX";
      REQUIRE(mkdtemp(name) != nullptr);
      dir_ = name;
    }
    Open();
  }
  ~ModelRun() {
    held_.clear();
    cache_.reset();
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }

  // Counters summed over every cache this run opened.
  CacheCounters Totals() {
    Accumulate();
    return totals_;
  }
  // Snapshots seen to survive a restart (checked after a successful flush).
  size_t snapshots_across_restarts() const { return snapshots_across_restarts_; }

  void Run(int steps) {
    for (step_ = 0; step_ < steps; ++step_) {
      const uint64_t op = Below(100);
      if (op < 30) Insert();
      else if (op < 50) AcquireAndVerify();
      else if (op < 58) ReleaseOne();
      else if (op < 66) AddSnapshot();
      else if (op < 71) EvictRam();
      else if (op < 75) Flush();
      else if (op < 77) Restart();
      else if (op < 85) SoftPin();
      else if (op < 90) *now_ += std::chrono::milliseconds(Below(60));
      else MatchOnly();
      CheckAll();
    }
  }

 private:
  void Accumulate() {
    const CacheCounters c = cache_->Counters();
    totals_.ram_hit_tokens += c.ram_hit_tokens - seen_.ram_hit_tokens;
    totals_.disk_hit_tokens += c.disk_hit_tokens - seen_.disk_hit_tokens;
    totals_.snapshots_dropped += c.snapshots_dropped - seen_.snapshots_dropped;
    totals_.snapshots_spilled += c.snapshots_spilled - seen_.snapshots_spilled;
    totals_.snapshots_loaded += c.snapshots_loaded - seen_.snapshots_loaded;
    totals_.disk_snapshots_deleted += c.disk_snapshots_deleted - seen_.disk_snapshots_deleted;
    totals_.pages_spilled += c.pages_spilled - seen_.pages_spilled;
    totals_.pages_dropped += c.pages_dropped - seen_.pages_dropped;
    totals_.disk_entries_deleted += c.disk_entries_deleted - seen_.disk_entries_deleted;
    totals_.disk_write_failures += c.disk_write_failures - seen_.disk_write_failures;
    seen_ = c;
  }

  uint64_t Below(uint64_t n) { return n == 0 ? 0 : rng_() % n; }
  bool Chance(double p) { return std::uniform_real_distribution<double>(0, 1)(rng_) < p; }

  void Open() {
    PrefixCacheConfig c;
    c.page_tokens = sc_.page;
    c.max_node_pages = 3;  // small nodes: more splits and finer eviction
    c.ram_budget_bytes = sc_.ram_budget;
    c.disk_dir = dir_;
    c.disk_budget_bytes = sc_.disk_budget;
    c.sync_disk_writes = false;
    c.soft_pin_max_share = 0.3;
    c.clock = [now = now_] { return *now; };
    if (sc_.weak_digest) {
      c.page_digest = [](uint64_t parent, std::span<const TokenId> page, ModelFingerprint fp, TenantSalt salt) {
        return Xxh3PageDigest(parent, page, fp, salt) & 3;
      };
    }
    auto cache = PrefixCache::Open(/*fingerprint=*/0xCED, std::move(c));
    REQUIRE_MESSAGE(cache.ok(), cache.status().ToString());
    cache_ = std::move(cache).value();
    seen_ = cache_->Counters();
  }

  // A prompt over a 3-token vocabulary: new, or a known prompt cut somewhere and extended.
  Prompt RandomPrompt() {
    std::vector<TokenId> tokens;
    TenantSalt salt = Chance(0.2) ? 7 : kNoTenant;
    if (!prompts_.empty() && Chance(0.7)) {
      const Prompt& base = prompts_[Below(prompts_.size())];
      salt = base.first;
      tokens.assign(base.second.begin(), base.second.begin() + Below(base.second.size() + 1));
    }
    const size_t extra = Below(5 * sc_.page) + (tokens.empty() ? Below(6 * sc_.page) : 0);
    for (size_t i = 0; i < extra; ++i) tokens.push_back(static_cast<TokenId>(Below(3)));
    return {salt, std::move(tokens)};
  }

  Prompt KnownOrRandomPrompt() {
    if (!prompts_.empty() && Chance(0.8)) return prompts_[Below(prompts_.size())];
    return RandomPrompt();
  }

  void Insert() {
    auto [salt, tokens] = RandomPrompt();
    const size_t whole = tokens.size() / sc_.page * sc_.page;
    std::vector<SnapshotInput> snaps;
    for (size_t pos = sc_.page; pos <= whole; pos += sc_.page) {
      if (Chance(0.15)) snaps.push_back({pos, RandomSnapshot()});
    }
    const bool fail = Chance(0.1);
    const size_t fail_at = Below(3);
    size_t calls = 0;
    auto provider = [&](size_t page_index, std::span<const TokenId> page) -> Result<Payload> {
      REQUIRE(page.size() == sc_.page);
      REQUIRE(std::equal(page.begin(), page.end(), tokens.begin() + page_index * sc_.page));
      if (fail && calls++ == fail_at) return Status::IOError("injected");
      return PagePayload(salt, tokens, (page_index + 1) * sc_.page);
    };
    auto r = cache_->Insert(tokens, provider, snaps, salt);
    if (!r.ok()) {
      REQUIRE_MESSAGE(fail, r.status().ToString());
      return;
    }
    CHECK(r->stored_tokens + r->refused_tokens == whole);
    if (sc_.roomy) CHECK(!r->partial());
    for (const SnapshotInput& s : snaps) {
      const auto& refused = r->refused_snapshots;
      if (std::find(refused.begin(), refused.end(), s.position) == refused.end()) {
        REQUIRE(s.position <= r->stored_tokens);
        snapshots_[{salt, Prefix(tokens, s.position)}] = *s.payload;
      }
    }
    if (r->stored_tokens > 0) {
      prompts_.push_back({salt, tokens});
      inserted_.push_back({salt, Prefix(tokens, r->stored_tokens)});
    }
  }

  Payload RandomSnapshot() {
    std::vector<uint8_t> b(1 + Below(30));
    for (auto& x : b) x = static_cast<uint8_t>(Below(256));
    return MakePayload(std::move(b));
  }

  static std::vector<TokenId> Prefix(const std::vector<TokenId>& t, size_t n) { return {t.begin(), t.begin() + n}; }

  void AcquireAndVerify() {
    auto [salt, tokens] = KnownOrRandomPrompt();
    const MatchResult m = cache_->Match(tokens, salt);
    auto h = cache_->Acquire(tokens, salt);
    REQUIRE_MESSAGE(h.ok(), h.status().ToString());
    REQUIRE(h->tokens() <= m.matched_tokens);
    REQUIRE(h->tokens() % sc_.page == 0);
    REQUIRE(h->pages().size() * sc_.page == h->tokens());
    for (size_t i = 0; i < h->pages().size(); ++i) {
      REQUIRE_MESSAGE(*h->pages()[i] == *PagePayload(salt, tokens, (i + 1) * sc_.page),
                      "step " << step_ << ": wrong payload for page " << i);
    }
    if (h->snapshot_position() > 0) {
      REQUIRE(h->snapshot_position() <= h->tokens());
      auto it = snapshots_.find({salt, Prefix(tokens, h->snapshot_position())});
      REQUIRE_MESSAGE(it != snapshots_.end(), "step " << step_ << ": snapshot that was never set");
      REQUIRE_MESSAGE(*h->snapshot() == it->second, "step " << step_ << ": stale or foreign snapshot");
    }
    if (sc_.roomy) {
      REQUIRE(h->tokens() == m.matched_tokens);
      REQUIRE_MESSAGE(h->snapshot_position() == m.snapshot_position, "step " << step_ << ": snapshot not acquired");
    }
    if (!h->empty() && Chance(0.4)) held_.push_back({salt, Prefix(tokens, h->tokens()), std::move(h).value()});
  }

  void ReleaseOne() {
    if (held_.empty()) return;
    held_.erase(held_.begin() + static_cast<std::ptrdiff_t>(Below(held_.size())));
  }

  void AddSnapshot() {
    auto [salt, tokens] = KnownOrRandomPrompt();
    const size_t pages = tokens.size() / sc_.page;
    if (pages == 0) return;
    const size_t pos = (1 + Below(pages)) * sc_.page;
    Payload p = RandomSnapshot();
    const Status s = cache_->AddSnapshot(tokens, pos, p, salt);
    if (s.ok()) {
      snapshots_[{salt, Prefix(tokens, pos)}] = *p;
    } else {
      REQUIRE_MESSAGE((s.code() == StatusCode::kNotFound || s.code() == StatusCode::kResourceExhausted), s.ToString());
      if (s.code() == StatusCode::kNotFound) REQUIRE(cache_->Match(Prefix(tokens, pos), salt).matched_tokens < pos);
    }
  }

  void EvictRam() {
    if (sc_.roomy && !sc_.disk) return;
    cache_->EvictRamTo(Below(cache_->Sizes().ram.used_bytes() + 1));
  }

  void Flush() {
    const Status s = cache_->Flush();
    if (sc_.roomy) REQUIRE_MESSAGE(s.ok(), s.ToString());
  }

  // What Match() says about every prompt and snapshot prefix the run knows.
  std::vector<MatchResult> Visible() {
    std::vector<MatchResult> v;
    for (const Prompt& p : inserted_) v.push_back(cache_->Match(p.second, p.first));
    for (const auto& [prompt, bytes] : snapshots_) v.push_back(cache_->Match(prompt.second, prompt.first));
    return v;
  }

  void Restart() {
    if (!sc_.disk) return;
    held_.clear();
    // After a flush that wrote everything and deleted nothing (making disk room deletes older
    // entries, which may have been flushed before), a restart loses nothing. Weak digests are
    // excluded: a chained digest of 0 reads as a prefix's first page at open, and is dropped.
    const CacheCounters c0 = cache_->Counters();
    const bool wrote_all = cache_->Flush().ok();
    const CacheCounters c1 = cache_->Counters();
    const bool flushed = wrote_all && !sc_.weak_digest && c1.disk_entries_deleted == c0.disk_entries_deleted &&
                         c1.disk_snapshots_deleted == c0.disk_snapshots_deleted;
    const std::vector<MatchResult> before = flushed ? Visible() : std::vector<MatchResult>{};
    Accumulate();
    cache_.reset();
    Open();
    if (!flushed) return;
    const std::vector<MatchResult> after = Visible();
    for (size_t i = 0; i < before.size(); ++i) {
      REQUIRE_MESSAGE(after[i].matched_tokens == before[i].matched_tokens,
                      "step " << step_ << ": prefix lost at restart");
      REQUIRE_MESSAGE(after[i].snapshot_position == before[i].snapshot_position,
                      "step " << step_ << ": snapshot lost at restart");
      REQUIRE(after[i].ram_tokens == 0);
      REQUIRE(after[i].snapshot_on_disk == (after[i].snapshot_position > 0));
    }
    for (size_t i = inserted_.size(); i < before.size(); ++i) {
      snapshots_across_restarts_ += before[i].snapshot_position > 0;
    }
  }

  void SoftPin() {
    auto [salt, tokens] = KnownOrRandomPrompt();
    auto r = cache_->SoftPin(tokens, salt, std::chrono::milliseconds(1 + Below(100)));
    if (!r.ok()) {
      const StatusCode c = r.status().code();
      REQUIRE_MESSAGE((c == StatusCode::kNotFound || c == StatusCode::kResourceExhausted), r.status().ToString());
    }
  }

  void MatchOnly() {
    auto [salt, tokens] = RandomPrompt();
    const MatchResult m = cache_->Match(tokens, salt);
    REQUIRE(m.matched_tokens % sc_.page == 0);
    REQUIRE(m.matched_tokens <= tokens.size());
    REQUIRE(m.ram_tokens + m.disk_tokens == m.matched_tokens);
    REQUIRE(m.snapshot_position <= m.matched_tokens);
  }

  void CheckAll() {
    const Status s = cache_->CheckIntegrity();
    REQUIRE_MESSAGE(s.ok(), "step " << step_ << ": " << s.ToString());
    for (const Held& h : held_) {
      const MatchResult m = cache_->Match(h.tokens, h.salt);
      REQUIRE_MESSAGE(m.matched_tokens == h.tokens.size(), "step " << step_ << ": a pinned prefix is gone");
      REQUIRE_MESSAGE(m.ram_tokens == h.tokens.size(), "step " << step_ << ": a pinned prefix left RAM");
    }
    if (sc_.roomy) {
      for (const Prompt& p : inserted_) {
        REQUIRE_MESSAGE(cache_->Match(p.second, p.first).matched_tokens == p.second.size(),
                        "step " << step_ << ": an inserted prefix was lost");
      }
      for (const auto& [p, bytes] : snapshots_) {
        REQUIRE_MESSAGE(cache_->Match(p.second, p.first).snapshot_position == p.second.size(),
                        "step " << step_ << ": a snapshot was lost");
      }
    }
  }

  struct Held {
    TenantSalt salt;
    std::vector<TokenId> tokens;
    PrefixHandle handle;
  };

  const Scenario sc_;
  std::mt19937_64 rng_;
  std::string dir_;
  std::shared_ptr<std::chrono::milliseconds> now_ = std::make_shared<std::chrono::milliseconds>(0);
  std::unique_ptr<PrefixCache> cache_;
  std::vector<Prompt> prompts_;
  std::vector<Prompt> inserted_;
  std::map<Prompt, std::vector<uint8_t>> snapshots_;
  std::vector<Held> held_;  // declared after cache_: released first
  CacheCounters totals_;
  CacheCounters seen_;
  size_t snapshots_across_restarts_ = 0;
  int step_ = 0;
};

void RunScenario(const Scenario& s, int steps = 600) {
  CAPTURE(s.seed);
  ModelRun run(s);
  run.Run(steps);
  // The run must have exercised what it claims to test.
  const CacheCounters c = run.Totals();
  CHECK(c.ram_hit_tokens > 0);
  if (!s.roomy || s.disk) CHECK(c.snapshots_dropped + c.pages_dropped + c.pages_spilled > 0);
  if (s.disk) CHECK(c.disk_hit_tokens > 0);
  if (s.disk && !s.roomy) CHECK(c.pages_spilled > 0);
  if (s.disk && !s.roomy && !s.weak_digest) CHECK(c.disk_entries_deleted > 0);
  if (s.disk && s.weak_digest) CHECK(c.disk_write_failures > 0);
  if (s.disk && !s.roomy) CHECK(c.snapshots_spilled > 0);
  if (s.disk && !s.weak_digest) CHECK(c.snapshots_loaded > 0);
  if (s.disk && !s.weak_digest) CHECK(run.snapshots_across_restarts() > 0);
}

}  // namespace

TEST_CASE("random operations with tiny budgets keep the model's properties (disk tier)") {
  for (uint64_t seed : {1, 2, 3, 4}) {
    const size_t page = size_t{2} << (seed % 3);  // 2, 4, 8
    RunScenario({seed, page, /*disk=*/true, /*weak_digest=*/false, 80 * page, 400 * page, /*roomy=*/false});
  }
}

TEST_CASE("random operations with colliding digests never return a wrong payload") {
  for (uint64_t seed : {11, 12, 13}) {
    const size_t page = size_t{2} << (seed % 3);
    RunScenario({seed, page, /*disk=*/true, /*weak_digest=*/true, 40 * page, 300 * page, /*roomy=*/false});
  }
  RunScenario({14, 2, /*disk=*/false, /*weak_digest=*/true, 60, 0, /*roomy=*/false});
}

TEST_CASE("random operations in a RAM-only cache keep the model's properties") {
  for (uint64_t seed : {21, 22}) {
    RunScenario({seed, 4, /*disk=*/false, /*weak_digest=*/false, 150, 0, /*roomy=*/false});
  }
}

TEST_CASE("random operations with roomy budgets lose nothing, across restarts") {
  RunScenario({31, 4, /*disk=*/true, /*weak_digest=*/false, 1 << 20, 4 << 20, /*roomy=*/true}, 400);
  RunScenario({32, 2, /*disk=*/false, /*weak_digest=*/false, 1 << 20, 0, /*roomy=*/true}, 400);
}

}  // namespace cedar::cache
