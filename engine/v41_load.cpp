// Loading a checkpoint in the released DeepSeek-V4.1 layout (issue 21): the released config
// mapped onto ModelConfig, tensors found through model.safetensors.index.json, FP8/FP4 weights
// dequantised with their E8M0 block scales. Names, shapes and dtypes: docs/v41-contract.md §2.
#include <stdexcept>

#include "engine/model.h"

namespace cedar {

std::unique_ptr<const Model> Model::LoadReleased(const std::string& dir, const LoadOptions&) {
  throw std::runtime_error("model: " + dir + ": the released DeepSeek-V4.1 layout cannot be loaded yet (issue 21)");
}

}  // namespace cedar
