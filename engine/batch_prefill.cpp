// Ragged multi-sequence prefill (engine/batch_prefill.h): PrefillEncode and PrefillFinish of
// engine.cpp over several sequences at once, as Segments of RunLayerSegments. Every step here
// mirrors the single-sequence body in engine.cpp (kept in step with it).
#include "engine/batch_prefill.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <set>
#include <stdexcept>

#include "engine/prefill_parts.h"
#include "engine/row_plan.h"

namespace cedar {

namespace {

template <class T>
void CheckDistinct(std::span<const T> items, const char* what) {
  std::set<const SequenceState*> seen;
  for (const T& it : items) {
    if (!it.st) throw std::invalid_argument(std::string(what) + ": a null state");
    if (!seen.insert(it.st).second) throw std::invalid_argument(std::string(what) + ": the same state twice in one batch");
  }
}

}  // namespace

std::vector<StepStats> PrefillEncodeBatch(const Model& m, std::span<const EncodeChunk> chunks) {
  return EncodeDecodeBatch(m, chunks, {}).encode;
}

// The body of PrefillEncode (chunks) and of DecodeBatch (rows) in engine.cpp, interleaved: the
// segments of both pass layers [0, E] together; the decode rows' segments go on alone.
EncodeDecodeResult EncodeDecodeBatch(const Model& m, std::span<const EncodeChunk> chunks, std::span<const DecodeRow> rows) {
  const ModelConfig& c = m.config();
  const int rw = c.ResidualWidth();  // floats per residual row (H_E, h)
  const int E = c.n_encoder_layers, L = c.n_layers;
  {
    std::set<const SequenceState*> seen;
    for (const EncodeChunk& ch : chunks)
      if (!ch.st || !seen.insert(ch.st).second) throw std::invalid_argument("EncodeDecodeBatch: a null state or the same state twice");
    for (const DecodeRow& r : rows)
      if (!r.st || !seen.insert(r.st).second) throw std::invalid_argument("EncodeDecodeBatch: a null state or the same state twice");
  }
  for (const EncodeChunk& ch : chunks) CheckTokens(m, *ch.st, ch.tokens);
  for (const DecodeRow& r : rows) CheckTokens(m, *r.st, std::span<const int32_t>(&r.token, 1));
  EncodeDecodeResult res;
  res.encode.resize(chunks.size());
  // Segments: the chunks with rows (idx), then one per decode row; h holds their rows in order.
  std::vector<size_t> idx;
  size_t total = 0;
  for (size_t i = 0; i < chunks.size(); ++i) {
    res.encode[i].tokens = int64_t(chunks[i].tokens.size());
    if (!chunks[i].tokens.empty()) {
      idx.push_back(i);
      total += chunks[i].tokens.size();
    }
  }
  const size_t S = idx.size(), B = rows.size();
  if (S + B == 0) return res;
  std::vector<PassContext> ctx(S + B);
  std::vector<Segment> segs(S + B);
  std::vector<float> h((total + B) * size_t(rw));
  size_t r0 = 0;
  for (size_t j = 0; j < S; ++j) {
    const EncodeChunk& ch = chunks[idx[j]];
    SequenceState& st = *ch.st;
    const int len = int(ch.tokens.size());
    for (int r = 0; r < len; ++r) EmbedRow(m, ch.tokens[size_t(r)], h.data() + (r0 + size_t(r)) * rw);
    ctx[j].new_tokens = ch.tokens.data();
    ctx[j].new_tokens_first = st.pos;
    ctx[j].n_new_tokens = len;
    segs[j] = Segment{&st, &ctx[j], st.pos, len, st.pos, 0};
    r0 += size_t(len);
  }
  for (size_t b = 0; b < B; ++b) {
    SequenceState& st = *rows[b].st;
    EmbedRow(m, rows[b].token, h.data() + (r0 + b) * rw);
    ctx[S + b].new_tokens = &rows[b].token;
    ctx[S + b].new_tokens_first = st.pos;
    ctx[S + b].n_new_tokens = 1;
    segs[S + b] = Segment{&st, &ctx[S + b], st.pos, 1, st.pos, 0};
  }
  for (int l = 0; l < E; ++l) RunLayerSegments(m, l, segs, h);
  // H_E rows of every segment; at layer E the chunks get their window entries and pool only (no
  // output rows), the decode rows their output.
  r0 = 0;
  for (size_t j = 0; j < S + B; ++j) {
    Segment& sg = segs[j];
    for (int r = 0; r < sg.n; ++r)
      std::copy(h.begin() + (r0 + size_t(r)) * rw, h.begin() + (r0 + size_t(r) + 1) * rw, sg.st->h_e.Append(sg.first + r));
    r0 += size_t(sg.n);
    if (j < S) sg.out_from = sg.first + sg.n;
  }
  RunLayerSegments(m, E, segs, h);
  // h now holds the decode rows alone (the chunks left no rows): they go on by themselves.
  std::vector<Segment> dec(segs.begin() + ptrdiff_t(S), segs.end());
  for (int l = E + 1; l < L && B > 0; ++l) RunLayerSegments(m, l, dec, h);
  for (size_t j = 0; j < S; ++j) {
    const EncodeChunk& ch = chunks[idx[j]];
    SequenceState& st = *ch.st;
    const int64_t len = int64_t(ch.tokens.size());
    st.pos += len;
    st.tokens.insert(st.tokens.end(), ch.tokens.begin(), ch.tokens.end());
    for (int l = 0; l < E; ++l) st.windows[size_t(l)].DropBefore(WindowKeepFrom(c, l, st.pos, st.keep_extra_rows));
    StepStats& s = res.encode[idx[j]];
    s.layer_token_units = ctx[j].layer_token_units;
    s.encoder_units = len * E;
    s.decoder_units = ctx[j].layer_token_units - s.encoder_units;
  }
  res.logits.resize(B);
  res.decode.resize(B);
  for (size_t b = 0; b < B; ++b) {  // as DecodeBatch's epilogue
    SequenceState& st = *rows[b].st;
    res.logits[b] = ComputeLogits(m, h.data() + b * size_t(rw));
    st.tokens.push_back(rows[b].token);
    st.pos += 1;
    st.decoder_pos = st.pos;
    TrimState(c, st);
    StepStats& s = res.decode[b];
    s.tokens = 1;
    s.layer_token_units = ctx[S + b].layer_token_units;
    s.encoder_units = E;
    s.decoder_units = ctx[S + b].layer_token_units - E;
    s.decoder_rows = ctx[S + b].last_layer_rows;
  }
  spdlog::debug("batched encode: {} chunks, {} rows, {} decode rows", S, total, B);
  return res;
}

std::vector<PrefillResult> PrefillFinishBatch(const Model& m, std::span<const FinishJob> jobs) {
  const ModelConfig& c = m.config();
  const int rw = c.ResidualWidth();  // floats per residual row (H_E, h)
  const int E = c.n_encoder_layers, L = c.n_layers;
  CheckDistinct(jobs, "PrefillFinishBatch");
  for (const FinishJob& j : jobs) {
    if (j.mode == PrefillMode::kFull) throw std::invalid_argument("PrefillFinishBatch: full mode has no separate decoder phase");
    if (j.st->pos == j.st->decoder_pos)
      throw std::invalid_argument("PrefillFinishBatch: no rows were encoded since the last decoder pass");
  }
  std::vector<PrefillResult> res(jobs.size());
  if (jobs.empty()) return res;
  const size_t B = jobs.size();
  std::vector<std::vector<int64_t>> a(B);  // a[i][l]: first row of sequence i passing layer l
  std::vector<PassContext> ctx(B);
  std::vector<Segment> segs(B);
  std::vector<float> h;
  for (size_t i = 0; i < B; ++i) {
    SequenceState& st = *jobs[i].st;
    const int64_t N = st.pos;
    a[i] = DecoderPhaseStarts(c, jobs[i].mode, N, st.decoder_pos, st.h_e.lo());
    for (int l = E + 1; l < L; ++l) st.windows[size_t(l)].DropFrom(a[i][size_t(l - 1)]);  // recomputed below
    const int64_t first = a[i][size_t(E)];
    h.insert(h.end(), st.h_e.Row(first), st.h_e.Row(first) + size_t(N - first) * rw);
    segs[i] = Segment{&st, &ctx[i], first, int(N - first), first, 0};
  }
  for (int l = E; l < L; ++l) {
    for (size_t i = 0; i < B; ++i) {
      segs[i].out_from = a[i][size_t(l)];
      segs[i].floor = DecoderPhaseFloor(c, jobs[i].mode, l, jobs[i].st->pos);
    }
    RunLayerSegments(m, l, segs, h);
  }
  size_t r0 = 0;
  for (size_t i = 0; i < B; ++i) {
    SequenceState& st = *jobs[i].st;
    r0 += size_t(segs[i].n);
    res[i].logits = ComputeLogits(m, h.data() + (r0 - 1) * rw);  // the last row of sequence i
    st.decoder_pos = st.pos;
    TrimState(c, st);
    res[i].stats.layer_token_units = res[i].stats.decoder_units = ctx[i].layer_token_units;
    res[i].stats.decoder_rows = ctx[i].last_layer_rows;
  }
  spdlog::debug("batched finish: {} sequences, {} rows leaving the last layer", B, r0);
  return res;
}

}  // namespace cedar
