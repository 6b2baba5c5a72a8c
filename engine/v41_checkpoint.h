// Checks a checkpoint directory against the tensors a V4.1 config implies (engine/v41_info.h):
// every expected tensor present with the released dtype and shape, and nothing unexpected besides
// the out-of-scope vision tensors. Reads headers only (no tensor data is touched).
#pragma once
#include <string>
#include <vector>

#include "engine/checkpoint_index.h"
#include "engine/v41_config.h"

namespace cedar {

// One line per problem, naming the tensor, what was expected and what was found; empty if the
// checkpoint matches. At most `max_problems` lines (a wrong config would list ~96k).
std::vector<std::string> CheckV41Checkpoint(const V41Config& c, const Checkpoint& ck, size_t max_problems = 50);

// True for the vision tower's tensors, which Cedar does not load (vision.*, aligner.*, image_*).
bool IsV41VisionTensor(const std::string& name);

}  // namespace cedar
