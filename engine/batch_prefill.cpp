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

size_t DecoderRunBytes(const DecoderRun& run) { return run.h.h.size() * sizeof(float); }

std::vector<PrefillResult> PrefillFinishBatch(const Model& m, std::span<const FinishJob> jobs) {
  for (const FinishJob& j : jobs) {
    if (j.st && j.st->decoder_run) throw std::invalid_argument("PrefillFinishBatch: a decoder phase was begun in parts");
    if (j.max_layers != std::numeric_limits<int>::max()) throw std::invalid_argument("PrefillFinishBatch: whole phases only");
  }
  std::vector<std::optional<PrefillResult>> parts = PrefillFinishLayers(m, jobs);
  std::vector<PrefillResult> res;
  for (std::optional<PrefillResult>& r : parts) res.push_back(std::move(r.value()));
  return res;
}

std::vector<std::optional<PrefillResult>> PrefillFinishLayers(const Model& m, std::span<const FinishJob> jobs) {
  const ModelConfig& c = m.config();
  const int rw = c.ResidualWidth();  // floats per residual row (H_E, h)
  const int E = c.n_encoder_layers, L = c.n_layers;
  CheckDistinct(jobs, "PrefillFinishLayers");
  for (const FinishJob& j : jobs) {
    if (j.mode == PrefillMode::kFull) throw std::invalid_argument("PrefillFinishLayers: full mode has no separate decoder phase");
    if (j.max_layers < 1)
      throw std::invalid_argument("PrefillFinishLayers: expected max_layers >= 1, found " + std::to_string(j.max_layers));
    if (j.st->decoder_run) {
      if (j.st->decoder_run->mode != j.mode)
        throw std::invalid_argument(std::string("PrefillFinishLayers: the phase began in mode ") + ModeName(j.st->decoder_run->mode) +
                                    ", continued in " + ModeName(j.mode));
    } else if (j.st->pos == j.st->decoder_pos) {
      throw std::invalid_argument("PrefillFinishLayers: no rows were encoded since the last decoder pass");
    }
  }
  const size_t B = jobs.size();
  std::vector<DecoderRun*> run(B);
  std::vector<int> stop(B);  // the layer each job stops before in this call
  int lo = L, hi = E;
  for (size_t i = 0; i < B; ++i) {
    SequenceState& st = *jobs[i].st;
    if (!st.decoder_run) {  // begin: what PrefillFinish does before its first decoder layer
      auto r = std::make_shared<DecoderRun>();
      const int64_t N = st.pos;
      r->mode = jobs[i].mode;
      r->starts = DecoderPhaseStarts(c, r->mode, N, st.decoder_pos, st.h_e.lo());
      for (int l = E + 1; l < L; ++l) st.windows[size_t(l)].DropFrom(r->starts[size_t(l - 1)]);  // recomputed below
      r->next_layer = E;
      r->h.first = r->starts[size_t(E)];
      r->h.n = int(N - r->h.first);
      r->h.h.assign(st.h_e.Row(r->h.first), st.h_e.Row(r->h.first) + size_t(r->h.n) * rw);
      st.decoder_run = std::move(r);
    }
    run[i] = st.decoder_run.get();
    stop[i] = L - run[i]->next_layer <= jobs[i].max_layers ? L : run[i]->next_layer + jobs[i].max_layers;
    lo = std::min(lo, run[i]->next_layer);
    hi = std::max(hi, stop[i]);
  }
  // Layer by layer, the jobs that run it share one pass (their rows side by side in h). Rows are
  // gathered into h when the set of jobs changes and handed back to the jobs when it changes
  // again or the call ends: a whole phase (the default) copies them once each way, as before.
  std::vector<size_t> who, next;
  std::vector<Segment> segs;
  std::vector<float> h;
  const auto hand_back = [&] {
    size_t r0 = 0;
    for (size_t k = 0; k < who.size(); ++k) {
      DecoderRun& r = *run[who[k]];
      r.h.first = segs[k].first;
      r.h.n = segs[k].n;
      r.h.h.assign(h.begin() + r0 * size_t(rw), h.begin() + (r0 + size_t(r.h.n)) * size_t(rw));
      r0 += size_t(r.h.n);
    }
  };
  for (int l = lo; l < hi; ++l) {
    next.clear();
    for (size_t i = 0; i < B; ++i)
      if (run[i]->next_layer == l && l < stop[i]) next.push_back(i);
    if (next != who) {
      hand_back();
      who.swap(next);
      segs.clear();
      h.clear();
      for (size_t i : who) {
        DecoderRun& r = *run[i];
        segs.push_back(Segment{jobs[i].st, &r.ctx, r.h.first, r.h.n, r.h.first, 0});
        h.insert(h.end(), r.h.h.begin(), r.h.h.end());
      }
    }
    if (who.empty()) continue;
    for (size_t k = 0; k < who.size(); ++k) {
      const DecoderRun& r = *run[who[k]];
      segs[k].out_from = r.starts[size_t(l)];
      segs[k].floor = DecoderPhaseFloor(c, r.mode, l, jobs[who[k]].st->pos);
    }
    RunLayerSegments(m, l, segs, h);
    for (size_t i : who) run[i]->next_layer = l + 1;
  }
  hand_back();
  std::vector<std::optional<PrefillResult>> res(B);
  int ended = 0;
  for (size_t i = 0; i < B; ++i) {
    SequenceState& st = *jobs[i].st;
    DecoderRun& r = *run[i];
    if (r.next_layer < L) continue;
    PrefillResult out;
    out.logits = ComputeLogits(m, r.h.h.data() + size_t(r.h.n - 1) * rw);  // the last row
    out.stats.layer_token_units = out.stats.decoder_units = r.ctx.layer_token_units;
    out.stats.decoder_rows = r.ctx.last_layer_rows;
    res[i] = std::move(out);
    st.decoder_run.reset();
    st.decoder_pos = st.pos;
    TrimState(c, st);
    ++ended;
  }
  spdlog::debug("batched finish: {} sequences, layers [{}, {}), {} phases ended", B, lo, hi, ended);
  return res;
}

}  // namespace cedar
