#include "cache/cache_types.h"

#include <xxhash.h>

namespace cedar::cache {

uint64_t Xxh3PageDigest(uint64_t parent_digest, std::span<const TokenId> page, ModelFingerprint fingerprint,
                        TenantSalt salt) {
  const uint64_t context[3] = {parent_digest, fingerprint, salt};
  const uint64_t seed = XXH3_64bits(context, sizeof(context));
  return XXH3_64bits_withSeed(page.data(), page.size_bytes(), seed);
}

ClockFn SteadyClock() {
  return [] {
    return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch());
  };
}

}  // namespace cedar::cache
