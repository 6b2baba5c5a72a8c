// `cedar bench --spec-tokens K`: decode with and without speculation (engine/speculative.h, the
// DSpark drafter) on the same prompts; one JSON line with the acceptance rate and both rates.
#pragma once
#include <string>

namespace cedar {

// model_dir: a released-layout model with mtp.* tensors, or "" to write `preset` (v41-tiny or
// v41-small, seed 1) into a temp dir. Greedy; checks the two token streams are equal and says so.
void RunSpecBench(const std::string& model_dir, const std::string& preset, int spec_tokens, int decode_n, int prompts);

}  // namespace cedar
