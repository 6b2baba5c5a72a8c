// Who a request is, and what it may see (docs/SERVER.md, "Security model").
//
// A tenant is one API key (over TCP), or the machine's owner (the Unix socket, mode 0600), or,
// on a TCP listener without keys, every TCP client together. Each tenant has its own namespace
// of sessions and its own partition of the prefix cache: what one tenant cached never shortens
// another's prefill, so `cached_tokens` tells nothing about other tenants' prompts. A request's
// `cache_salt` (the field vLLM and SGLang use) partitions its tenant's cache further; requests
// that share tenant and salt share cached prefixes, which is the point of the cache.
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "cache/cache_types.h"
#include "session/session_manager.h"

namespace cedar::server {

// A tenant's id: the session owner (session_manager.h) and the base of its cache partition.
using TenantId = session::SessionOwner;
// The machine's owner on the Unix socket. Its cache partition is the cache's default one, so a
// cache directory written before tenants existed keeps its hits.
inline constexpr TenantId kOwnerTenant = session::kLocalOwner;
// TCP clients of a server without API keys: one tenant, apart from the owner.
TenantId AnonymousTcpTenant();
// The tenant of an API key: XXH3 of the key under a fixed domain string, stable across restarts
// (the disk tier keeps a tenant's entries), never kOwnerTenant.
TenantId TenantOfKey(std::string_view key);

// The API keys a server accepts. Thread contract: immutable after construction.
class ApiKeys {
 public:
  // Throws std::invalid_argument naming the problem (not the key) for an empty key or a key
  // with whitespace or control characters. A key given twice (say on the command line and in
  // CEDAR_API_KEY) counts once.
  explicit ApiKeys(const std::vector<std::string>& keys = {});
  bool empty() const { return entries_.empty(); }
  size_t size() const { return entries_.size(); }
  // The tenant of a request's credentials, from `Authorization: <scheme> KEY` with the scheme
  // "Bearer" in any case, or `x-api-key: KEY` (Anthropic's clients); nullopt when neither
  // names a configured key. Takes the same time wherever a wrong key differs from a right one:
  // the presented key is hashed with a per-process random seed and every key's digest is
  // compared in full.
  std::optional<TenantId> Authenticate(const std::string* authorization, const std::string* x_api_key) const;

 private:
  struct Entry {
    std::array<uint8_t, 16> digest;  // XXH3-128 of the key under seed_
    TenantId tenant;
  };
  std::array<uint8_t, 16> Digest(std::string_view key) const;
  std::optional<TenantId> Match(std::string_view key) const;
  uint64_t seed_;
  std::vector<Entry> entries_;
};

// Keys from a file: one per line; blank lines and lines starting with '#' are skipped,
// surrounding whitespace is trimmed. Throws std::runtime_error naming the file when it cannot
// be read or holds no key. Logs a warning when the file is readable by group or others.
std::vector<std::string> ReadApiKeyFile(const std::string& path);

// The longest `cache_salt` accepted.
inline constexpr size_t kMaxCacheSaltBytes = 256;

// The request's `cache_salt`: "" when absent or null, else a non-empty string of at most
// kMaxCacheSaltBytes bytes; anything else is a 400 (ApiError) naming `cache_salt`.
std::string ParseCacheSalt(const nlohmann::json& body);

// The cache partition of a request: its tenant's, further split by `cache_salt` when given
// ("" = the tenant's own partition). Never kNoTenant for another tenant than the owner.
cache::TenantSalt CachePartition(TenantId tenant, const std::string& cache_salt);

}  // namespace cedar::server
