#include "cache/entry_codec.h"

#include <fmt/format.h>
#include <xxhash.h>

#include <bit>
#include <cstring>

namespace cedar::cache::detail {
namespace {

static_assert(std::endian::native == std::endian::little,
              "entries store tokens and header fields in host (little-endian) order");

constexpr uint32_t kEntryMagic = 0x43504443;     // "CDPC": Cedar prefix cache page
constexpr uint32_t kSnapshotMagic = 0x4e534443;  // "CDSN": Cedar prefix cache snapshot
constexpr uint16_t kEntryVersion = 1;

// Fixed-layout header at the start of every page value. Read and written with memcpy (LMDB and
// Redis values are not aligned).
struct EntryHeader {
  uint32_t magic;
  uint16_t version;
  uint16_t reserved;
  uint32_t page_index;
  uint32_t token_count;
  uint64_t fingerprint;
  uint64_t salt;
  uint64_t parent_digest;
  uint64_t digest;
  uint64_t sequence;
  uint64_t payload_bytes;
  uint64_t meta_checksum;     // XXH3 over this header (both checksums zeroed) and the tokens
  uint64_t payload_checksum;  // XXH3 over the payload
};
static_assert(sizeof(EntryHeader) == 80);

// Fixed-layout header at the start of every snapshot value.
struct SnapshotHeader {
  uint32_t magic;
  uint16_t version;
  uint16_t reserved;
  uint64_t fingerprint;
  uint64_t salt;
  uint64_t digest;            // of the page that ends at `position`; also in the key
  uint64_t position;          // tokens
  uint64_t prefix_checksum;   // of the tokens before `position` (computed by PrefixCache)
  uint64_t sequence;
  uint64_t payload_bytes;
  uint64_t meta_checksum;     // XXH3 over this header (both checksums zeroed)
  uint64_t payload_checksum;  // XXH3 over the payload
};
static_assert(sizeof(SnapshotHeader) == 80);

uint64_t MetaChecksum(EntryHeader header, const void* tokens, size_t token_bytes) {
  header.meta_checksum = 0;
  header.payload_checksum = 0;
  const uint64_t seed = XXH3_64bits(&header, sizeof(header));
  return XXH3_64bits_withSeed(tokens, token_bytes, seed);
}

uint64_t SnapshotMetaChecksum(SnapshotHeader header) {
  header.meta_checksum = 0;
  header.payload_checksum = 0;
  return XXH3_64bits(&header, sizeof(header));
}

}  // namespace

uint64_t PageValueBytes(size_t page_tokens, uint64_t payload_bytes) {
  return sizeof(EntryHeader) + page_tokens * sizeof(TokenId) + payload_bytes;
}

uint64_t SnapshotValueBytes(uint64_t payload_bytes) { return sizeof(SnapshotHeader) + payload_bytes; }

void EncodePageValue(const PageMeta& meta, ModelFingerprint fingerprint, std::span<const TokenId> tokens,
                     const std::vector<uint8_t>& payload, uint8_t* out) {
  EntryHeader h{};
  h.magic = kEntryMagic;
  h.version = kEntryVersion;
  h.page_index = meta.page_index;
  h.token_count = static_cast<uint32_t>(tokens.size());
  h.fingerprint = fingerprint;
  h.salt = meta.salt;
  h.parent_digest = meta.parent_digest;
  h.digest = meta.digest;
  h.sequence = meta.sequence;
  h.payload_bytes = payload.size();
  const size_t token_bytes = tokens.size_bytes();
  h.meta_checksum = MetaChecksum(h, tokens.data(), token_bytes);
  h.payload_checksum = XXH3_64bits(payload.data(), payload.size());
  std::memcpy(out, &h, sizeof(h));
  std::memcpy(out + sizeof(h), tokens.data(), token_bytes);
  if (!payload.empty()) std::memcpy(out + sizeof(h) + token_bytes, payload.data(), payload.size());
}

void EncodeSnapshotValue(const SnapshotMeta& meta, ModelFingerprint fingerprint, const std::vector<uint8_t>& payload,
                         uint8_t* out) {
  SnapshotHeader h{};
  h.magic = kSnapshotMagic;
  h.version = kEntryVersion;
  h.fingerprint = fingerprint;
  h.salt = meta.salt;
  h.digest = meta.digest;
  h.position = meta.position;
  h.prefix_checksum = meta.prefix_checksum;
  h.sequence = meta.sequence;
  h.payload_bytes = payload.size();
  h.meta_checksum = SnapshotMetaChecksum(h);
  h.payload_checksum = XXH3_64bits(payload.data(), payload.size());
  std::memcpy(out, &h, sizeof(h));
  if (!payload.empty()) std::memcpy(out + sizeof(h), payload.data(), payload.size());
}

namespace {

Status ParsePageHeader(std::span<const uint8_t> value, ModelFingerprint fingerprint, size_t page_tokens,
                       uint64_t key_digest, EntryHeader* out) {
  if (value.size() < sizeof(EntryHeader)) return Status::Corruption("entry shorter than its header");
  EntryHeader h;
  std::memcpy(&h, value.data(), sizeof(h));
  if (h.magic != kEntryMagic || h.version != kEntryVersion) return Status::Corruption("bad magic or version");
  if (h.token_count != page_tokens) {
    return Status::Corruption(fmt::format("entry has {} tokens, page size is {}", h.token_count, page_tokens));
  }
  const uint64_t token_bytes = uint64_t{h.token_count} * sizeof(TokenId);
  // (payload_bytes is checked against the size first: the sum below cannot wrap.)
  if (h.payload_bytes > value.size() || value.size() != sizeof(EntryHeader) + token_bytes + h.payload_bytes) {
    return Status::Corruption(fmt::format("entry is {} bytes, header says {} payload bytes", value.size(), h.payload_bytes));
  }
  const uint8_t* tokens = value.data() + sizeof(EntryHeader);
  if (MetaChecksum(h, tokens, token_bytes) != h.meta_checksum) return Status::Corruption("metadata checksum mismatch");
  if (h.fingerprint != fingerprint) return Status::Corruption("fingerprint differs from its key");
  if (h.digest != key_digest) return Status::Corruption("digest differs from its key");
  *out = h;
  return Status::Ok();
}

Status ParseSnapshotHeader(std::span<const uint8_t> value, ModelFingerprint fingerprint, uint64_t key_digest,
                           SnapshotHeader* out) {
  if (value.size() < sizeof(SnapshotHeader)) return Status::Corruption("snapshot entry shorter than its header");
  SnapshotHeader h;
  std::memcpy(&h, value.data(), sizeof(h));
  if (h.magic != kSnapshotMagic || h.version != kEntryVersion) return Status::Corruption("bad snapshot magic or version");
  if (h.payload_bytes > value.size() || value.size() != sizeof(SnapshotHeader) + h.payload_bytes) {
    return Status::Corruption(
        fmt::format("snapshot entry is {} bytes, header says {} payload bytes", value.size(), h.payload_bytes));
  }
  if (SnapshotMetaChecksum(h) != h.meta_checksum) return Status::Corruption("snapshot metadata checksum mismatch");
  if (h.fingerprint != fingerprint) return Status::Corruption("fingerprint differs from its key");
  if (h.digest != key_digest) return Status::Corruption("digest differs from its key");
  *out = h;
  return Status::Ok();
}

}  // namespace

Status ParsePageValue(std::span<const uint8_t> value, ModelFingerprint fingerprint, size_t page_tokens,
                      uint64_t key_digest, PageMeta* meta, const uint8_t** tokens) {
  EntryHeader h;
  if (Status s = ParsePageHeader(value, fingerprint, page_tokens, key_digest, &h); !s.ok()) return s;
  *meta = PageMeta{h.digest, h.parent_digest, h.salt, h.page_index, h.payload_bytes, h.sequence};
  if (tokens) *tokens = value.data() + sizeof(EntryHeader);
  return Status::Ok();
}

Status ParseSnapshotValue(std::span<const uint8_t> value, ModelFingerprint fingerprint, uint64_t key_digest,
                          SnapshotMeta* meta) {
  SnapshotHeader h;
  if (Status s = ParseSnapshotHeader(value, fingerprint, key_digest, &h); !s.ok()) return s;
  *meta = SnapshotMeta{h.digest, h.salt, h.position, h.prefix_checksum, h.payload_bytes, h.sequence};
  return Status::Ok();
}

Result<std::span<const uint8_t>> VerifyPageValue(std::span<const uint8_t> value, ModelFingerprint fingerprint,
                                                 size_t page_tokens, const PageRead& want) {
  EntryHeader h;
  if (Status s = ParsePageHeader(value, fingerprint, page_tokens, want.meta.digest, &h); !s.ok()) return s;
  // The entry must be this very page: same chain position, tenant and tokens.
  const bool size_ok = want.meta.payload_bytes == kAnyPayloadBytes || h.payload_bytes == want.meta.payload_bytes;
  if (h.parent_digest != want.meta.parent_digest || h.page_index != want.meta.page_index || h.salt != want.meta.salt ||
      !size_ok || want.tokens.size() != h.token_count ||
      std::memcmp(value.data() + sizeof(h), want.tokens.data(), want.tokens.size_bytes()) != 0) {
    return Status::Corruption("entry belongs to another prefix");
  }
  const std::span<const uint8_t> payload = value.subspan(sizeof(h) + want.tokens.size_bytes(), h.payload_bytes);
  if (XXH3_64bits(payload.data(), payload.size()) != h.payload_checksum) {
    return Status::Corruption("payload checksum mismatch");
  }
  return payload;
}

Result<std::span<const uint8_t>> VerifySnapshotValue(std::span<const uint8_t> value, ModelFingerprint fingerprint,
                                                     const SnapshotMeta& want) {
  SnapshotHeader h;
  if (Status s = ParseSnapshotHeader(value, fingerprint, want.digest, &h); !s.ok()) return s;
  // The entry must be this very snapshot: same position, tenant, prefix tokens and size.
  const bool size_ok = want.payload_bytes == kAnyPayloadBytes || h.payload_bytes == want.payload_bytes;
  if (h.position != want.position || h.salt != want.salt || h.prefix_checksum != want.prefix_checksum || !size_ok) {
    return Status::Corruption(fmt::format("snapshot entry at {} belongs to another prefix", want.position));
  }
  const std::span<const uint8_t> payload = value.subspan(sizeof(h), h.payload_bytes);
  if (XXH3_64bits(payload.data(), payload.size()) != h.payload_checksum) {
    return Status::Corruption(fmt::format("snapshot at {}: payload checksum mismatch", want.position));
  }
  return payload;
}

}  // namespace cedar::cache::detail
