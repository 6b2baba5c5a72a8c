// Ragged multi-sequence prefill (issue 14): the prefill chunks of several sequences in one
// engine pass. Each sequence brings its own rows (any number, at its own position); the weight
// products (attention projections, grouped output, router, experts, shared expert) run in one
// pool pass per site over the rows of all of them, while windows, compressor pools, the indexer
// and attention stay per sequence (engine/forward.h RunLayerSegments).
//
// Exactness: every sequence ends bit for bit where PrefillEncode / PrefillFinish on it alone
// would leave it (tests/scheduler_batch_test.cpp). With kernels::SetRowInvariantMatmul(true) a
// row of a product does not depend on the other rows in it (kernels/gemm_rowinv.h), so all rows
// share each product; with it off, each sequence's rows get products of their own within the
// pass (engine/row_groups.h: a chunk's rows apart, one-row segments in groups of at most 16).
#pragma once
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <vector>

#include "engine/engine.h"

namespace cedar {

// One sequence's chunk in a batched encode.
struct EncodeChunk {
  SequenceState* st = nullptr;       // appended at st->pos
  std::span<const int32_t> tokens;   // the chunk's tokens [n]
};

// PrefillEncode on every chunk, in one pass: returns each chunk's StepStats (in order).
// REQUIRES: distinct states (throws std::invalid_argument otherwise, or on a bad token or
// length, before any state is touched).
std::vector<StepStats> PrefillEncodeBatch(const Model& m, std::span<const EncodeChunk> chunks);

// One decoding sequence's next token, riding in a batched encode.
struct DecodeRow {
  SequenceState* st = nullptr;
  int32_t token = 0;
};
struct EncodeDecodeResult {
  std::vector<StepStats> encode;             // per chunk, as PrefillEncodeBatch
  std::vector<std::vector<float>> logits;    // per decode row [V], as DecodeBatch
  std::vector<StepStats> decode;             // per decode row
};
// PrefillEncodeBatch(chunks) and DecodeBatch(rows) in one pass: the decode rows go through the
// encoder layers [0, E] beside the chunks' rows (in the same pool passes: the weights are
// streamed once for both), then on alone through the decoder layers (E, L). Every result is the
// bits of the separate calls. REQUIRES: distinct states over chunks and rows.
EncodeDecodeResult EncodeDecodeBatch(const Model& m, std::span<const EncodeChunk> chunks, std::span<const DecodeRow> rows);

// One sequence's decoder phase in a batched finish.
struct FinishJob {
  SequenceState* st = nullptr;
  PrefillMode mode = PrefillMode::kBounded;  // as PrefillFinish: not kFull
  int max_layers = std::numeric_limits<int>::max();  // PrefillFinishLayers: decoder layers this call runs at most (>= 1)
};

// PrefillFinish on every job, in one pass (decoder layers [E, L), each sequence with its own
// staircase or bounded rows and window floors): returns each job's PrefillResult (in order).
// REQUIRES: distinct states, each with rows encoded since its last decoder pass, none with a
// phase begun by PrefillFinishLayers; every max_layers left at its default.
std::vector<PrefillResult> PrefillFinishBatch(const Model& m, std::span<const FinishJob> jobs);

// The decoder phases in parts (issue 14: a 16K prompt's bounded replay on `small` is ~140 ms,
// about two steps' work, that a step holding it whole makes every decoding session wait). Each job runs at most
// max_layers more decoder layers, beginning its phase if it has not begun; a job whose phase is
// not over keeps its rows between two layers in its state (SequenceState::decoder_run) and gets
// no result. Jobs at different layers share the layers they both run. A phase paused between
// layers computes what it computes whole (the same layers over the same rows in the same
// order), so its bits do not depend on where it pauses: equal to PrefillFinish and to
// PrefillFinishBatch (tests/scheduler_batch_test.cpp). Throws std::invalid_argument before
// touching any state on a full mode, a max_layers below 1, a mode other than the one the
// phase began with, or nothing encoded since the last decoder pass.
std::vector<std::optional<PrefillResult>> PrefillFinishLayers(const Model& m, std::span<const FinishJob> jobs);

}  // namespace cedar
