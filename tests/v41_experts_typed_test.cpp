// On-demand experts (released layout, `--max-ram` below the experts' bytes) held at the load's
// `--weights` precision (issue 20): as-stored keeps the released FP4 bytes, bf16 / int8 convert
// them, so the bytes the cache holds and counts under --max-ram are the typed bytes, and the
// forward (exact prefill + decode steps) equals the all-resident model at the same precision bit
// for bit (the cache and the loader share HoldWeight: same bytes, same products).
#include <doctest/doctest.h>

#include <cstring>
#include <filesystem>
#include <string>

#include "engine/backend.h"
#include "engine/checkpoint_index.h"
#include "engine/engine.h"
#include "engine/expert_cache.h"
#include "engine/v41_held.h"
#include "engine/v41_init.h"
#include "tests/test_models.h"

using namespace cedar;

TEST_CASE("on-demand experts at bf16, int8 and as-stored hold typed bytes and compute what resident experts do") {
  V41Config v;
  REQUIRE(V41PresetConfig("v41-tiny", &v));
  v.vocab_size = 1024;
  const std::string dir = cedar::test::TempDir("experts-typed");
  WriteReleasedModel(v, 4, dir);
  const Checkpoint ck(dir);
  for (WeightPrecision p : {WeightPrecision::kAsStored, WeightPrecision::kBF16, WeightPrecision::kI8, WeightPrecision::kF32}) {
    CAPTURE(WeightPrecisionName(p));
    LoadOptions o;
    o.weights = p;
    const auto all = Model::Load(dir, o);
    const ModelConfig& c = all->config();
    // One expert as held at p (w1, w2: [I, d] / [d, I], w3).
    int64_t one = 0;
    kernels::WeightType held = kernels::WeightType::kF32;
    for (const char* w : {"w1", "w2", "w3"}) {
      const std::string name = std::string("layers.2.ffn.experts.0.") + w + ".weight";
      const bool down = std::string(w) == "w2";
      const int64_t rows = down ? c.dim : c.moe_inter_dim, cols = down ? c.moe_inter_dim : c.dim;
      held = HeldType(ck, name, rows, cols, p);
      one += HeldBytes(held, rows, cols);
    }
    if (p != WeightPrecision::kF32) CHECK(one < 3 * int64_t(c.moe_inter_dim) * c.dim * 4);  // typed, not F32
    // Experts on demand need one token's experts (2) beside the dense part, counted at p's size.
    o.max_ram_bytes = all->released_load()->dense_bytes + 2 * one - 1;
    std::string err;
    try {
      Model::Load(dir, o);
    } catch (const std::exception& e) {
      err = e.what();
    }
    CHECK(err.find("fewer than the 2 experts of one token (" + std::to_string(2 * one) + " bytes)") != std::string::npos);
    o.max_ram_bytes = all->released_load()->dense_bytes + 3 * one;  // 3 experts resident at a time
    const auto lazy = Model::Load(dir, o);
    REQUIRE(lazy->expert_cache() != nullptr);
    CHECK(lazy->layer(2).experts[0].w1.present() == false);
    CHECK(lazy->expert(2, 0).f->w1.type == held);
    CHECK(lazy->expert(2, 0).f->w1.type == all->layer(2).experts[0].w1.type);
    BackendOptions bo;
    const auto ba = MakeBackend(*all, bo), bb = MakeBackend(*lazy, bo);
    auto sa = ba->NewSequence(), sb = bb->NewSequence();
    const std::vector<int32_t> prompt = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3};
    PrefillOptions po;
    po.mode = PrefillMode::kExact;
    const std::vector<float> la = ba->Prefill(*sa, prompt, po).logits, lb = bb->Prefill(*sb, prompt, po).logits;
    REQUIRE(la.size() == lb.size());
    CHECK(std::memcmp(la.data(), lb.data(), la.size() * 4) == 0);
    for (int32_t t : {11, 12, 13}) {
      const std::vector<float> da = ba->DecodeStep(*sa, t), db = bb->DecodeStep(*sb, t);
      CHECK(std::memcmp(da.data(), db.data(), da.size() * 4) == 0);
    }
    const ExpertCache::Stats st = lazy->expert_cache()->stats();
    std::printf("v41_experts_typed_test: --weights %s: one expert %lld bytes (%s), %lld misses, %lld evictions, resident %lld bytes\n",
                WeightPrecisionName(p), (long long)one, kernels::WeightTypeName(held), (long long)st.misses, (long long)st.evictions,
                (long long)st.resident_bytes);
    CHECK(st.misses > 3);
    CHECK(st.evictions > 0);
    CHECK(st.resident_bytes <= 3 * one);
    CHECK(st.resident_bytes % one == 0);  // whole experts at the typed size
  }
}
