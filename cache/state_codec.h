// The bridge between the engine's SequenceState and the prefix cache's opaque payloads.
//
// Page payload (page of tokens [s, s + page)): for every pool in layer order, the rows of its
// entries j in [s/m, (s+page)/m): main entries [n, c] then index keys [n, index_head_dim],
// raw float32. The page size is even, so m = 2 groups never straddle a page. With kv_dtype
// "released" the rows are stored as released instead (engine/kv_precision.h): a main entry as FP4
// E2M1 codes + E4M3 scales per 16 (288 bytes at c = 512), an index key as MXFP4 (68 at 128); they
// decode to the very floats the forward computed, so a restore equals a fresh computation.
//
// Snapshot payload (resume state after P tokens, P a page boundary, so no half group is
// pending): the encoder window entries of layers [0, E) for rows [P - min(W, P), P), and the
// H_E rows [P - h, P) the state holds (h = the staircase plus W - 1 when the session wants
// exact restores, else W). Layer E's window is rebuilt from H_E; decoder windows are not
// stored (spec §6: only a live session holds them), an exact decoder rebuilds them from H_E.
// Window rows are F32 (header version 1) or, with kv_dtype "released", FP8 E4M3 + UE8M0 per 32
// (version 2); H_E stays F32. A snapshot of the other kind is refused with a Corruption naming both.
//
// Decoder tail (optional, after H_E): a snapshot cut exactly where a computation ended (the
// state's pos == P and its decoder ran to P) may also carry the windows of decoder layers
// (E, L) for rows [P - W, P) and the logits [V] of row P - 1. A request whose prompt is exactly
// those P tokens (a retried request, a sub-agent re-sending its task) then resumes with no
// computation: without the tail its last token must run, so the match stops a page earlier and
// a staircase restore follows. The header's `tail` field says which decoder produced the tail
// (version-1 payloads written before tails existed hold 0 there: no tail).
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "cache/cache_types.h"
#include "cache/status.h"
#include "engine/model.h"
#include "engine/state.h"

namespace cedar::cache {

// Bytes of one page payload for this config.
size_t PageBytes(const ModelConfig& c, size_t page_tokens);

// REQUIRES: st holds pool rows for [start, start + page_tokens).
Payload EncodePage(const ModelConfig& c, const SequenceState& st, int64_t start, size_t page_tokens);

// Which decoder computed a snapshot's tail; the reader uses a tail only when a fresh
// computation of the same prompt under its decoder policy would give the same numbers.
enum class DecoderTail : int32_t {
  kNone = 0,     // no tail
  kExact = 1,    // decoder windows equal a full computation's (exact prefill, live decoder)
  kBounded = 2,  // Decoder SWA Bounded Replay of the last min(W, P) rows
};

struct TailInput {
  DecoderTail kind = DecoderTail::kNone;
  std::span<const float> logits;  // [V] of row P - 1
};

// REQUIRES: position is even and the state holds window rows and H_E rows up to `position`
// (it may be past it: rows at or after `position` are not stored). With a tail (kind !=
// kNone): position == st.pos == st.decoder_pos and logits of vocab_size floats, else
// FailedPrecondition.
Result<Payload> EncodeSnapshot(const ModelConfig& c, const SequenceState& st, int64_t position, int64_t h_e_rows,
                               const TailInput& tail = {});

// The tail a snapshot carries (kNone for a null or malformed payload).
DecoderTail SnapshotTail(const Payload& snapshot);

// Builds a state at position `pages.size() * page_tokens` from cached pages (pools) and the
// prompt tokens. Windows and H_E are empty: apply a snapshot or run EncoderReplay next.
Result<SequenceState> StateFromPages(const ModelConfig& c, std::span<const Payload> pages, size_t page_tokens,
                                     std::span<const int32_t> tokens);

// Applies a snapshot taken at st.pos (checks the header against the state); then the caller
// rebuilds layer E's window (RebuildLayerEWindow). Corruption on any mismatch. With `logits`
// and a snapshot that has a tail, also restores the decoder windows (decoder_pos = pos) and
// fills *logits [V]; otherwise the tail is checked and skipped (decoder_pos = 0).
Status ApplySnapshot(const ModelConfig& c, const Payload& snapshot, SequenceState& st,
                     std::vector<float>* logits = nullptr);

}  // namespace cedar::cache
