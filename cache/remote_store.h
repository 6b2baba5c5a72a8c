// Internal: the shared remote tier, entries in Redis (through hiredis), shared by every Cedar
// server pointed at the same Redis.
//
//   page      key = "cedar:" fingerprint (16 hex) ":" page digest (16 hex) ":p"
//   snapshot  key = "cedar:" fingerprint ":" digest of the page ending at the snapshot ":s"
//   value     entry_codec.h's format (the disk tier's), verified the same way on every read
//
// The model fingerprint is in the key and the value; the tenant salt is in every digest (and in
// the value), so tenants and models never see each other's entries.
//
// Faults are misses, never errors: Redis down, slow (a read that passes `timeout`), full (its
// maxmemory policy evicted the entry, or refused the write) or a value that fails verification.
// The first fault of an outage is logged once as a warning, the recovery once at info; the
// connection is then retried with exponential backoff (backoff_min .. backoff_max), and until
// the next attempt is due every read is an immediate miss, so an outage costs a turn nothing.
//
// Writes are asynchronous: Put queues the entries (holding the payloads, copying the tokens) and
// returns; a writer thread with its own connection sends each batch as one pipeline: EXPIRE for
// entries that may already be there (a refresh: SET only when EXPIRE finds nothing), then SET
// key value PX ttl. The queue is bounded by max_queued_bytes (past it a write is dropped and
// counted). Reads are synchronous on the caller's thread, pipelined, and bounded by `timeout`.
//
// Thread contract: Put, Read, ReadSnapshot, Fetch and Stats are called from the owning
// PrefixCache's thread; the writer thread is internal and joined by the destructor (which
// first sends what is queued, for at most a second).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cache/remote_config.h"
#include "cache/tier_store.h"

namespace cedar::cache {

namespace detail {

class RemoteConnection;  // remote_store.cpp: one hiredis context with its backoff state

class RemoteStore final : public TierStore {
 public:
  // Parses the URL and starts the writer thread. Does not connect (the first read or write
  // does, and a Redis that is not up yet is an outage like any other).
  static Result<std::unique_ptr<RemoteStore>> Open(const RemoteTierConfig& config, ModelFingerprint fingerprint,
                                                   size_t page_tokens);
  ~RemoteStore() override;
  RemoteStore(const RemoteStore&) = delete;
  RemoteStore& operator=(const RemoteStore&) = delete;

  // Queues the entries for the writer thread. Always Ok (a write that cannot be made is counted).
  Status Put(std::span<const PageWrite> pages, std::span<const SnapshotWrite> snapshots = {}) override;
  // Queues refreshes: the writer renews each entry's TTL and sends it only when Redis has lost it.
  void Refresh(std::span<const PageWrite> pages);

  Status Read(std::span<const PageRead> pages, std::vector<Payload>* out) const override;
  Result<Payload> ReadSnapshot(const SnapshotMeta& want) const override;

  // The read a restore makes, within one deadline: the pages in order (stopping at the first
  // miss or bad value) and, of the snapshot candidates (any order), the deepest one that exists,
  // verifies and lies within `base_tokens` + the pages found. Two round trips when a snapshot
  // exists (pages and EXISTS of every candidate, then GET of the chosen one), else one.
  struct FetchResult {
    std::vector<Payload> pages;
    std::optional<SnapshotMeta> snapshot;  // the candidate returned
    Payload snapshot_payload;
  };
  FetchResult Fetch(std::span<const PageRead> pages, std::span<const SnapshotMeta> snapshot_candidates,
                    size_t base_tokens) const;

  RemoteStats Stats() const;
  const RemoteEndpoint& endpoint() const { return endpoint_; }

  // Blocks until the writer has sent everything queued before this call (tests; shutdown).
  void Drain();

  // Counters shared by both threads and the outage log (remote_store.cpp).
  struct Counters;

 private:
  struct WriteJob {
    EntryKind kind = EntryKind::kPage;
    bool refresh = false;          // EXPIRE first; SET only if the entry is gone
    PageMeta page;
    SnapshotMeta snapshot;
    std::vector<TokenId> tokens;   // pages only
    Payload payload;
    uint64_t bytes() const { return payload ? payload->size() : 0; }
  };

  RemoteStore(const RemoteTierConfig& config, const RemoteEndpoint& endpoint, ModelFingerprint fingerprint,
              size_t page_tokens);
  std::string Key(uint64_t digest, EntryKind kind) const;
  bool Enqueue(WriteJob job);
  void WriterLoop();
  void SendBatch(std::vector<WriteJob>& batch);

  const RemoteTierConfig config_;
  const RemoteEndpoint endpoint_;
  const ModelFingerprint fingerprint_;
  const size_t page_tokens_;

  std::unique_ptr<RemoteConnection> reader_;  // the owner thread's connection
  std::unique_ptr<RemoteConnection> writer_;  // the writer thread's connection

  std::mutex mu_;                      // guards queue_, queued_bytes_, stop_, sent_epoch_
  std::condition_variable wake_;       // jobs queued or stop
  std::condition_variable drained_;    // a batch finished
  std::deque<WriteJob> queue_;
  uint64_t queued_bytes_ = 0;
  uint64_t queued_epoch_ = 0;          // jobs ever queued
  uint64_t sent_epoch_ = 0;            // jobs ever taken and finished
  bool stop_ = false;
  std::thread writer_thread_;

  std::unique_ptr<Counters> counters_;
};

}  // namespace detail
}  // namespace cedar::cache
