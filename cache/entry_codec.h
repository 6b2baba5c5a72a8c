// Internal: the byte format of a tier entry, shared by the disk tier (LMDB values) and the
// remote tier (Redis values), so both verify an entry the same way.
//
//   page      value = EntryHeader (80 bytes) | tokens (page_tokens x int32, host order) | payload
//   snapshot  value = SnapshotHeader (80 bytes) | payload
//
// Each header carries the model fingerprint, the tenant salt, the chain position, a checksum of
// the metadata (header and tokens) and one of the payload (XXH3-64). Parsing checks sizes, magic,
// version and the metadata checksum; Verify* then check every field the caller expects and the
// payload checksum. A value that fails any check is Corruption, never returned.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "cache/status.h"
#include "cache/tier_store.h"

namespace cedar::cache::detail {

// Bytes of an encoded page value (header + tokens + payload) and snapshot value (header + payload).
uint64_t PageValueBytes(size_t page_tokens, uint64_t payload_bytes);
uint64_t SnapshotValueBytes(uint64_t payload_bytes);

// Writes one page value (PageValueBytes(tokens.size(), payload size) bytes) to `out`.
void EncodePageValue(const PageMeta& meta, ModelFingerprint fingerprint, std::span<const TokenId> tokens,
                     const std::vector<uint8_t>& payload, uint8_t* out);
// Writes one snapshot value (SnapshotValueBytes(payload size) bytes) to `out`.
void EncodeSnapshotValue(const SnapshotMeta& meta, ModelFingerprint fingerprint, const std::vector<uint8_t>& payload,
                         uint8_t* out);

// Parses the header (and tokens) of a page value stored under `key_digest`, checking its size,
// magic, version, token count, metadata checksum, fingerprint and digest. On success fills
// `meta` and, when non-null, `tokens` (page_tokens tokens, pointing into `value`).
Status ParsePageValue(std::span<const uint8_t> value, ModelFingerprint fingerprint, size_t page_tokens,
                      uint64_t key_digest, PageMeta* meta, const uint8_t** tokens = nullptr);
// The same for a snapshot value.
Status ParseSnapshotValue(std::span<const uint8_t> value, ModelFingerprint fingerprint, uint64_t key_digest,
                          SnapshotMeta* meta);

// Parses and fully verifies a page value against `want` (chain position, tenant, tokens, payload
// size unless kAnyPayloadBytes, payload checksum). Returns the payload bytes (a view into `value`).
Result<std::span<const uint8_t>> VerifyPageValue(std::span<const uint8_t> value, ModelFingerprint fingerprint,
                                                 size_t page_tokens, const PageRead& want);
// Parses and fully verifies a snapshot value against `want` (position, tenant, prefix checksum,
// payload size unless kAnyPayloadBytes, payload checksum). Returns the payload bytes.
Result<std::span<const uint8_t>> VerifySnapshotValue(std::span<const uint8_t> value, ModelFingerprint fingerprint,
                                                     const SnapshotMeta& want);

}  // namespace cedar::cache::detail
