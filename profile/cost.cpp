#include "profile/cost.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <random>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "engine/info.h"
#include "engine/kv_precision.h"
#include "engine/init.h"

namespace cedar::profile {

CedarUnits CedarPrefillUnits(const ModelConfig& c, int64_t n, int64_t hit, bool snapshot_at_hit) {
  const int64_t L = c.n_layers, E = c.n_encoder_layers, W = c.window;
  CedarUnits u;
  if (n <= 0) return u;
  u.encoder = (n - hit) * E;
  u.decoder = std::min(W, n) * (L - E);
  if (hit > 0 && !snapshot_at_hit) u.replay = std::min(W, hit) * E;
  return u;
}

int64_t CedNoCacheUnits(const ModelConfig& c, int64_t n) { return ExpectedUnits(c, PrefillMode::kBounded, n); }

int64_t DecoderOnlyUnits(const ModelConfig& c, int64_t n, int64_t hit) {
  if (n <= 0) return 0;
  return std::max<int64_t>(n - hit, 1) * c.n_layers;
}

uint64_t StateBytes::Snapshot(const ModelConfig& c, int64_t position) const {
  const int64_t rows = std::min<int64_t>(c.window, position);
  return uint64_t(std::llround(double(rows) * snapshot_row));
}

StateBytes ComputeStateBytes(const ModelConfig& c, size_t cedar_page_tokens, size_t decoder_only_page_tokens,
                             KvPrecision kv) {
  StateBytes b;
  b.cedar_page = uint64_t(std::llround(CedarBytesPerToken(c, kv.cedar) * double(cedar_page_tokens)));
  b.decoder_only_page =
      uint64_t(std::llround(DecoderOnlyBytesPerToken(c, kv.decoder_only) * double(decoder_only_page_tokens)));
  b.snapshot_row = SnapshotRowBytes(c, kv.cedar);
  return b;
}

double ActiveParamsPerLayer(const ModelConfig& c) {
  const ModelInfo info = ComputeInfo(c);
  return double(info.active_per_decode_token - info.head_params - c.dim) / c.n_layers;
}

namespace {

bool SameShape(const ModelConfig& a, const ModelConfig& b) { return ConfigToJson(a) == ConfigToJson(b); }

// Layer-token units per second of bounded prefills on `m`, measured for about `seconds`.
double MeasureUnitsPerSecond(const Model& m, double seconds) {
  const ModelConfig& c = m.config();
  std::mt19937_64 rng(1);
  std::vector<int32_t> prompt(size_t(std::min(2048, c.max_seq_len)));
  for (auto& t : prompt) t = int32_t(rng() % uint64_t(c.vocab_size));
  PrefillOptions opt;
  opt.mode = PrefillMode::kBounded;
  opt.chunk_size = 2048;
  {
    SequenceState warm(c);
    Prefill(m, warm, std::span<const int32_t>(prompt.data(), std::min<size_t>(256, prompt.size())), opt);
  }
  int64_t units = 0;
  double spent = 0;
  do {
    SequenceState st(c);
    const auto t0 = std::chrono::steady_clock::now();
    units += Prefill(m, st, prompt, opt).stats.layer_token_units;
    spent += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  } while (spent < seconds);
  return double(units) / spent;
}

}  // namespace

CostModel Calibrate(const ModelConfig& target, const std::string& model_dir, double seconds) {
  namespace fs = std::filesystem;
  std::string dir = model_dir;
  std::string what = "the model in " + model_dir;
  if (dir.empty() || !fs::exists(fs::path(dir) / "model.safetensors")) {
    ModelConfig small;
    PresetConfig("small", &small);
    dir = (fs::temp_directory_path() / "cedar-bench-small").string();
    if (!fs::exists(fs::path(dir) / "model.safetensors")) WriteRandomModel(small, 1, dir);
    what = "the small preset (seeded random weights)";
  }
  auto model = Model::Load(dir);
  const double measured = MeasureUnitsPerSecond(*model, seconds);
  CostModel cm;
  cm.units_per_s = measured;
  cm.source = "calibrated";
  cm.note = fmt::format("{:.0f} layer-token units/s measured on this machine's CPU with {} (bounded prefill of "
                        "2048-token prompts, {:.1f} s).", measured, what, seconds);
  if (!SameShape(model->config(), target)) {
    const double scale = ActiveParamsPerLayer(model->config()) / ActiveParamsPerLayer(target);
    cm.units_per_s = measured * scale;
    cm.source = "calibrated, scaled";
    cm.note += fmt::format(" The profiled model cannot be instantiated here, so the rate is scaled by the ratio of "
                           "active parameters per layer ({:.3g}M / {:.3g}M = {:.3g}): {:.4g} units/s. Attention "
                           "cost that grows with context is not modelled; pass --units-per-s for GPU figures.",
                           ActiveParamsPerLayer(model->config()) / 1e6, ActiveParamsPerLayer(target) / 1e6, scale,
                           cm.units_per_s);
  }
  return cm;
}

}  // namespace cedar::profile
