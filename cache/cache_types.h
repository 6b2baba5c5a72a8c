// Vocabulary of the prefix cache: token ids, opaque payloads, fingerprints, digests, clock.
// Host logic only: no engine or CUDA types. The engine fills payloads with whatever bytes it
// needs to resume (compressed K/V rows of a page, a boundary snapshot); the cache never looks
// inside them.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

namespace cedar::cache {

using TokenId = int32_t;

// Identifies the model (weights, config, state layout) whose state the payloads hold. Digests
// and disk keys include it: an entry written under one fingerprint is never read under another.
using ModelFingerprint = uint64_t;

// Optional per-tenant salt: prefixes under different salts never share nodes, digests or disk
// entries, so one tenant cannot probe another's cache. 0 = no tenant isolation.
using TenantSalt = uint64_t;
inline constexpr TenantSalt kNoTenant = 0;

// An immutable, shared byte buffer. The cache hands out copies of the pointer, so a payload a
// caller holds stays valid even after the cache has evicted it.
using Payload = std::shared_ptr<const std::vector<uint8_t>>;

inline Payload MakePayload(std::vector<uint8_t> bytes) {
  return std::make_shared<const std::vector<uint8_t>>(std::move(bytes));
}

// Chained digest of one page: f(parent page digest (0 for a prefix's first page), the page's
// tokens, model fingerprint, tenant salt). Digests find candidates; every hit is confirmed by
// comparing tokens. Injectable so tests can force collisions.
using PageDigestFn = std::function<uint64_t(uint64_t parent_digest, std::span<const TokenId> page,
                                            ModelFingerprint fingerprint, TenantSalt salt)>;

// The default: XXH3-64 of the page's tokens, seeded with XXH3-64 of (parent, fingerprint, salt).
uint64_t Xxh3PageDigest(uint64_t parent_digest, std::span<const TokenId> page,
                        ModelFingerprint fingerprint, TenantSalt salt);

// Milliseconds on a monotonic clock. Injectable so soft-pin expiry is deterministic in tests.
using ClockFn = std::function<std::chrono::milliseconds()>;

ClockFn SteadyClock();

}  // namespace cedar::cache
