// One layer of the CED model over a batch of consecutive rows (spec §3). Internal to the
// engine: execution.cpp decides which rows pass which layer; this file computes them.
#pragma once
#include <cstdint>
#include <map>
#include <vector>

#include "engine/model.h"
#include "engine/state.h"

namespace cedar {

// Hidden states of consecutive rows [first, first + n).
struct Rows {
  int64_t first = 0;
  int n = 0;
  std::vector<float> h;  // [n, ResidualWidth()]: h [d], or with mHC X [hc, d] then a [hc] (engine/mhc.h)
  int64_t end() const { return first + n; }
};

// Per-row selections made during one engine call (one "pass"), keyed by layer.
struct Selection {
  int64_t first = 0;                  // position of row 0
  int width = 0;                      // max entries per row
  std::vector<int32_t> idx;           // [rows, width] entry indices (ascending), padded
  std::vector<int32_t> count;         // [rows]
  const int32_t* Row(int64_t pos) const { return idx.data() + size_t(pos - first) * width; }
  int Count(int64_t pos) const { return count[size_t(pos - first)]; }
  bool Has(int64_t pos) const { return pos >= first && pos < first + int64_t(count.size()); }
};

// What the last prompt row selected at each index-source layer (golden checks, debugging).
struct IndexCapture {
  int64_t pos = -1;                                // the row to capture
  std::map<int, std::vector<int32_t>> topk;        // layer -> selected entries (ascending)
  std::map<int, std::vector<float>> scores;        // layer -> scores over visible entries
};

struct PassContext {
  std::map<int, Selection> topk;        // index-source layer -> top-k per row
  std::map<int, Selection> candidates;  // candidate-source layer -> kept block ids per row
  IndexCapture* capture = nullptr;
  int64_t layer_token_units = 0;        // rows whose layer output was computed, summed
  int64_t last_layer_rows = 0;          // of which rows through the last layer
  // Token ids of this call's new rows, not yet in SequenceState::tokens: positions
  // [new_tokens_first, new_tokens_first + n_new_tokens). Engram reads the ids of the rows it
  // updates (and the n-gram history before them) from here or from the state's tokens.
  const int32_t* new_tokens = nullptr;
  int64_t new_tokens_first = 0;
  int64_t n_new_tokens = 0;
};

// Runs layer `l` on h (rows entering layer l):
//  - appends window entries for rows >= windows[l].hi() (REQUIRES: h.first <= that, or a gap
//    that empties the store);
//  - if l is a kv source, compresses rows >= pool.rows_seen into the pool;
//  - computes the layer output for rows >= out_from with window floor `floor`;
// then h holds only rows [out_from, h.end()) leaving layer l.
void RunLayer(const Model& m, SequenceState& st, int l, Rows& h, int64_t out_from, int64_t floor,
              PassContext& ctx);

// Rows of one sequence inside a batch of several (RunLayerSegments).
struct Segment {
  SequenceState* st = nullptr;
  PassContext* ctx = nullptr;
  int64_t first = 0;     // position of the segment's first row entering the layer
  int n = 0;             // rows entering
  int64_t out_from = 0;  // rows >= this get the layer's output
  int64_t floor = 0;     // window floor of this segment's rows
};

// RunLayer over several sequences at once: h holds the rows of every segment, in order
// ([sum n, ResidualWidth()]); the weight products run once over all of them (what makes batched decode
// cheaper than one sequence at a time), the window, pool, indexer and attention per segment.
// Afterwards h holds the output rows of every segment and each segment describes its own.
void RunLayerSegments(const Model& m, int l, std::vector<Segment>& segs, std::vector<float>& h);

// logits[V] = head * RMSNorm_final(h_row), h_row [ResidualWidth()]; with mHC the norm reads
// sum_i a[i] X_i (the last FFN's pre).
std::vector<float> ComputeLogits(const Model& m, const float* h_row);

// Embedding rows of `tokens` starting at position `first`.
Rows Embed(const Model& m, const int32_t* tokens, int n, int64_t first);
// One token's embedding as a residual row [ResidualWidth()]: e, or with mHC e in every stream
// and the pre-mix a = (1, 0, ..., 0).
void EmbedRow(const Model& m, int32_t token, float* row);

}  // namespace cedar
