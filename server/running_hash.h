// XXH3-64 over a growing byte stream: the digest of what was added so far (optionally plus a
// few more bytes) without ending the stream, so a conversation rendered once can be hashed at
// every point where a remembered generation might start. Equal to XXH3_64bits over the same
// bytes (the streaming and one-shot forms agree). Used by the replay memories
// (generation_memory.h for Cedar's format over ids, dsml_replay.h for the released one over text).
#pragma once
#include <xxhash.h>

#include <cstddef>
#include <cstdint>
#include <new>

namespace cedar::server {

class RunningHash {
 public:
  RunningHash() : state_(XXH3_createState()), probe_(XXH3_createState()) {
    if (!state_ || !probe_) {
      XXH3_freeState(state_);
      XXH3_freeState(probe_);
      throw std::bad_alloc();
    }
    XXH3_64bits_reset(state_);
  }
  ~RunningHash() {
    XXH3_freeState(state_);
    XXH3_freeState(probe_);
  }
  RunningHash(const RunningHash&) = delete;
  RunningHash& operator=(const RunningHash&) = delete;

  void Add(const void* data, size_t n) {
    XXH3_64bits_update(state_, data, n);
    bytes_ += n;
  }
  // The digest of everything added, followed by `n` more bytes at `extra` (not added).
  uint64_t DigestWith(const void* extra, size_t n) {
    XXH3_copyState(probe_, state_);
    if (n) XXH3_64bits_update(probe_, extra, n);
    return XXH3_64bits_digest(probe_);
  }
  uint64_t Digest() { return DigestWith(nullptr, 0); }
  size_t bytes() const { return bytes_; }

 private:
  XXH3_state_t* state_;
  XXH3_state_t* probe_;
  size_t bytes_ = 0;
};

}  // namespace cedar::server
