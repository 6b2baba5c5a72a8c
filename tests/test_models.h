// Shared helpers for model tests: seeded tiny models written once per test process.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"

namespace cedar::test {

// A temporary directory removed at process exit.
std::string TempDir(const std::string& tag);
// The `tiny` preset with random weights (seed 1), loaded once.
const Model& TinyModel();
// The `tiny-kvq` preset (tiny storing KV as released: FP8 window, FP4 pool, MXFP4 index keys), seed 1.
const Model& TinyKvqModel();
// Both, for tests that must hold at either KV precision.
std::vector<const Model*> TinyModels();
// A model for a given config, written under a fresh temp dir and loaded.
std::unique_ptr<const Model> MakeModel(const ModelConfig& c, uint64_t seed);
// Deterministic pseudo-random token ids in [0, vocab).
std::vector<int32_t> RandomTokens(int n, int vocab, uint64_t seed);
// max |a - b| / max |b|
double RelError(const std::vector<float>& a, const std::vector<float>& b);
// KL(p || q) of the softmaxes of two logit vectors.
double KlDivergence(const std::vector<float>& p_logits, const std::vector<float>& q_logits);

}  // namespace cedar::test
