// Pieces of engine.cpp's prefill that the batched prefill (engine/batch_prefill.cpp) runs too,
// so the two cannot drift apart (internal to engine/).
#pragma once
#include <span>

#include "engine/model.h"
#include "engine/state.h"

namespace cedar {

// Throws std::invalid_argument on a token outside the vocabulary or a length past max_seq_len.
void CheckTokens(const Model& m, const SequenceState& st, std::span<const int32_t> tokens);

// Keeps what a later call can need: the last W rows of every window and of H_E, and 2W-1
// rows of layer E's window (a bounded replay of the next turn reads that far back).
void TrimState(const ModelConfig& c, SequenceState& st);

}  // namespace cedar
