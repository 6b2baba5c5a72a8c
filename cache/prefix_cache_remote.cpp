// PrefixCache and the shared remote tier (remote_store.h): pulling what RAM and disk miss, and
// queueing what the cache stores for the other servers.
#include <spdlog/spdlog.h>
#include <xxhash.h>

#include "cache/prefix_cache.h"
#include "cache/remote_store.h"

namespace cedar::cache {

using detail::Node;
using detail::PageMeta;
using detail::PageRead;
using detail::PageWrite;
using detail::SnapshotMeta;

namespace {
// Snapshots are cut at a turn's prompt end and at its last page: the ones a restore wants lie
// near the end of the prompt. The pull asks for at most this many boundaries, the deepest.
constexpr size_t kMaxSnapshotCandidates = 512;
}  // namespace

RemoteStats PrefixCache::RemoteCounters() const { return remote_ ? remote_->Stats() : RemoteStats{}; }

void PrefixCache::DrainRemoteWrites() {
  if (remote_) remote_->Drain();
}

RemotePull PrefixCache::PullRemote(std::span<const TokenId> tokens, TenantSalt salt) {
  RemotePull out;
  if (!remote_) return out;
  const DiskResetSync sync(this);
  const size_t page = config_.page_tokens;
  const size_t whole = tokens.size() / page * page;
  const MatchResult local = Match(tokens, salt);
  const size_t L = local.matched_tokens;
  out.from_tokens = L;
  if (whole == 0 || (L == whole && local.snapshot_position == whole)) return out;  // nothing to ask for

  // The chain digests and prefix checksums (the same as PrefixChecksum's, page by page from the
  // fingerprint and salt) of every whole page of the prompt.
  const size_t n = whole / page;
  std::vector<uint64_t> digests(n), checksums(n);
  const uint64_t context[2] = {fingerprint_, salt};
  uint64_t chain = 0, h = XXH3_64bits(context, sizeof(context));
  for (size_t i = 0; i < n; ++i) {
    const auto p = tokens.subspan(i * page, page);
    chain = config_.page_digest(chain, p, fingerprint_, salt);
    h = XXH3_64bits_withSeed(p.data(), p.size_bytes(), h);
    digests[i] = chain;
    checksums[i] = h;
  }
  std::vector<PageRead> reads;
  for (size_t i = L / page; i < n; ++i) {
    const PageMeta meta{digests[i], i ? digests[i - 1] : 0, salt, uint32_t(i), detail::kAnyPayloadBytes, 0};
    reads.push_back({meta, tokens.subspan(i * page, page)});
  }
  std::vector<SnapshotMeta> candidates;
  for (size_t i = n; i-- > 0 && candidates.size() < kMaxSnapshotCandidates;) {
    const size_t position = (i + 1) * page;
    if (position <= local.snapshot_position) break;
    candidates.push_back(SnapshotMeta{digests[i], salt, position, checksums[i], detail::kAnyPayloadBytes, 0});
  }
  ++counters_.remote_pulls;
  detail::RemoteStore::FetchResult got = remote_->Fetch(reads, candidates, L);
  if (got.pages.empty() && !got.snapshot) {
    spdlog::debug("prefix cache: remote miss past {} of {} tokens", L, whole);
    return out;
  }

  // Into RAM as an insert of the local match plus the pages found (nothing is sent back).
  const size_t end = L + got.pages.size() * page;
  std::vector<SnapshotInput> snapshots;
  if (got.snapshot) snapshots.push_back({size_t(got.snapshot->position), got.snapshot_payload});
  auto provider = [&](size_t page_index, std::span<const TokenId>) -> Result<Payload> {
    const size_t k = page_index - L / page;
    if (page_index < L / page || k >= got.pages.size()) return Status::Corruption("remote pull: page outside the fetch");
    return got.pages[k];
  };
  pulling_ = true;
  Result<InsertResult> r = Insert(tokens.first(end), provider, snapshots, salt);
  pulling_ = false;
  if (!r.ok()) {
    spdlog::debug("prefix cache: remote pull not inserted: {}", r.status().ToString());
    return out;
  }
  out.pulled_tokens = r->stored_tokens > L ? r->stored_tokens - L : 0;
  if (got.snapshot && r->refused_snapshots.empty()) out.snapshot_position = size_t(got.snapshot->position);
  counters_.remote_hit_tokens += out.pulled_tokens;
  if (out.snapshot_position) ++counters_.remote_snapshots_loaded;
  spdlog::debug("prefix cache: remote hit {} tokens past {} (snapshot at {})", out.pulled_tokens, L,
                out.snapshot_position);
  return out;
}

void PrefixCache::WriteRemotePages(Node* deepest, size_t new_from) {
  const size_t page = config_.page_tokens;
  std::vector<PageWrite> fresh, refresh;
  for (Node* n : PathTo(deepest)) {
    uint64_t parent_digest = ChainDigest(n->parent);
    const size_t first_page = n->start() / page;
    for (size_t i = 0; i < n->pages(); ++i) {
      const PageMeta meta{n->page_digests[i], parent_digest, n->salt, uint32_t(first_page + i), n->page_bytes[i], n->tick};
      PageWrite w{meta, std::span(n->tokens).subspan(i * page, page), n->in_ram() ? n->payloads[i] : nullptr};
      // Pages this insert added are sent; the prefix it extends is refreshed (its TTL renewed, and
      // resent from RAM if Redis lost it: a flush, an eviction, a restart).
      (n->start() + i * page >= new_from ? fresh : refresh).push_back(std::move(w));
      parent_digest = n->page_digests[i];
    }
  }
  (void)remote_->Put(fresh);
  remote_->Refresh(refresh);
}

void PrefixCache::WriteRemoteSnapshot(Node* node) {
  const detail::SnapshotWrite w{SnapshotMetaOf(node), node->snapshot};
  (void)remote_->Put({}, {&w, 1});
}

}  // namespace cedar::cache
