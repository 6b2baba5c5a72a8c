// The live-session budget (ManagerOptions::session_ram_bytes, `--session-ram`).
//
// Session memory is what sessions hold beyond the cache's own choice: their live states
// (backend Sequences: windows, pools and H_E of a whole conversation) and the prefix-cache RAM
// their pins protect from eviction. Both count against one budget; past it the least recently
// used sessions are demoted, one at a time, until the total fits: the session's state goes into
// the cache (pages and a snapshot; usually already there from its last turn, then nothing is
// computed) and its live state and pin are released. A demoted session keeps its id and history
// and counts against max_sessions; its next turn restores from the cache exactly. Pins are also
// held to half of the cache's RAM whatever the budget says, so they can never starve inserts.
#include <spdlog/spdlog.h>

#include <algorithm>

#include "cache/state_codec.h"
#include "session/manager_impl.h"

namespace cedar::session {

uint64_t SessionManager::Impl::SessionRamBudget() const {
  return opt.session_ram_bytes > 0 ? opt.session_ram_bytes : opt.cache_ram_bytes / 2;
}

uint64_t SessionManager::Impl::LiveBytes() const {
  uint64_t bytes = 0;
  for (const auto& [id, s] : sessions)
    if (s.live) bytes += s.live->Bytes();
  for (const ActiveTurn& t : active)
    if (t.state && !t.done) bytes += t.state->Bytes();
  return bytes;
}

// Between turns the only handles are sessions' pins (a restore's handle lives inside Restore);
// soft-pinned bytes (CreateSession's pinned prompts) have their own cap in the cache.
uint64_t SessionManager::Impl::SessionPinnedBytes() const {
  const cache::CacheSizes z = cache->Sizes();
  return z.ram.protected_bytes > z.soft_pinned_ram_bytes ? z.ram.protected_bytes - z.soft_pinned_ram_bytes : 0;
}

void SessionManager::Impl::EnforceSessionBudget() {
  const uint64_t budget = SessionRamBudget(), pin_cap = opt.cache_ram_bytes / 2;
  auto over = [&] {
    const uint64_t pinned = SessionPinnedBytes();
    return LiveBytes() + pinned > budget || pinned > pin_cap;
  };
  if (!over()) return;
  std::vector<Session*> holders;  // sessions holding a live state or a pin, oldest first
  for (auto& [id, s] : sessions)
    if (s.live || !s.prefix.empty()) holders.push_back(&s);
  std::sort(holders.begin(), holders.end(), [](const Session* a, const Session* b) { return a->last_used < b->last_used; });
  for (Session* s : holders) {
    if (!over()) break;
    Demote(*s);
  }
  if (over())
    spdlog::debug("session memory {} + {} pinned over the budget {}: in-flight turns hold it", LiveBytes(), SessionPinnedBytes(),
                  budget);
}

void SessionManager::Impl::Demote(Session& s) {
  const uint64_t live = s.live ? s.live->Bytes() : 0;
  s.prefix.Release();  // first: the insert below may need the room the pin held
  if (s.live) {
    std::optional<SequenceState> copy;
    const SequenceState& st = HostView(*s.live, copy);  // one Download on a device
    // The turn that made this state cached it already, unless that insert was partial; then
    // this one stores what fits now. A snapshot already at the end (maybe with a decoder
    // tail, which this one could not carry) is kept.
    const int64_t end = st.pos / int64_t(opt.page_tokens) * int64_t(opt.page_tokens);
    std::vector<cache::SnapshotInput> snaps;
    std::span<const int32_t> prefix(st.tokens.data(), size_t(end));
    if (end > 0 && cache->Match(prefix, s.live_salt).snapshot_position != size_t(end))
      if (auto snap = SnapshotAt(st, end)) snaps.push_back(*snap);
    InsertIntoCache(st, std::move(snaps), s.live_salt, &s);
  }
  s.live.reset();
  metrics.sessions_demoted++;
  spdlog::debug("session {}: demoted into the cache ({} live-state bytes released)", s.id, live);
}

}  // namespace cedar::session
