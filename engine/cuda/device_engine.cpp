// Prefill, decode, Encoder SWA Bounded Replay and the exact encoder restore on the device
// (device_engine.h). The row planning (which rows pass which layer, window floors, what each
// store keeps) comes from engine/row_plan.h, shared with the CPU engine; the call sequence
// below mirrors engine/engine.cpp's.
#include "engine/cuda/device_engine.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <stdexcept>

#include "engine/cuda/device_forward.h"
#include "engine/row_plan.h"

namespace cedar::gpu {

namespace {

void CheckTokens(const ModelConfig& c, const DeviceState& st, std::span<const int32_t> tokens) {
  for (size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i] < 0 || tokens[i] >= c.vocab_size)
      throw std::invalid_argument("token " + std::to_string(tokens[i]) + " at index " + std::to_string(i) +
                                  " is outside the vocabulary [0, " + std::to_string(c.vocab_size) + ")");
  if (st.pos + int64_t(tokens.size()) > c.max_seq_len)
    throw std::invalid_argument("sequence of " + std::to_string(st.pos + int64_t(tokens.size())) +
                                " tokens exceeds the model's max_seq_len " + std::to_string(c.max_seq_len));
}

// engine.cpp TrimState.
void TrimState(const ModelConfig& c, DeviceState& st) {
  for (int l = 0; l < c.n_layers; ++l) st.windows[size_t(l)].DropBefore(WindowKeepFrom(c, l, st.pos, st.keep_extra_rows));
  st.h_e.DropBefore(HeKeepFrom(c, st.pos, st.keep_extra_rows, st.keep_h_e_rows));
}

// Appends h's rows [0, n) as H_E rows [first, first + n).
void AppendHe(DeviceState& st, const float* h, int64_t first, int n, int d) {
  float* dst = st.h_e.AppendRange(first, n);
  CEDAR_GPU(cu::CopyOnDeviceAsync(dst, h, size_t(n) * d * sizeof(float), nullptr));
}

// engine.cpp RunDecoderPhase; last_h receives the last row leaving layer L-1 ([d]).
void RunDecoderPhase(const DeviceModel& m, DeviceState& st, PrefillMode mode, DevPassContext& ctx, DevVec& last_h) {
  const ModelConfig& c = m.config();
  const int E = c.n_encoder_layers, L = c.n_layers;
  const int64_t N = st.pos;
  const std::vector<int64_t> a = DecoderPhaseStarts(c, mode, N, st.decoder_pos, st.h_e.lo());
  for (int l = E + 1; l < L; ++l) st.windows[size_t(l)].DropFrom(a[size_t(l - 1)]);
  DevRows h;
  h.first = a[size_t(E)];
  h.n = int(N - h.first);
  float* hp = h.h.Ensure(size_t(h.n) * c.dim);
  CEDAR_GPU(cu::CopyOnDeviceAsync(hp, st.h_e.Row(h.first), size_t(h.n) * c.dim * sizeof(float), m.stream()));
  for (int l = E; l < L; ++l) {
    const int64_t floor = DecoderPhaseFloor(c, mode, l, N);
    spdlog::debug("cuda decoder layer {}: rows [{}, {}) floor {}", l, a[size_t(l)], N, floor);
    RunLayer(m, st, l, h, a[size_t(l)], floor, ctx);
  }
  float* dst = last_h.Ensure(size_t(c.dim));
  CEDAR_GPU(cu::CopyOnDeviceAsync(dst, h.h.get() + size_t(h.n - 1) * c.dim, size_t(c.dim) * sizeof(float), m.stream()));
}

}  // namespace

PrefillResult Prefill(const DeviceModel& m, DeviceState& st, std::span<const int32_t> tokens, const PrefillOptions& opt) {
  const ModelConfig& c = m.config();
  CheckTokens(c, st, tokens);
  PrefillResult res;
  res.stats.tokens = int64_t(tokens.size());
  if (tokens.empty()) return res;
  const int E = c.n_encoder_layers, L = c.n_layers;
  const bool full = opt.mode == PrefillMode::kFull;
  const int64_t n = int64_t(tokens.size());
  const int64_t N = st.pos + n;
  const int chunk = opt.chunk_size > 0 ? opt.chunk_size : int(n);
  DevPassContext ctx;
  ctx.capture = opt.capture;
  if (ctx.capture) ctx.capture->pos = N - 1;
  DevVec last_h;  // [d]
  for (int64_t c0 = 0; c0 < n; c0 += chunk) {
    const int len = int(std::min<int64_t>(chunk, n - c0));
    DevRows h;
    Embed(m, tokens.data() + c0, len, st.pos, h);
    const int64_t first = st.pos;
    for (int l = 0; l < E; ++l) RunLayer(m, st, l, h, first, 0, ctx);
    AppendHe(st, h.h.get(), first, len, c.dim);
    // Layer E's window entries and the decoder pool are projections of H_E: every row gets them.
    RunLayer(m, st, E, h, full ? first : first + len, 0, ctx);
    if (full)
      for (int l = E + 1; l < L; ++l) RunLayer(m, st, l, h, first, 0, ctx);
    st.pos = first + len;
    st.tokens.insert(st.tokens.end(), tokens.begin() + c0, tokens.begin() + c0 + len);
    for (int l = 0; l < E; ++l) st.windows[size_t(l)].DropBefore(WindowKeepFrom(c, l, st.pos, st.keep_extra_rows));
    if (full) {
      float* dst = last_h.Ensure(size_t(c.dim));
      CEDAR_GPU(cu::CopyOnDeviceAsync(dst, h.h.get() + size_t(h.n - 1) * c.dim, size_t(c.dim) * sizeof(float), m.stream()));
      st.decoder_pos = st.pos;
      TrimState(c, st);
    }
  }
  if (!full) {
    RunDecoderPhase(m, st, opt.mode, ctx, last_h);
    st.decoder_pos = N;
  }
  TrimState(c, st);
  res.logits = std::move(ComputeLogits(m, last_h.get(), 1)[0]);
  res.stats.layer_token_units = ctx.layer_token_units;
  res.stats.encoder_units = n * E;
  res.stats.decoder_units = ctx.layer_token_units - n * E;
  res.stats.decoder_rows = ctx.last_layer_rows;
  spdlog::debug("cuda prefill {} tokens mode {}: {} layer-token units", n, ModeName(opt.mode), res.stats.layer_token_units);
  return res;
}

std::vector<float> DecodeStep(const DeviceModel& m, DeviceState& st, int32_t token, StepStats* stats) {
  PrefillOptions opt;
  opt.mode = PrefillMode::kFull;
  PrefillResult r = Prefill(m, st, std::span<const int32_t>(&token, 1), opt);
  if (stats) *stats = r.stats;
  return std::move(r.logits);
}

std::vector<std::vector<float>> DecodeBatch(const DeviceModel& m, std::span<DeviceState* const> states,
                                            std::span<const int32_t> tokens, std::vector<StepStats>* stats) {
  const ModelConfig& c = m.config();
  const size_t B = states.size();
  if (tokens.size() != B) throw std::invalid_argument("DecodeBatch: one token per state");
  for (size_t i = 0; i < B; ++i) CheckTokens(c, *states[i], tokens.subspan(i, 1));
  std::vector<DevPassContext> ctx(B);
  std::vector<DevSegment> segs(B);
  DevRows rows;
  Embed(m, tokens.data(), int(B), 0, rows);  // row i is state i's token
  for (size_t i = 0; i < B; ++i) segs[i] = DevSegment{states[i], &ctx[i], states[i]->pos, 1, states[i]->pos, 0};
  for (int l = 0; l < c.n_layers; ++l) {
    if (l == c.n_encoder_layers)
      for (size_t i = 0; i < B; ++i) AppendHe(*states[i], rows.h.get() + i * size_t(c.dim), states[i]->pos, 1, c.dim);
    RunLayerSegments(m, l, segs, rows.h);
  }
  std::vector<std::vector<float>> logits = B ? ComputeLogits(m, rows.h.get(), int(B)) : std::vector<std::vector<float>>{};
  if (stats) stats->assign(B, StepStats{});
  for (size_t i = 0; i < B; ++i) {
    DeviceState& st = *states[i];
    st.tokens.push_back(tokens[i]);
    st.pos += 1;
    st.decoder_pos = st.pos;
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

void RebuildLayerEWindow(const DeviceModel& m, DeviceState& st) {
  const ModelConfig& c = m.config();
  const int E = c.n_encoder_layers;
  st.windows[size_t(E)].Clear();
  if (st.h_e.size() == 0) return;
  DevPassContext ctx;
  DevRows h;
  h.first = st.h_e.lo();
  h.n = int(st.h_e.size());
  float* hp = h.h.Ensure(size_t(h.n) * c.dim);
  CEDAR_GPU(cu::CopyOnDeviceAsync(hp, st.h_e.Row(h.first), size_t(h.n) * c.dim * sizeof(float), m.stream()));
  RunLayer(m, st, E, h, h.end(), 0, ctx);  // window entries only: no output rows, pool untouched
}

StepStats EncoderReplay(const DeviceModel& m, DeviceState& st) {
  const ModelConfig& c = m.config();
  const int E = c.n_encoder_layers;
  const int64_t P = st.pos, R = std::min<int64_t>(c.window, P);
  if (int64_t(st.tokens.size()) != P) throw std::invalid_argument("EncoderReplay: the state's tokens do not cover its position");
  StepStats s;
  if (P == 0) return s;
  for (int l = 0; l <= E; ++l) st.windows[size_t(l)].Clear();
  st.h_e.Clear();
  DevPassContext ctx;
  DevRows h;
  Embed(m, st.tokens.data() + (P - R), int(R), P - R, h);
  for (int l = 0; l < E; ++l) RunLayer(m, st, l, h, P - R, P - R, ctx);
  AppendHe(st, h.h.get(), P - R, int(R), c.dim);
  RunLayer(m, st, E, h, P, 0, ctx);
  s.replay_rows = R;
  if (!st.replayed) st.replayed_at = P;
  st.replayed = true;
  s.layer_token_units = s.encoder_units = ctx.layer_token_units;
  spdlog::debug("cuda encoder replay at P={}: {} rows", P, R);
  return s;
}

// engine.cpp ExactEncoderRestore: EncoderReplay's pass over the larger R of ExactRestoreRows,
// then the rows whose windows reached below the floor (inexact) are dropped. DeviceRows drops
// old rows by moving `lo`, so the drop costs no copy.
StepStats ExactEncoderRestore(const DeviceModel& m, DeviceState& st) {
  const ModelConfig& c = m.config();
  const int E = c.n_encoder_layers;
  const int64_t P = st.pos;
  if (int64_t(st.tokens.size()) != P) throw std::invalid_argument("ExactEncoderRestore: the state's tokens do not cover its position");
  StepStats s;
  if (P == 0) return s;
  const int64_t R = ExactRestoreRows(c, P, st.keep_h_e_rows, st.keep_extra_rows), floor = P - R;
  for (int l = 0; l < c.n_layers; ++l) st.windows[size_t(l)].Clear();
  st.h_e.Clear();
  st.decoder_pos = 0;
  DevPassContext ctx;
  DevRows h;
  Embed(m, st.tokens.data() + floor, int(R), floor, h);  // h: [R, d]
  for (int l = 0; l < E; ++l) RunLayer(m, st, l, h, floor, floor, ctx);
  AppendHe(st, h.h.get(), floor, int(R), c.dim);
  RunLayer(m, st, E, h, P, 0, ctx);  // layer E's window entries from H_E
  // Rows near the floor saw truncated windows; from the staircase on, every window was whole.
  for (int l = 0; l <= E; ++l) st.windows[size_t(l)].DropBefore(ExactFrontier(c, l, floor));
  st.h_e.DropBefore(ExactFrontier(c, E, floor));
  s.replay_rows = R;
  s.layer_token_units = s.encoder_units = ctx.layer_token_units;
  spdlog::debug("cuda exact encoder restore at P={}: {} rows", P, R);
  return s;
}

}  // namespace cedar::gpu
