#include "engine/engine.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <stdexcept>

#include <xxhash.h>

#include "engine/prefill_parts.h"
#include "engine/row_plan.h"

namespace cedar {

const char* ModeName(PrefillMode m) {
  switch (m) {
    case PrefillMode::kFull: return "full";
    case PrefillMode::kExact: return "exact";
    case PrefillMode::kBounded: return "bounded";
    case PrefillMode::kBoundedPaper: return "bounded-paper";
  }
  return "?";
}

bool ParseMode(const std::string& s, PrefillMode* out) {
  for (PrefillMode m : {PrefillMode::kFull, PrefillMode::kExact, PrefillMode::kBounded, PrefillMode::kBoundedPaper})
    if (s == ModeName(m)) {
      *out = m;
      return true;
    }
  return false;
}

int64_t ExpectedUnits(const ModelConfig& c, PrefillMode mode, int64_t n) {
  const int64_t L = c.n_layers, E = c.n_encoder_layers, W = c.window;
  switch (mode) {
    case PrefillMode::kFull: return n * L;
    case PrefillMode::kBounded:
    case PrefillMode::kBoundedPaper: return n * E + std::min(W, n) * (L - E);
    case PrefillMode::kExact: {
      int64_t units = n * E;
      for (int64_t l = E; l < L; ++l) units += std::min(n, W + (L - 1 - l) * (W - 1));
      return units;
    }
  }
  return 0;
}

void HiddenCapture::Add(int l, int64_t row_first, int n, const float* h, int rw) {
  if (n <= 0) return;
  width = rw;
  first.resize(layers.size(), 0);
  rows.resize(layers.size());
  for (size_t j = 0; j < layers.size(); ++j) {
    if (layers[j] != l) continue;
    std::vector<float>& r = rows[j];
    const int64_t have = int64_t(r.size()) / rw;
    if (have == 0 || first[j] + have != row_first) {  // not contiguous (a decoder phase's rows): replace
      r.clear();
      first[j] = row_first;
    }
    r.insert(r.end(), h, h + size_t(n) * rw);
    const int64_t total = int64_t(r.size()) / rw;
    if (max_rows > 0 && total > max_rows) {
      r.erase(r.begin(), r.begin() + size_t(total - max_rows) * rw);
      first[j] += total - max_rows;
    }
  }
}

// CheckTokens and TrimState are shared with the batched prefill (engine/prefill_parts.h).
void CheckTokens(const Model& m, const SequenceState& st, std::span<const int32_t> tokens) {
  const ModelConfig& c = m.config();
  if (st.decoder_run) throw std::logic_error("the state is in the middle of a decoder phase (PrefillFinishLayers)");
  for (size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i] < 0 || tokens[i] >= c.vocab_size)
      throw std::invalid_argument("token " + std::to_string(tokens[i]) + " at index " + std::to_string(i) +
                                  " is outside the vocabulary [0, " + std::to_string(c.vocab_size) + ")");
  if (st.pos + int64_t(tokens.size()) > c.max_seq_len)
    throw std::invalid_argument("sequence of " + std::to_string(st.pos + int64_t(tokens.size())) +
                                " tokens exceeds the model's max_seq_len " + std::to_string(c.max_seq_len));
}

// Keeps what a later call can need: the last W rows of every window and of H_E, and 2W-1
// rows of layer E's window (a bounded replay of the next turn reads that far back).
void TrimState(const ModelConfig& c, SequenceState& st) {
  for (int l = 0; l < c.n_layers; ++l) st.windows[size_t(l)].DropBefore(WindowKeepFrom(c, l, st.pos, st.keep_extra_rows));
  st.h_e.DropBefore(HeKeepFrom(c, st.pos, st.keep_extra_rows, st.keep_h_e_rows));
}

namespace {

// The decoder after the encoder ran over every row: rows [a_l, N) pass layer l (exact: the
// staircase above the live decoder state; bounded: the last R rows).
void RunDecoderPhase(const Model& m, SequenceState& st, PrefillMode mode, PassContext& ctx, std::vector<float>* last_h,
                     HiddenCapture* hidden = nullptr) {
  const ModelConfig& c = m.config();
  const int rw = c.ResidualWidth();  // floats per residual row (H_E, h)
  const int E = c.n_encoder_layers, L = c.n_layers;
  const int64_t N = st.pos;
  const std::vector<int64_t> a = DecoderPhaseStarts(c, mode, N, st.decoder_pos, st.h_e.lo());  // a[l]: first row passing layer l
  for (int l = E + 1; l < L; ++l) st.windows[size_t(l)].DropFrom(a[size_t(l - 1)]);  // these rows are recomputed below
  Rows h;
  h.first = a[size_t(E)];
  h.n = int(N - h.first);
  h.h.assign(st.h_e.Row(h.first), st.h_e.Row(h.first) + size_t(h.n) * rw);
  for (int l = E; l < L; ++l) {
    const int64_t floor = DecoderPhaseFloor(c, mode, l, N);
    spdlog::debug("decoder layer {}: rows [{}, {}) floor {}", l, a[size_t(l)], N, floor);
    RunLayer(m, st, l, h, a[size_t(l)], floor, ctx);
    if (hidden) hidden->Add(l, h.first, h.n, h.h.data(), rw);
  }
  last_h->assign(h.h.end() - rw, h.h.end());
}

}  // namespace

PrefillResult Prefill(const Model& m, SequenceState& st, std::span<const int32_t> tokens, const PrefillOptions& opt) {
  const ModelConfig& c = m.config();
  const int rw = c.ResidualWidth();  // floats per residual row (H_E, h)
  CheckTokens(m, st, tokens);
  PrefillResult res;
  res.stats.tokens = int64_t(tokens.size());
  if (tokens.empty()) return res;
  const int E = c.n_encoder_layers, L = c.n_layers;
  const bool full = opt.mode == PrefillMode::kFull;
  const int64_t n = int64_t(tokens.size());
  const int64_t N = st.pos + n;
  const int chunk = opt.chunk_size > 0 ? opt.chunk_size : int(n);
  PassContext ctx;
  ctx.capture = opt.capture;
  if (ctx.capture) ctx.capture->pos = N - 1;
  ctx.new_tokens = tokens.data();
  ctx.new_tokens_first = st.pos;
  ctx.n_new_tokens = n;
  std::vector<float> last_h;
  for (int64_t c0 = 0; c0 < n; c0 += chunk) {
    const int len = int(std::min<int64_t>(chunk, n - c0));
    Rows h = Embed(m, tokens.data() + c0, len, st.pos);
    const int64_t first = st.pos;
    auto tap = [&](int l) {
      if (opt.hidden) opt.hidden->Add(l, h.first, h.n, h.h.data(), rw);
    };
    for (int l = 0; l < E; ++l) {
      RunLayer(m, st, l, h, first, 0, ctx);
      tap(l);
    }
    for (int r = 0; r < len; ++r) std::copy(h.h.begin() + size_t(r) * rw, h.h.begin() + size_t(r + 1) * rw, st.h_e.Append(first + r));
    // Layer E's window entries and the decoder pool are projections of H_E: every row gets them.
    if (full) {
      RunLayer(m, st, E, h, first, 0, ctx);
      tap(E);
      for (int l = E + 1; l < L; ++l) {
        RunLayer(m, st, l, h, first, 0, ctx);
        tap(l);
      }
    } else {
      RunLayer(m, st, E, h, first + len, 0, ctx);
    }
    st.pos = first + len;
    st.tokens.insert(st.tokens.end(), tokens.begin() + c0, tokens.begin() + c0 + len);
    for (int l = 0; l < E; ++l) st.windows[size_t(l)].DropBefore(WindowKeepFrom(c, l, st.pos, st.keep_extra_rows));
    if (full) {
      last_h.assign(h.h.end() - rw, h.h.end());
      st.decoder_pos = st.pos;
      TrimState(c, st);
    }
  }
  if (!full) {
    RunDecoderPhase(m, st, opt.mode, ctx, &last_h, opt.hidden);
    st.decoder_pos = N;
  }
  TrimState(c, st);
  res.logits = ComputeLogits(m, last_h.data());
  res.stats.layer_token_units = ctx.layer_token_units;
  res.stats.encoder_units = n * E;  // the encoder always takes every new row
  res.stats.decoder_units = ctx.layer_token_units - n * E;
  res.stats.decoder_rows = ctx.last_layer_rows;
  spdlog::debug("prefill {} tokens mode {}: {} layer-token units", n, ModeName(opt.mode), res.stats.layer_token_units);
  return res;
}

// The body of Prefill's chunk loop for one chunk of a non-full mode (kept in step with it).
StepStats PrefillEncode(const Model& m, SequenceState& st, std::span<const int32_t> tokens, HiddenCapture* hidden) {
  const ModelConfig& c = m.config();
  CheckTokens(m, st, tokens);
  StepStats s;
  s.tokens = int64_t(tokens.size());
  if (tokens.empty()) return s;
  const int E = c.n_encoder_layers;
  const int len = int(tokens.size());
  const int rw = c.ResidualWidth();  // floats per residual row (H_E, h)
  PassContext ctx;
  ctx.new_tokens = tokens.data();
  ctx.new_tokens_first = st.pos;
  ctx.n_new_tokens = len;
  Rows h = Embed(m, tokens.data(), len, st.pos);
  const int64_t first = st.pos;
  for (int l = 0; l < E; ++l) {
    RunLayer(m, st, l, h, first, 0, ctx);
    if (hidden) hidden->Add(l, h.first, h.n, h.h.data(), rw);  // as Prefill's tap
  }
  for (int r = 0; r < len; ++r) std::copy(h.h.begin() + size_t(r) * rw, h.h.begin() + size_t(r + 1) * rw, st.h_e.Append(first + r));
  RunLayer(m, st, E, h, first + len, 0, ctx);  // layer E's window entries and the decoder pool
  st.pos = first + len;
  st.tokens.insert(st.tokens.end(), tokens.begin(), tokens.end());
  for (int l = 0; l < E; ++l) st.windows[size_t(l)].DropBefore(WindowKeepFrom(c, l, st.pos, st.keep_extra_rows));
  s.layer_token_units = ctx.layer_token_units;
  s.encoder_units = int64_t(len) * E;
  s.decoder_units = ctx.layer_token_units - s.encoder_units;
  return s;
}

PrefillResult PrefillFinish(const Model& m, SequenceState& st, PrefillMode mode, HiddenCapture* hidden) {
  if (mode == PrefillMode::kFull) throw std::invalid_argument("PrefillFinish: full mode has no separate decoder phase");
  if (st.decoder_run) throw std::logic_error("PrefillFinish: the decoder phase was begun in parts (PrefillFinishLayers)");
  PrefillResult res;
  if (st.pos == st.decoder_pos) throw std::invalid_argument("PrefillFinish: no rows were encoded since the last decoder pass");
  PassContext ctx;
  std::vector<float> last_h;
  RunDecoderPhase(m, st, mode, ctx, &last_h, hidden);
  st.decoder_pos = st.pos;
  TrimState(m.config(), st);
  res.logits = ComputeLogits(m, last_h.data());
  res.stats.layer_token_units = res.stats.decoder_units = ctx.layer_token_units;
  res.stats.decoder_rows = ctx.last_layer_rows;
  return res;
}

std::vector<float> DecodeStep(const Model& m, SequenceState& st, int32_t token, StepStats* stats) {
  PrefillOptions opt;
  opt.mode = PrefillMode::kFull;
  PrefillResult r = Prefill(m, st, std::span<const int32_t>(&token, 1), opt);
  if (stats) *stats = r.stats;
  return std::move(r.logits);
}

std::vector<std::vector<float>> DecodeBatch(const Model& m, std::span<SequenceState* const> states,
                                            std::span<const int32_t> tokens, std::vector<StepStats>* stats) {
  const ModelConfig& c = m.config();
  const int rw = c.ResidualWidth();  // floats per residual row (H_E, h)
  const size_t B = states.size();
  if (tokens.size() != B) throw std::invalid_argument("DecodeBatch: one token per state");
  for (size_t i = 0; i < B; ++i) CheckTokens(m, *states[i], tokens.subspan(i, 1));
  std::vector<PassContext> ctx(B);
  std::vector<Segment> segs(B);
  std::vector<float> h(B * size_t(rw));
  for (size_t i = 0; i < B; ++i) {
    SequenceState& st = *states[i];
    EmbedRow(m, tokens[i], h.data() + i * size_t(rw));
    ctx[i].new_tokens = &tokens[i];
    ctx[i].new_tokens_first = st.pos;
    ctx[i].n_new_tokens = 1;
    segs[i] = Segment{&st, &ctx[i], st.pos, 1, st.pos, 0};
  }
  for (int l = 0; l < c.n_layers; ++l) {
    if (l == c.n_encoder_layers)
      for (size_t i = 0; i < B; ++i) std::copy(h.begin() + i * size_t(rw), h.begin() + (i + 1) * size_t(rw), states[i]->h_e.Append(states[i]->pos));
    RunLayerSegments(m, l, segs, h);
  }
  std::vector<std::vector<float>> logits(B);
  if (stats) stats->assign(B, StepStats{});
  for (size_t i = 0; i < B; ++i) {
    SequenceState& st = *states[i];
    logits[i] = ComputeLogits(m, h.data() + i * size_t(rw));
    st.tokens.push_back(tokens[i]);
    st.pos += 1;
    st.decoder_pos = st.pos;  // as DecodeStep (a full-mode prefill of one token)
    TrimState(c, st);
    if (stats) {
      (*stats)[i].tokens = 1;
      (*stats)[i].layer_token_units = ctx[i].layer_token_units;
      (*stats)[i].encoder_units = c.n_encoder_layers;
      (*stats)[i].decoder_units = ctx[i].layer_token_units - c.n_encoder_layers;
      (*stats)[i].decoder_rows = ctx[i].last_layer_rows;
    }
  }
  return logits;
}

std::vector<std::vector<float>> VerifyPass(const Model& m, SequenceState& st, std::span<const int32_t> tokens, VerifyMark* mark,
                                           const std::vector<int>* hidden_layers, std::vector<std::vector<float>>* hidden) {
  const ModelConfig& c = m.config();
  const int rw = c.ResidualWidth();  // floats per residual row (H_E, h)
  CheckTokens(m, st, tokens);
  const int n = int(tokens.size());
  if (n < 1 || n > 16) throw std::invalid_argument("VerifyPass: expected 1..16 tokens, found " + std::to_string(n));
  if (st.decoder_pos != st.pos) throw std::invalid_argument("VerifyPass: the state is mid-prefill");
  mark->pos0 = st.pos;
  mark->n = n;
  mark->keep_extra_rows = st.keep_extra_rows;
  mark->pools.assign(st.pools.size(), {});
  for (size_t i = 0; i < st.pools.size(); ++i) {
    Pool& p = st.pools[i];
    if (p.rows_seen != st.pos) throw std::logic_error("VerifyPass: a pool has not seen every row");
    VerifyMark::PoolMark& pm = mark->pools[i];
    pm.entries = p.entries.size();
    pm.keys = p.keys.size();
    pm.has_pending = p.has_pending;
    pm.pending_c = p.pending_c;
    pm.pending_z = p.pending_z;
    p.log_pending = true;
    p.log_pos.clear();
    p.log_c.clear();
    p.log_z.clear();
  }
  // n more rows of history, so the rollback finds every window row a shorter state keeps.
  st.keep_extra_rows += n;
  // Prefill's full-mode body for one chunk (DecodeStep is that with n = 1), every row's logits.
  PassContext ctx;
  ctx.new_tokens = tokens.data();
  ctx.new_tokens_first = st.pos;
  ctx.n_new_tokens = n;
  const int E = c.n_encoder_layers, L = c.n_layers;
  Rows h = Embed(m, tokens.data(), n, st.pos);
  const int64_t first = st.pos;
  if (hidden) hidden->assign(hidden_layers ? hidden_layers->size() : 0, {});
  auto capture = [&](int l) {
    if (!hidden || !hidden_layers) return;
    for (size_t j = 0; j < hidden_layers->size(); ++j)
      if ((*hidden_layers)[j] == l) (*hidden)[j] = h.h;
  };
  for (int l = 0; l < E; ++l) {
    RunLayer(m, st, l, h, first, 0, ctx);
    capture(l);
  }
  for (int r = 0; r < n; ++r) std::copy(h.h.begin() + size_t(r) * rw, h.h.begin() + size_t(r + 1) * rw, st.h_e.Append(first + r));
  for (int l = E; l < L; ++l) {
    RunLayer(m, st, l, h, first, 0, ctx);
    capture(l);
  }
  st.pos = first + n;
  st.tokens.insert(st.tokens.end(), tokens.begin(), tokens.end());
  st.decoder_pos = st.pos;
  TrimState(c, st);
  std::vector<std::vector<float>> logits(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) logits[size_t(r)] = ComputeLogits(m, h.h.data() + size_t(r) * rw);
  return logits;
}

void RollbackVerify(const Model& m, SequenceState& st, const VerifyMark& mark, int64_t keep) {
  const ModelConfig& c = m.config();
  if (keep < 0 || keep > mark.n || st.pos != mark.pos0 + mark.n)
    throw std::invalid_argument("RollbackVerify: keep " + std::to_string(keep) + " of " + std::to_string(mark.n) + " rows at pos " +
                                std::to_string(st.pos) + " (pass from " + std::to_string(mark.pos0) + ")");
  const int64_t np = mark.pos0 + keep;
  for (size_t i = 0; i < st.pools.size(); ++i) {
    Pool& p = st.pools[i];
    const VerifyMark::PoolMark& pm = mark.pools[i];
    if (keep < mark.n) {
      // Entries the kept rows [pos0, np) made: one per row (ratio 1), one per odd position (ratio 2).
      int64_t made = 0;
      for (int64_t t = mark.pos0; t < np; ++t) made += p.ratio == 1 ? 1 : (t % 2 == 1);
      p.entries.resize(pm.entries + size_t(made) * size_t(c.head_dim));
      const int64_t new_entries = (int64_t(p.entries.size()) - int64_t(pm.entries)) / std::max(1, c.head_dim);
      p.keys.resize(pm.keys + size_t(new_entries) * size_t(c.index_head_dim));
      p.rows_seen = np;
      if (p.ratio == 2 && np % 2 == 1) {  // a half group open at np: row np - 1 opened it
        if (np - 1 < mark.pos0) {
          p.has_pending = pm.has_pending;
          p.pending_c = pm.pending_c;
          p.pending_z = pm.pending_z;
        } else {
          size_t j = 0;
          while (j < p.log_pos.size() && p.log_pos[j] != np - 1) ++j;
          if (j == p.log_pos.size()) throw std::logic_error("RollbackVerify: no record of the half group at " + std::to_string(np - 1));
          const size_t cd = size_t(c.head_dim);
          p.has_pending = true;
          p.pending_c.assign(p.log_c.begin() + long(j * cd), p.log_c.begin() + long((j + 1) * cd));
          p.pending_z.assign(p.log_z.begin() + long(j * cd), p.log_z.begin() + long((j + 1) * cd));
        }
      } else if (p.ratio == 2) {
        p.has_pending = false;
        p.pending_c.clear();
        p.pending_z.clear();
      }
    }
    p.log_pending = false;
    p.log_pos.clear();
    p.log_c.clear();
    p.log_z.clear();
  }
  if (keep < mark.n) {
    for (RowStore& w : st.windows) w.DropFrom(np);
    st.h_e.DropFrom(np);
    st.tokens.resize(size_t(np));
    st.pos = st.decoder_pos = np;
  }
  st.keep_extra_rows = mark.keep_extra_rows;
  TrimState(c, st);
}

uint64_t StateHash(const SequenceState& st) {
  XXH3_state_t* x = XXH3_createState();
  XXH3_64bits_reset(x);
  auto bytes = [&](const void* p, size_t n) { XXH3_64bits_update(x, p, n); };
  auto i64 = [&](int64_t v) { bytes(&v, sizeof v); };
  auto floats = [&](const std::vector<float>& v) {
    i64(int64_t(v.size()));
    bytes(v.data(), v.size() * sizeof(float));
  };
  auto store = [&](const RowStore& s) {
    i64(s.dim());
    i64(s.lo());
    i64(s.hi());
    floats(s.raw());
  };
  i64(st.pos);
  i64(st.decoder_pos);
  i64(st.replayed ? st.replayed_at : -1);
  i64(st.keep_extra_rows);
  i64(st.keep_h_e_rows);
  i64(int64_t(st.tokens.size()));
  bytes(st.tokens.data(), st.tokens.size() * sizeof(int32_t));
  for (const RowStore& w : st.windows) store(w);
  for (const Pool& p : st.pools) {
    i64(p.layer);
    i64(p.rows_seen);
    i64(p.has_pending);
    floats(p.entries);
    floats(p.keys);
    floats(p.pending_c);
    floats(p.pending_z);
  }
  store(st.h_e);
  const uint64_t h = XXH3_64bits_digest(x);
  XXH3_freeState(x);
  return h;
}

void RebuildLayerEWindow(const Model& m, SequenceState& st) {
  const ModelConfig& c = m.config();
  const int E = c.n_encoder_layers;
  st.windows[size_t(E)].Clear();
  if (st.h_e.size() == 0) return;
  PassContext ctx;
  Rows h;
  h.first = st.h_e.lo();
  h.n = int(st.h_e.size());
  h.h = st.h_e.raw();
  RunLayer(m, st, E, h, h.end(), 0, ctx);  // window entries only: no output rows, pool untouched
}

StepStats EncoderReplay(const Model& m, SequenceState& st) {
  const ModelConfig& c = m.config();
  const int rw = c.ResidualWidth();  // floats per residual row (H_E, h)
  const int E = c.n_encoder_layers;
  const int64_t P = st.pos, R = std::min<int64_t>(c.window, P);
  if (int64_t(st.tokens.size()) != P) throw std::invalid_argument("EncoderReplay: the state's tokens do not cover its position");
  StepStats s;
  if (P == 0) return s;
  for (int l = 0; l <= E; ++l) st.windows[size_t(l)].Clear();
  st.h_e.Clear();
  PassContext ctx;
  Rows h = Embed(m, st.tokens.data() + (P - R), int(R), P - R);
  for (int l = 0; l < E; ++l) RunLayer(m, st, l, h, P - R, P - R, ctx);
  for (int r = 0; r < int(R); ++r) std::copy(h.h.begin() + size_t(r) * rw, h.h.begin() + size_t(r + 1) * rw, st.h_e.Append(P - R + r));
  RunLayer(m, st, E, h, P, 0, ctx);  // layer E's window entries from the regenerated H_E
  s.replay_rows = R;
  if (!st.replayed) st.replayed_at = P;
  st.replayed = true;
  s.layer_token_units = s.encoder_units = ctx.layer_token_units;
  spdlog::debug("encoder replay at P={}: {} rows", P, R);
  return s;
}

int64_t ExactRestoreRows(const ModelConfig& c, int64_t P, int64_t keep_h_e_rows, int64_t keep_extra_rows) {
  const int64_t W = c.window;
  // What TrimState keeps: W (+ slack) rows of each encoder window, max(W, keep_h_e_rows) (+ slack)
  // of H_E, and 2W - 1 (+ slack) of layer E's window, which is a projection of H_E rows.
  const int64_t need = std::max({W, keep_h_e_rows, 2 * W - 1}) + keep_extra_rows;
  return std::min(P, int64_t(c.n_encoder_layers) * (W - 1) + need);
}

StepStats ExactEncoderRestore(const Model& m, SequenceState& st) {
  const ModelConfig& c = m.config();
  const int rw = c.ResidualWidth();  // floats per residual row (H_E, h)
  const int E = c.n_encoder_layers;
  const int64_t P = st.pos;
  if (int64_t(st.tokens.size()) != P) throw std::invalid_argument("ExactEncoderRestore: the state's tokens do not cover its position");
  StepStats s;
  if (P == 0) return s;
  const int64_t R = ExactRestoreRows(c, P, st.keep_h_e_rows, st.keep_extra_rows), floor = P - R;
  for (int l = 0; l < c.n_layers; ++l) st.windows[size_t(l)].Clear();
  st.h_e.Clear();
  st.decoder_pos = 0;
  PassContext ctx;
  Rows h = Embed(m, st.tokens.data() + floor, int(R), floor);
  for (int l = 0; l < E; ++l) RunLayer(m, st, l, h, floor, floor, ctx);
  for (int r = 0; r < int(R); ++r) std::copy(h.h.begin() + size_t(r) * rw, h.h.begin() + size_t(r + 1) * rw, st.h_e.Append(floor + r));
  RunLayer(m, st, E, h, P, 0, ctx);  // layer E's window entries from H_E
  // Rows near the floor saw truncated windows; from the staircase on, every window was whole.
  for (int l = 0; l <= E; ++l) st.windows[size_t(l)].DropBefore(ExactFrontier(c, l, floor));
  st.h_e.DropBefore(ExactFrontier(c, E, floor));
  s.replay_rows = R;
  s.layer_token_units = s.encoder_units = ctx.layer_token_units;
  spdlog::debug("exact encoder restore at P={}: {} rows", P, R);
  return s;
}

}  // namespace cedar
