// One layer of the CED model on the device (spec §3): the CUDA twin of engine/forward.h, with
// the same contract per call (which rows get window entries, pool entries and outputs).
// Internal to engine/cuda/.
#pragma once
#include <cstdint>
#include <map>
#include <vector>

#include "engine/cuda/device_state.h"
#include "engine/forward.h"

namespace cedar::gpu {

// Per-row selections of one pass on the device (engine/forward.h Selection).
struct DevSelection {
  int64_t first = 0;          // position of row 0
  int width = 0;              // entries per row
  cu::DeviceBuffer idx;       // [rows, width] int32, ascending
  cu::DeviceBuffer count;     // [rows] int32
  int rows = 0;
  bool Covers(int64_t pos, int n) const { return pos >= first && pos + n <= first + rows; }
  const int32_t* Row(int64_t pos) const { return idx.as<int32_t>() + size_t(pos - first) * width; }
  const int32_t* Count(int64_t pos) const { return count.as<int32_t>() + (pos - first); }
  void Reset(int64_t first_pos, int n_rows, int w);
};

struct DevPassContext {
  std::map<int, DevSelection> topk;        // index-source layer -> top-k per row
  std::map<int, DevSelection> candidates;  // candidate-source layer -> kept block ids per row
  IndexCapture* capture = nullptr;
  int64_t layer_token_units = 0;
  int64_t last_layer_rows = 0;
};

// Hidden states of consecutive rows [first, first + n) on the device.
struct DevRows {
  int64_t first = 0;
  int n = 0;
  DevVec h;  // [n, d] F32
  int64_t end() const { return first + n; }
};

struct DevSegment {
  DeviceState* st = nullptr;
  DevPassContext* ctx = nullptr;
  int64_t first = 0;
  int n = 0;
  int64_t out_from = 0;
  int64_t floor = 0;
};

// As cedar::RunLayerSegments: h holds every segment's rows entering layer l ([Σ n, d]) and,
// afterwards, every segment's output rows.
void RunLayerSegments(const DeviceModel& m, int l, std::vector<DevSegment>& segs, DevVec& h);
// As cedar::RunLayer.
void RunLayer(const DeviceModel& m, DeviceState& st, int l, DevRows& h, int64_t out_from, int64_t floor,
              DevPassContext& ctx);

// logits [rows, V] = head · RMSNorm_final(h rows) on the host (waits for the device).
std::vector<std::vector<float>> ComputeLogits(const DeviceModel& m, const float* h, int rows);
// Embedding rows of `tokens` into h ([n, d] F32) for positions [first, first + n).
void Embed(const DeviceModel& m, const int32_t* tokens, int n, int64_t first, DevRows& h);

// The parts of one layer (device_compressor.cpp, device_indexer.cpp, device_ffn.cpp).
void CompressRows(const DeviceModel& m, int l, DevicePool& pool, const float* u, int64_t first, int n);
void SelectEntries(const DeviceModel& m, DeviceState& st, int l, const float* cq, const float* u, int64_t first,
                   int n, DevPassContext& ctx);
void FfnAdd(const DeviceModel& m, int l, const float* x, float* h, int n);

}  // namespace cedar::gpu
