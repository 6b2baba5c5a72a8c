#include "profile/simulator.h"

#include <algorithm>
#include <filesystem>
#include <stdexcept>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <xxhash.h>

#include "engine/engine.h"

namespace cedar::profile {

namespace fs = std::filesystem;

const char* DesignName(Design d) {
  switch (d) {
    case Design::kCedar: return "cedar";
    case Design::kDecoderOnlyLru: return "decoder-only-lru";
    case Design::kCedNoCache: return "ced-no-cache";
    case Design::kDecoderOnlyNoCache: return "decoder-only-no-cache";
  }
  return "?";
}

const char* DesignLabel(Design d) {
  switch (d) {
    case Design::kCedar: return "Cedar (CED + prefix cache)";
    case Design::kDecoderOnlyLru: return "decoder-only + LRU block cache";
    case Design::kCedNoCache: return "CED, no cache";
    case Design::kDecoderOnlyNoCache: return "decoder-only, no cache";
  }
  return "?";
}

bool HasCache(Design d) { return d == Design::kCedar || d == Design::kDecoderOnlyLru; }

const char* ReplayKindName(ReplayKind k) {
  switch (k) {
    case ReplayKind::kNone: return "none";
    case ReplayKind::kSnapshotEvicted: return "snapshot-evicted";
    case ReplayKind::kNoSnapshotStored: return "no-snapshot-stored";
  }
  return "?";
}

const char* RestorePolicyName(RestorePolicy p) {
  switch (p) {
    case RestorePolicy::kStaircase: return "staircase";
    case RestorePolicy::kOptimistic: return "optimistic";
    case RestorePolicy::kReplay: return "replay";
    case RestorePolicy::kRecompute: return "recompute";
  }
  return "?";
}

bool ParseRestorePolicy(const std::string& s, RestorePolicy* out) {
  for (RestorePolicy p : {RestorePolicy::kStaircase, RestorePolicy::kOptimistic, RestorePolicy::kReplay,
                          RestorePolicy::kRecompute}) {
    if (s == RestorePolicyName(p)) {
      *out = p;
      return true;
    }
  }
  return false;
}

const char* SimDecoderName(SimDecoder d) {
  switch (d) {
    case SimDecoder::kAuto: return "auto";
    case SimDecoder::kExact: return "exact";
    case SimDecoder::kBounded: return "bounded";
  }
  return "?";
}

bool ParseSimDecoder(const std::string& s, SimDecoder* out) {
  if (s == "auto") *out = SimDecoder::kAuto;
  else if (s == "exact") *out = SimDecoder::kExact;
  else if (s == "bounded") *out = SimDecoder::kBounded;
  else return false;
  return true;
}

void Totals::Add(const Outcome& o, int64_t prompt) {
  ++requests;
  prompt_tokens += prompt;
  matched_tokens += o.matched;
  hit_ram += o.hit_ram;
  hit_disk += o.hit_disk;
  units += o.units;
  encoder_units += o.encoder_units;
  decoder_units += o.decoder_units;
  replay_units += o.replay_units;
  replays_snapshot_evicted += o.replay == ReplayKind::kSnapshotEvicted;
  replays_no_snapshot_stored += o.replay == ReplayKind::kNoSnapshotStored;
  tail_hits += o.tail_hit;
  ttft_s += o.ttft_s;
  peak_ram_bytes = std::max(peak_ram_bytes, o.ram_bytes);
  peak_disk_bytes = std::max(peak_disk_bytes, o.disk_bytes);
}

void Replay(const Trace& trace, const TokenSynth& synth, ReplayDriver& driver,
            const std::function<void(size_t)>& progress) {
  std::vector<int32_t> prompt, output;
  for (size_t i = 0; i < trace.requests.size(); ++i) {
    const TraceRequest& t = trace.requests[i];
    synth.Prompt(t, &prompt);
    synth.Output(t, &output);
    driver.Submit(ReplayRequest{i, &t, prompt, output});
    if (progress) progress(i + 1);
  }
  driver.Finish();
}

// ---- CacheSim ----

size_t CacheSim::DecoderOnlyNodeBlocks(const SimConfig& config) {
  if (config.block_node_blocks > 0) return config.block_node_blocks;
  const StateBytes b = ComputeStateBytes(config.model, config.page_tokens, config.block_tokens, config.kv);
  const double cedar_node = double(cache::PrefixCacheConfig{}.max_node_pages) * double(b.cedar_page);
  return std::max<size_t>(1, size_t(cedar_node / double(b.decoder_only_page) + 0.5));
}

CacheSim::CacheSim(Design design, const SimConfig& config, uint64_t ram_budget)
    : design_(design),
      config_(config),
      ram_budget_(ram_budget),
      bytes_(ComputeStateBytes(config.model, config.page_tokens, config.block_tokens, config.kv)) {
  const bool cedar = design == Design::kCedar;
  cache::PrefixCacheConfig c;
  c.page_tokens = cedar ? config.page_tokens : config.block_tokens;
  // Cedar keeps its own node granularity. Nodes are what eviction removes, so the baseline's
  // nodes hold about as many bytes as Cedar's (a few blocks; vLLM evicts single blocks).
  if (!cedar) c.max_node_pages = DecoderOnlyNodeBlocks(config);
  const uint64_t k = std::max<uint64_t>(1, config.payload_scale);
  c.ram_budget_bytes = ram_budget / k;
  c.sync_disk_writes = false;  // a simulation: durability does not matter, speed does
  c.flush_on_close = false;
  if (config.disk_budget > 0) {
    if (config.disk_dir.empty()) throw std::runtime_error("a disk tier needs a directory (--cache-dir)");
    dir_ = (fs::path(config.disk_dir) / fmt::format("{}-{}", DesignName(design), ram_budget)).string();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    fs::permissions(dir_, fs::perms::owner_all);  // the cache refuses a directory others can write (umask 002)
    c.disk_dir = dir_;
    c.disk_budget_bytes = config.disk_budget / k;
  }
  auto opened = cache::PrefixCache::Open(cedar ? 1 : 2, std::move(c));
  if (!opened.ok()) throw std::runtime_error("cannot open the simulated cache: " + opened.status().ToString());
  cache_ = std::move(opened).value();
  page_ = cache::MakePayload(std::vector<uint8_t>(Scaled(cedar ? bytes_.cedar_page : bytes_.decoder_only_page)));
}

CacheSim::~CacheSim() {
  cache_.reset();
  if (!dir_.empty()) {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
}

cache::Payload CacheSim::SnapshotPayload(int64_t position, SimTail tail) {
  const uint64_t size = Scaled(bytes_.Snapshot(config_.model, position));
  for (auto& [key, p] : snapshots_) {
    if (key == std::pair{size, tail}) return p;
  }
  std::vector<uint8_t> bytes(size);
  bytes[0] = uint8_t(tail);  // Scaled() >= 1: there is a first byte
  snapshots_.emplace_back(std::pair{size, tail}, cache::MakePayload(std::move(bytes)));
  return snapshots_.back().second;
}

// StartTurn: a fresh prefill is exact under decoder=exact, and a bounded replay of n <= W rows is
// the exact computation too; otherwise (auto or bounded, n > W) it is a bounded replay. Requests
// carry no session, so no live decoder ever makes an auto prefill exact.
SimTail CacheSim::PromptTail(int64_t n) const {
  return config_.decoder == SimDecoder::kExact || n <= config_.model.window ? SimTail::kExact : SimTail::kBounded;
}

// RestoreRepeat: auto takes either tail; exact and bounded take their own kind, either kind when
// n <= W (both are the exact computation then).
bool CacheSim::TailUsable(SimTail tail, int64_t n) const {
  if (tail == SimTail::kNone) return false;
  return config_.decoder == SimDecoder::kAuto || n <= config_.model.window ||
         (config_.decoder == SimDecoder::kExact) == (tail == SimTail::kExact);
}

namespace {
uint64_t PrefixKey(std::span<const int32_t> tokens, size_t n) {
  return XXH3_64bits_withSeed(tokens.data(), n * sizeof(int32_t), n);
}
}  // namespace

// The prompt and the output go into the cache, Cedar's with a snapshot at the end of each. A
// snapshot cut exactly where the computation ended carries the decoder tail (session/turns.cpp):
// at the prompt's end when it is a page boundary, with the prefill's kind; at the output's end
// when that is a page boundary, only above an exact prefill (decode steps over a bounded replay's
// windows equal no fresh computation). The simulation caches prompt + output (the server's state
// ends one token earlier: the last sampled token is never decoded; see docs/PROFILE.md).
void CacheSim::InsertTurn(const ReplayRequest& r, size_t exact_until, SimTail repeat_tail) {
  const bool cedar = design_ == Design::kCedar;
  const bool partial = exact_until < r.prompt.size();
  full_.assign(r.prompt.begin(), r.prompt.begin() + std::ptrdiff_t(partial ? exact_until : r.prompt.size()));
  if (!partial) full_.insert(full_.end(), r.output.begin(), r.output.end());
  const size_t page = cedar ? config_.page_tokens : config_.block_tokens;
  std::vector<cache::SnapshotInput> snaps;
  if (cedar && !partial) {
    const bool repeat = repeat_tail != SimTail::kNone;
    const SimTail prompt_tail = repeat ? repeat_tail : PromptTail(int64_t(r.prompt.size()));
    const SimTail output_tail = prompt_tail == SimTail::kExact ? SimTail::kExact : SimTail::kNone;
    size_t last = 0;
    for (size_t end : {r.prompt.size(), full_.size()}) {
      const size_t p = end / page * page;
      if (p == 0 || p == last) continue;
      last = p;
      snapshot_keys_.insert(PrefixKey(full_, p));
      // An exact repeat's prompt-end snapshot is the cached one it resumed from (Finish keeps it).
      if (repeat && p == r.prompt.size()) continue;
      SimTail tail = SimTail::kNone;
      if (p == end) tail = end == r.prompt.size() ? prompt_tail : output_tail;
      snaps.push_back({p, SnapshotPayload(int64_t(p), tail)});
    }
  }
  auto inserted = cache_->Insert(
      full_, [this](size_t, std::span<const cache::TokenId>) -> cache::Result<cache::Payload> { return page_; }, snaps);
  if (!inserted.ok()) throw std::runtime_error("cache insert failed: " + inserted.status().ToString());
}

SimTail CacheSim::TryRepeat(const ReplayRequest& r, Outcome* o) {
  const size_t n = r.prompt.size();
  if (n == 0 || n % config_.page_tokens != 0) return SimTail::kNone;
  const cache::MatchResult m = cache_->Match(r.prompt);
  if (m.matched_tokens != n || m.snapshot_position != n) return SimTail::kNone;
  const cache::CacheCounters before = cache_->Counters();
  auto acquired = cache_->Acquire(r.prompt);
  if (!acquired.ok()) throw std::runtime_error("cache acquire failed: " + acquired.status().ToString());
  cache::PrefixHandle handle = std::move(acquired).value();
  const cache::CacheCounters after = cache_->Counters();
  if (handle.tokens() != n || handle.snapshot_position() != n || !handle.snapshot()) return SimTail::kNone;
  const SimTail tail = SimTail(handle.snapshot()->at(0));
  if (!TailUsable(tail, int64_t(n))) return SimTail::kNone;  // the handle goes; Restore matches n - 1
  o->matched = int64_t(n);
  o->hit_ram = int64_t(after.ram_hit_tokens - before.ram_hit_tokens);
  o->hit_disk = int64_t(after.disk_hit_tokens - before.disk_hit_tokens);
  o->snapshot_position = int64_t(n);
  o->tail_hit = true;
  if (config_.cost.has_time()) {
    uint64_t disk_bytes = uint64_t(o->hit_disk) / config_.page_tokens * bytes_.cedar_page;
    if (after.snapshots_loaded > before.snapshots_loaded) disk_bytes += bytes_.Snapshot(config_.model, int64_t(n));
    o->ttft_s = config_.cost.Seconds(0, disk_bytes);
  }
  spdlog::debug("sim request {}: exact repeat of {} tokens from the snapshot's decoder tail", r.index, n);
  InsertTurn(r, n, tail);  // while the handle still pins the prefix it restored
  handle.Release();
  return tail;
}

Outcome CacheSim::Run(const ReplayRequest& r) {
  const bool cedar = design_ == Design::kCedar;
  const int64_t n = int64_t(r.prompt.size());
  // Cedar's server matches at most n - 1 tokens: the last one must run to give logits
  // (session/turns.cpp, Restore). The decoder-only baseline charges that token in its units.
  const std::span<const int32_t> query = cedar ? r.prompt.first(size_t(std::max<int64_t>(n - 1, 0))) : r.prompt;
  Outcome o;
  // Cedar serves an exact repeat of a cached page-aligned prompt from its snapshot's decoder tail
  // before anything else (session/turns.cpp, Restore -> RestoreRepeat).
  if (cedar && TryRepeat(r, &o) != SimTail::kNone) {
    const cache::CacheSizes s = cache_->Sizes();
    o.ram_bytes = s.ram.used_bytes() * scale();
    o.disk_bytes = s.disk.used_bytes() * scale();
    return o;
  }
  o.matched = int64_t(cache_->Match(query).matched_tokens);
  const cache::CacheCounters before = cache_->Counters();
  auto acquired = cache_->Acquire(query);
  if (!acquired.ok()) throw std::runtime_error("cache acquire failed: " + acquired.status().ToString());
  cache::PrefixHandle handle = std::move(acquired).value();
  const cache::CacheCounters after = cache_->Counters();
  o.hit_ram = int64_t(after.ram_hit_tokens - before.ram_hit_tokens);
  o.hit_disk = int64_t(after.disk_hit_tokens - before.disk_hit_tokens);
  int64_t hit = int64_t(handle.tokens());
  o.snapshot_position = int64_t(handle.snapshot_position());
  size_t exact_until = r.prompt.size();  // what this request may cache (kReplay cuts it)

  if (cedar) {
    if (config_.restore == RestorePolicy::kRecompute && hit > o.snapshot_position) {
      // Restored at the deepest snapshot; the rest of the match is encoded again. The tier
      // split follows the server's: disk tokens first counted against what was used.
      hit = o.snapshot_position;
      o.hit_disk = std::min(o.hit_disk, hit);
      o.hit_ram = hit - o.hit_disk;
      spdlog::debug("sim request {}: recompute from the snapshot at {} (matched {})", r.index, hit, o.matched);
    }
    const bool at_end = hit > 0 && o.snapshot_position == hit;
    CedarUnits u = CedarPrefillUnits(config_.model, n, hit, at_end);
    if (u.replay > 0 && config_.restore == RestorePolicy::kStaircase) {
      // The server's staircase restore (session/turns.cpp) with the state it keeps: a page of
      // slack and a decoder staircase of H_E.
      const ModelConfig& mc = config_.model;
      u.replay = ExactRestoreRows(mc, hit, mc.StaircaseLength() + mc.window - 1, int64_t(config_.page_tokens)) *
                 mc.n_encoder_layers;
    }
    o.encoder_units = u.encoder;
    o.decoder_units = u.decoder;
    o.replay_units = u.replay;
    o.units = u.total();
    if (u.replay > 0) {
      o.replay = snapshot_keys_.count(PrefixKey(r.prompt, size_t(hit))) ? ReplayKind::kSnapshotEvicted
                                                                         : ReplayKind::kNoSnapshotStored;
      if (config_.restore == RestorePolicy::kReplay) exact_until = size_t(hit);
    }
  } else {
    o.units = DecoderOnlyUnits(config_.model, n, hit);
  }
  if (config_.cost.has_time()) {
    const size_t page = cedar ? config_.page_tokens : config_.block_tokens;
    const uint64_t page_bytes = cedar ? bytes_.cedar_page : bytes_.decoder_only_page;
    uint64_t disk_bytes = uint64_t(o.hit_disk) / page * page_bytes;
    if (after.snapshots_loaded > before.snapshots_loaded) disk_bytes += bytes_.Snapshot(config_.model, o.snapshot_position);
    o.ttft_s = config_.cost.Seconds(o.units, disk_bytes);
  }

  InsertTurn(r, exact_until, SimTail::kNone);  // while the handle still pins the prefix it restored
  handle.Release();
  const cache::CacheSizes s = cache_->Sizes();
  o.ram_bytes = s.ram.used_bytes() * scale();
  o.disk_bytes = s.disk.used_bytes() * scale();
  return o;
}

}  // namespace cedar::profile
