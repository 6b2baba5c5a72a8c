// Which rows pass which layer, with which window floor, and what each store keeps: the
// planning both engines (engine.cpp on the CPU, engine/cuda/device_engine.cpp on the GPU)
// execute, kept here once so the two cannot drift apart. Pure functions of the config and
// positions; the engines only run what these say.
#pragma once
#include <cstdint>
#include <vector>

#include "engine/config.h"
#include "engine/engine.h"

namespace cedar {

// The decoder phase of a non-full prefill that ends at N (spec §5): rows [a[l], N) pass decoder
// layer l. exact: the staircase above the live decoder rows [0, decoder_pos); bounded: the last
// R = min(W, N) rows. No layer starts below H_E's first held row h_e_lo, nor below the layer
// before it. Entries for l < E are 0 (unused). Before running layer l > E the engine drops
// that layer's window entries from a[l - 1] on (those rows are recomputed).
std::vector<int64_t> DecoderPhaseStarts(const ModelConfig& c, PrefillMode mode, int64_t N, int64_t decoder_pos,
                                        int64_t h_e_lo);
// The window floor of decoder layer l in that phase: N - R for bounded modes past layer E (and
// at layer E in the paper's variant), else 0.
int64_t DecoderPhaseFloor(const ModelConfig& c, PrefillMode mode, int l, int64_t N);

// After a call that ends at `pos`, layer l's window keeps rows from this position on (W, or
// 2W - 1 at layer E, whose window a later bounded replay reads that far back; plus slack).
int64_t WindowKeepFrom(const ModelConfig& c, int l, int64_t pos, int64_t keep_extra_rows);
// ... and H_E keeps rows from here on (max(W, keep_h_e_rows), plus slack).
int64_t HeKeepFrom(const ModelConfig& c, int64_t pos, int64_t keep_extra_rows, int64_t keep_h_e_rows);

// ExactEncoderRestore over rows [floor, P): the first exact row of layer l's window entries
// (l <= E) and of H_E (l = E), i.e. floor + l(W - 1); 0 when floor == 0 (the true start).
int64_t ExactFrontier(const ModelConfig& c, int l, int64_t floor);

}  // namespace cedar
