// What each design pays for a prompt, in layer-token units (rows that passed a layer,
// docs/spec-readings.md #6), how many bytes its cached state takes, and the cost model that turns
// units into seconds.
#pragma once

#include <cstdint>
#include <string>

#include "engine/config.h"
#include "profile/kv_bytes.h"

namespace cedar::profile {

// Cedar's prefill of an n-token prompt whose first `hit` tokens came from the prefix cache.
struct CedarUnits {
  int64_t encoder = 0;  // (n - hit)·E: the new rows pass the encoder
  int64_t decoder = 0;  // R·(L - E), R = min(W, n): Decoder SWA Bounded Replay
  int64_t replay = 0;   // min(W, hit)·E when the prefix has no snapshot at its end: Encoder SWA
                        // Bounded Replay regenerates the encoder windows and H_E tail there
  int64_t total() const { return encoder + decoder + replay; }
};
CedarUnits CedarPrefillUnits(const ModelConfig& c, int64_t n, int64_t hit, bool snapshot_at_hit);

// The CED model with no cache: n·E + min(W, n)·(L - E) (ExpectedUnits, bounded).
int64_t CedNoCacheUnits(const ModelConfig& c, int64_t n);

// A decoder-only model of the same size: every new token passes all L layers. A hit skips its
// tokens in all layers; a full hit still runs the last token (to get logits, as vLLM does), so
// the cost is max(n - hit, 1)·L. hit = 0 is the no-cache baseline n·L.
int64_t DecoderOnlyUnits(const ModelConfig& c, int64_t n, int64_t hit);

// Bytes of cached state at the precisions of `kv` (profile/kv_bytes.h; F32 = engine/info.h).
struct StateBytes {
  uint64_t cedar_page = 0;         // all pools' entries + index keys of one page of tokens
  uint64_t decoder_only_page = 0;  // K=V of all L layers for one page (the decoder-only baseline)
  double snapshot_row = 0;         // one row of a boundary snapshot (E window rows + an H_E row)
  // Boundary snapshot after P tokens: encoder windows E·min(W,P)·c + H_E tail min(W,P)·d (spec §6).
  uint64_t Snapshot(const ModelConfig& c, int64_t position) const;
};
StateBytes ComputeStateBytes(const ModelConfig& c, size_t cedar_page_tokens, size_t decoder_only_page_tokens,
                             KvPrecision kv = {});

// Units to seconds. A decoder-only model of the same size runs a layer-token unit as fast as the
// CED model (the same layer), so one rate serves every design.
struct CostModel {
  double units_per_s = 0;           // 0: no time estimates (units only)
  double disk_bytes_per_s = 2e9;    // reading disk-tier hits back
  std::string source = "none";      // "none", "--units-per-s", "calibrated", "calibrated, scaled"
  std::string note;                 // one or two sentences for the report
  bool has_time() const { return units_per_s > 0; }
  // Estimated time to first token: compute + loading the disk-tier bytes of the hit.
  double Seconds(int64_t units, uint64_t disk_bytes) const {
    return double(units) / units_per_s + double(disk_bytes) / disk_bytes_per_s;
  }
};

// Average active parameters of one layer for one token (attention, chosen experts, shared).
double ActiveParamsPerLayer(const ModelConfig& c);

// Runs the real engine (bounded prefill of 2048-token prompts) for about `seconds` and measures
// layer-token units per second. Uses `model_dir` when it holds weights; otherwise the `small`
// preset with seeded random weights (written once to the temp directory, as `cedar bench` does),
// scaled to `target` by the ratio of active parameters per layer. Throws on engine errors.
CostModel Calibrate(const ModelConfig& target, const std::string& model_dir, double seconds);

}  // namespace cedar::profile
