// The engine's entry points on a CUDA device: the same signatures and semantics as
// engine/engine.h (which rows pass which layer, layer-token units, trimming), over a
// DeviceModel and a DeviceState. engine/backend.h selects between the two.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "engine/cuda/device_state.h"
#include "engine/engine.h"

namespace cedar::gpu {

PrefillResult Prefill(const DeviceModel& m, DeviceState& st, std::span<const int32_t> tokens, const PrefillOptions& opt);
std::vector<float> DecodeStep(const DeviceModel& m, DeviceState& st, int32_t token, StepStats* stats = nullptr);
std::vector<std::vector<float>> DecodeBatch(const DeviceModel& m, std::span<DeviceState* const> states,
                                            std::span<const int32_t> tokens, std::vector<StepStats>* stats = nullptr);
StepStats EncoderReplay(const DeviceModel& m, DeviceState& st);
StepStats ExactEncoderRestore(const DeviceModel& m, DeviceState& st);
void RebuildLayerEWindow(const DeviceModel& m, DeviceState& st);

}  // namespace cedar::gpu
