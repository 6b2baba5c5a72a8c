// Pieces of engine.cpp's prefill that the batched prefill (engine/batch_prefill.cpp) runs too,
// so the two cannot drift apart (internal to engine/).
#pragma once
#include <span>

#include "engine/engine.h"
#include "engine/forward.h"
#include "engine/model.h"
#include "engine/state.h"

namespace cedar {

// Throws std::invalid_argument on a token outside the vocabulary or a length past max_seq_len.
void CheckTokens(const Model& m, const SequenceState& st, std::span<const int32_t> tokens);

// Keeps what a later call can need: the last W rows of every window and of H_E, and 2W-1
// rows of layer E's window (a bounded replay of the next turn reads that far back).
void TrimState(const ModelConfig& c, SequenceState& st);

// A decoder phase between two of its layers (SequenceState::decoder_run): what PrefillFinish
// keeps on its stack from one layer to the next, kept in the state so that the phase can pause.
struct DecoderRun {
  PrefillMode mode = PrefillMode::kBounded;
  std::vector<int64_t> starts;  // [L]: first row passing layer l (DecoderPhaseStarts)
  int next_layer = 0;           // the first decoder layer not yet run
  Rows h;                       // rows entering next_layer [h.n, ResidualWidth()]
  PassContext ctx;              // the pass's selections (index-source layers feed later ones) and counts
};

}  // namespace cedar
