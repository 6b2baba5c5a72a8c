#include "server/tenant.h"

#include <sys/stat.h>
#include <xxhash.h>

#include <cctype>
#include <fstream>
#include <random>
#include <stdexcept>

#include <spdlog/spdlog.h>

#include "server/api_error.h"

namespace cedar::server {

namespace {

// Fixed domain strings: a tenant id is not any other hash of the same bytes.
constexpr std::string_view kKeyDomain = "cedar tenant of API key v1\n";
constexpr std::string_view kAnonymousDomain = "cedar tenant: anonymous TCP clients v1\n";
constexpr std::string_view kSaltDomain = "cedar cache_salt v1\n";

uint64_t Hash(std::string_view domain, std::string_view data, uint64_t seed = 0) {
  std::string buf;
  buf.reserve(domain.size() + data.size());
  buf.append(domain).append(data);
  return XXH3_64bits_withSeed(buf.data(), buf.size(), seed);
}

// Never the owner's id (0), which is the cache's default partition.
uint64_t NonZero(uint64_t h) { return h == 0 ? 1 : h; }

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

bool IEquals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::tolower(uint8_t(a[i])) != std::tolower(uint8_t(b[i]))) return false;
  return true;
}

}  // namespace

TenantId AnonymousTcpTenant() { return NonZero(Hash(kAnonymousDomain, "")); }

TenantId TenantOfKey(std::string_view key) { return NonZero(Hash(kKeyDomain, key)); }

ApiKeys::ApiKeys(const std::vector<std::string>& keys) : seed_(std::random_device{}()) {
  seed_ = (seed_ << 32) ^ std::random_device{}();
  for (size_t i = 0; i < keys.size(); ++i) {
    const std::string& k = keys[i];
    const std::string which = "API key #" + std::to_string(i + 1);
    if (k.empty()) throw std::invalid_argument(which + " is empty");
    for (char c : k) {
      if (std::isspace(uint8_t(c)) || std::iscntrl(uint8_t(c))) {
        throw std::invalid_argument(which + " contains whitespace or a control character (keys are single tokens)");
      }
    }
    if (Match(k)) continue;  // the same key from two sources
    entries_.push_back({Digest(k), TenantOfKey(k)});
  }
}

std::array<uint8_t, 16> ApiKeys::Digest(std::string_view key) const {
  const XXH128_hash_t h = XXH3_128bits_withSeed(key.data(), key.size(), seed_);
  std::array<uint8_t, 16> out{};
  for (int i = 0; i < 8; ++i) {
    out[size_t(i)] = uint8_t(h.low64 >> (8 * i));
    out[size_t(8 + i)] = uint8_t(h.high64 >> (8 * i));
  }
  return out;
}

std::optional<TenantId> ApiKeys::Match(std::string_view key) const {
  if (key.empty()) return std::nullopt;
  const std::array<uint8_t, 16> d = Digest(key);
  // Every entry is compared in full, with no branch on the bytes.
  uint64_t found = 0;
  TenantId tenant = 0;
  for (const Entry& e : entries_) {
    uint8_t diff = 0;
    for (size_t i = 0; i < d.size(); ++i) diff |= uint8_t(d[i] ^ e.digest[i]);
    const uint64_t equal = uint64_t(diff == 0);
    const uint64_t mask = 0 - equal;  // all ones when equal
    tenant |= e.tenant & mask;
    found |= equal;
  }
  if (!found) return std::nullopt;
  return tenant;
}

std::optional<TenantId> ApiKeys::Authenticate(const std::string* authorization, const std::string* x_api_key) const {
  if (authorization) {
    // RFC 9110: credentials = auth-scheme [ 1*SP token68 ], the scheme case-insensitive.
    const std::string_view v = Trim(*authorization);
    const size_t sp = v.find_first_of(" \t");
    if (sp != std::string_view::npos && IEquals(v.substr(0, sp), "bearer")) {
      if (auto t = Match(Trim(v.substr(sp + 1)))) return t;
    }
  }
  if (x_api_key) {
    if (auto t = Match(Trim(*x_api_key))) return t;
  }
  return std::nullopt;
}

std::vector<std::string> ReadApiKeyFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("--api-key-file: cannot read '" + path + "'");
  struct stat st{};
  if (::stat(path.c_str(), &st) == 0 && (st.st_mode & 0077)) {
    spdlog::warn("--api-key-file '{}' is readable by other users (mode {:o}); chmod 600 it", path, st.st_mode & 0777);
  }
  std::vector<std::string> keys;
  std::string line;
  while (std::getline(in, line)) {
    const std::string_view k = Trim(line);
    if (k.empty() || k.front() == '#') continue;
    keys.emplace_back(k);
  }
  if (keys.empty()) throw std::runtime_error("--api-key-file '" + path + "' holds no key (one per line)");
  return keys;
}

std::string ParseCacheSalt(const nlohmann::json& body) {
  auto it = body.find("cache_salt");
  if (it == body.end() || it->is_null()) return "";
  if (!it->is_string()) {
    throw InvalidRequest(std::string("cache_salt: expected a string, found ") + it->type_name(), "cache_salt");
  }
  const std::string& s = it->get_ref<const std::string&>();
  if (s.empty()) throw InvalidRequest("cache_salt: expected a non-empty string", "cache_salt");
  if (s.size() > kMaxCacheSaltBytes) {
    throw InvalidRequest("cache_salt: expected at most " + std::to_string(kMaxCacheSaltBytes) + " bytes, found " +
                             std::to_string(s.size()),
                         "cache_salt");
  }
  return s;
}

cache::TenantSalt CachePartition(TenantId tenant, const std::string& cache_salt) {
  if (cache_salt.empty()) return tenant;
  return NonZero(Hash(kSaltDomain, cache_salt, tenant));
}

}  // namespace cedar::server
