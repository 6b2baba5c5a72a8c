// Helpers shared by the prefix-cache tests (cache_test.cpp, cache_disk_test.cpp): pages of
// kPage tokens whose payloads are a pure function of the tokens before them.
#pragma once
#include <doctest/doctest.h>

#include <memory>
#include <numeric>
#include <span>
#include <vector>

#include "cache/prefix_cache.h"

namespace cedar::cache::testing {

constexpr size_t kPage = 4;
constexpr size_t kPageBytes = 100;  // every page payload in these tests has this size

// The payload a page of `prefix` (ending at `end`) would hold: a pure function of the tokens.
inline Payload PagePayload(std::span<const TokenId> prefix, size_t end, size_t bytes = kPageBytes) {
  std::vector<uint8_t> b(bytes);
  uint32_t h = 2166136261u;
  for (size_t i = 0; i < end; ++i) h = (h ^ static_cast<uint32_t>(prefix[i])) * 16777619u;
  for (size_t i = 0; i < bytes; ++i) b[i] = static_cast<uint8_t>((h >> (i % 4 * 8)) + i);
  return MakePayload(std::move(b));
}

// A provider that serves PagePayload for the pages of `tokens` and counts its calls.
inline PrefixCache::PageProvider Provider(std::vector<TokenId> tokens, int* calls = nullptr, size_t bytes = kPageBytes) {
  return [tokens = std::move(tokens), calls, bytes](size_t page_index, std::span<const TokenId>) -> Result<Payload> {
    if (calls) ++*calls;
    return PagePayload(tokens, (page_index + 1) * kPage, bytes);
  };
}

inline std::vector<TokenId> Seq(TokenId first, size_t n) {
  std::vector<TokenId> v(n);
  std::iota(v.begin(), v.end(), first);
  return v;
}

inline std::unique_ptr<PrefixCache> OpenOrFail(PrefixCacheConfig c, ModelFingerprint fp = 1) {
  auto cache = PrefixCache::Open(fp, std::move(c));
  REQUIRE_MESSAGE(cache.ok(), cache.status().ToString());
  return std::move(cache).value();
}

inline void CheckPayloads(const PrefixHandle& h, const std::vector<TokenId>& tokens) {
  REQUIRE(h.pages().size() * kPage == h.tokens());
  for (size_t i = 0; i < h.pages().size(); ++i) {
    CHECK_MESSAGE(*h.pages()[i] == *PagePayload(tokens, (i + 1) * kPage), "page " << i);
  }
}

inline void CheckIntegrity(const PrefixCache& cache) {
  const Status s = cache.CheckIntegrity();
  CHECK_MESSAGE(s.ok(), s.ToString());
}

}  // namespace cedar::cache::testing
