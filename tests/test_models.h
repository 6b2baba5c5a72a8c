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
// The preset `name` with random weights (seed 1), loaded once per name. Besides the presets,
// "tiny-hc-softmax" (tests only): tiny-hc with 2 streams, softmax router scores and
// norm_topk_prob false, so every released switch of issue 21 runs in the tests.
const Model& PresetModel(const std::string& name);
// The same model shared (what SessionManager::Start takes).
std::shared_ptr<const Model> SharedPresetModel(const std::string& name);

// Model variants for TEST_CASE_TEMPLATE: a property Cedar proves must hold on our family and
// on the released architecture's switches alike, KV as released included (CEDAR_MODEL_VARIANTS).
struct Tiny { static constexpr const char* kName = "tiny"; };
struct TinyHc { static constexpr const char* kName = "tiny-hc"; };
struct TinyHcSoftmax { static constexpr const char* kName = "tiny-hc-softmax"; };
struct TinyKvq { static constexpr const char* kName = "tiny-kvq"; };
#define CEDAR_MODEL_VARIANTS cedar::test::Tiny, cedar::test::TinyHc, cedar::test::TinyHcSoftmax, cedar::test::TinyKvq

// The `tiny-kvq` preset (tiny storing KV as released: FP8 window, FP4 pool, MXFP4 index keys), seed 1.
const Model& TinyKvqModel();
// A model for a given config, written under a fresh temp dir and loaded.
std::unique_ptr<const Model> MakeModel(const ModelConfig& c, uint64_t seed);
// Deterministic pseudo-random token ids in [0, vocab).
std::vector<int32_t> RandomTokens(int n, int vocab, uint64_t seed);
// max |a - b| / max |b|
double RelError(const std::vector<float>& a, const std::vector<float>& b);
// KL(p || q) of the softmaxes of two logit vectors.
double KlDivergence(const std::vector<float>& p_logits, const std::vector<float>& q_logits);

}  // namespace cedar::test
