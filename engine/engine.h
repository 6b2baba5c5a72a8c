// The engine's public entry points: prefill in every mode of spec §5, decode, and Encoder
// SWA Bounded Replay. The model is const; the caller owns the SequenceState.
// Thread contract: calls on one SequenceState must not overlap; one Model serves many.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "engine/forward.h"
#include "engine/model.h"
#include "engine/state.h"

namespace cedar {

enum class PrefillMode {
  kFull,          // every row through every layer: the ground truth
  kExact,         // encoder for all rows, decoder for the staircase only; equals kFull
  kBounded,       // Decoder SWA Bounded Replay: decoder for the last min(W, N) rows
  kBoundedPaper,  // the paper's variant: layer E's window is truncated too
};
const char* ModeName(PrefillMode m);
bool ParseMode(const std::string& s, PrefillMode* out);  // "full", "exact", "bounded", "bounded-paper"

// The rows leaving chosen layers during a Prefill: a speculative drafter conditions on the prompt's
// hidden states too (engine/speculative.h, ObservePrefill). Per layer, the rows that passed it
// (every row in full mode; in exact/bounded the decoder layers pass only the last rows), of which
// the last `max_rows` are kept, so a long prompt costs max_rows rows per layer, not all of them.
struct HiddenCapture {
  std::vector<int> layers;                // layers whose output rows are wanted
  int64_t max_rows = 0;                   // keep at most the last max_rows rows per layer (0 = all)
  std::vector<int64_t> first;             // out: [layers.size()] position of rows[j]'s first row
  std::vector<std::vector<float>> rows;   // out: [layers.size()][n_j, width]
  int width = 0;                          // out: floats per row (ResidualWidth())
  // Called by the forward after layer l ran over rows [first, first + n) ([n, rw] at h).
  void Add(int l, int64_t row_first, int n, const float* h, int rw);
};

struct PrefillOptions {
  PrefillMode mode = PrefillMode::kFull;
  int chunk_size = 0;                // encoder chunk size; 0 = all at once
  IndexCapture* capture = nullptr;   // optional: record the last row's index selections
  HiddenCapture* hidden = nullptr;   // optional: keep the rows leaving hidden->layers (CPU forward)
};

// Work done by one call, in layer-token units (rows that passed a layer, docs/spec-readings.md #6).
struct StepStats {
  int64_t tokens = 0;              // new tokens consumed
  int64_t layer_token_units = 0;   // all rows through all layers
  int64_t encoder_units = 0;       // of which in layers [0, E)
  int64_t decoder_units = 0;       // of which in layers [E, L)
  int64_t decoder_rows = 0;        // rows that passed the last decoder layer
  int64_t replay_rows = 0;         // rows re-run by Encoder SWA Bounded Replay
};

struct PrefillResult {
  std::vector<float> logits;  // [V] of the last row; empty when no token was given
  StepStats stats;
};

// Appends `tokens` at positions [st.pos, st.pos + n). Throws std::invalid_argument on a token
// outside the vocabulary or a length past max_seq_len (the state is left unchanged then).
PrefillResult Prefill(const Model& m, SequenceState& st, std::span<const int32_t> tokens,
                      const PrefillOptions& opt);

// Chunked prefill, for a scheduler that interleaves the chunks of several turns with decode
// steps (session/, issue 14). PrefillEncode appends `tokens` through the encoder [0, E) and
// layer E's window entries and pool (no decoder rows); PrefillFinish then runs the decoder
// phase of `mode` over everything appended since the last decoder pass and returns the logits
// of the last row. Encode calls over chunks c1..ck then one Finish equal
// Prefill(c1 + ... + ck, {mode, chunk_size}) with the same chunk boundaries, bit for bit.
// REQUIRES: mode != kFull (full runs the decoder per chunk: use Prefill). Between the calls
// the state is mid-prefill: only further PrefillEncode calls or PrefillFinish may touch it.
// `hidden` (optional, as PrefillOptions::hidden): the rows leaving hidden->layers, so that the
// chunks and the decoder phase together capture what Prefill would (a speculating turn's drafter).
StepStats PrefillEncode(const Model& m, SequenceState& st, std::span<const int32_t> tokens, HiddenCapture* hidden = nullptr);
PrefillResult PrefillFinish(const Model& m, SequenceState& st, PrefillMode mode, HiddenCapture* hidden = nullptr);

// One token through all L layers; returns its logits [V].
std::vector<float> DecodeStep(const Model& m, SequenceState& st, int32_t token, StepStats* stats = nullptr);

// One token for each of several sequences, through all L layers together: the weight
// products run once over the batch. Equals DecodeStep on each state (float tolerance).
// REQUIRES: distinct states; tokens.size() == states.size(). Returns logits [V] per state.
std::vector<std::vector<float>> DecodeBatch(const Model& m, std::span<SequenceState* const> states,
                                            std::span<const int32_t> tokens, std::vector<StepStats>* stats = nullptr);

// Speculative verification (engine/speculative.h). VerifyPass feeds `tokens` (n <= 16: the few-row
// products are row-invariant) as ONE full-mode pass, every row through every layer, and returns
// the logits of every row [n][V]: row i's equal, bit for bit, what DecodeStep returns after
// tokens[0..i] were fed one at a time. It keeps what RollbackVerify needs (n more rows of every
// window and of H_E, the pools' open half groups) in `mark`. `hidden_layers` (optional): layers
// whose output rows are wanted; (*hidden)[j] gets rows [n, ResidualWidth()] leaving hidden_layers[j].
struct VerifyMark {
  int64_t pos0 = 0;                  // st.pos before the pass
  int64_t n = 0;                     // rows fed
  int64_t keep_extra_rows = 0;       // st.keep_extra_rows before the pass
  struct PoolMark {
    size_t entries = 0, keys = 0;    // floats before the pass
    bool has_pending = false;
    std::vector<float> pending_c, pending_z;
  };
  std::vector<PoolMark> pools;       // one per st.pools
};
std::vector<std::vector<float>> VerifyPass(const Model& m, SequenceState& st, std::span<const int32_t> tokens, VerifyMark* mark,
                                           const std::vector<int>* hidden_layers = nullptr,
                                           std::vector<std::vector<float>>* hidden = nullptr);
// Keeps the first `keep` (0..n) rows of the last VerifyPass and drops the others: the state ends
// exactly as if only those tokens had been fed by DecodeStep (tested by state hash). Always call
// it after VerifyPass (keep = n too): it also ends the pass's extra history.
void RollbackVerify(const Model& m, SequenceState& st, const VerifyMark& mark, int64_t keep);

// XXH3 over everything a state holds (positions, tokens, windows, pools with their open half
// groups, H_E): equal hashes = equal states, for the tests of speculative rollback.
uint64_t StateHash(const SequenceState& st);

// Encoder SWA Bounded Replay of the prefix st.tokens[0, st.pos): rows [P-R, P), R = min(W, P),
// pass the encoder with floor P-R; regenerates encoder window entries and H_E (and layer E's
// window entries) of those rows. Pools are never rewritten. REQUIRES st.tokens.size() == st.pos.
StepStats EncoderReplay(const Model& m, SequenceState& st);

// Exact restore of the encoder's window state of the prefix st.tokens[0, st.pos) from its pools
// alone (what a cached prefix without a snapshot holds): the last R rows pass the encoder with
// floor P - R, R = min(P, E(W-1) + the rows kept), and only the rows whose every window reached
// back to real entries are kept: layer l's entries from row P - R + l(W-1) on, H_E from
// P - R + E(W-1) (docs/spec-readings.md #13). Equals the state a full prefill leaves (float
// tolerance); pools are never rewritten and nothing is marked replayed. Decoder windows are
// left empty (decoder_pos = 0), as after a snapshot. REQUIRES st.tokens.size() == st.pos.
StepStats ExactEncoderRestore(const Model& m, SequenceState& st);
// The R above: rows ExactEncoderRestore runs for a prefix of P tokens and a state that keeps
// `keep_h_e_rows` of H_E and `keep_extra_rows` of slack.
int64_t ExactRestoreRows(const ModelConfig& c, int64_t P, int64_t keep_h_e_rows, int64_t keep_extra_rows);

// Recomputes layer E's window entries from the H_E rows the state holds (they are a
// projection of H_E): what a restored snapshot needs before the decoder can run.
void RebuildLayerEWindow(const Model& m, SequenceState& st);

// Layer-token units each mode must spend on a fresh prompt of n tokens (the formulas).
int64_t ExpectedUnits(const ModelConfig& c, PrefillMode mode, int64_t n);

}  // namespace cedar
