// Every committed golden case (tests/golden/<case>/) must pass: logits within 1e-4 relative
// error (float32 engine vs float64 reference) and the same top-k outside score ties.
#include <doctest/doctest.h>

#include <filesystem>

#include "engine/golden_check.h"

TEST_CASE("the engine agrees with the reference on every committed golden case") {
  const std::filesystem::path root = std::filesystem::path(CEDAR_SOURCE_DIR) / "tests" / "golden";
  int cases = 0;
  for (const auto& entry : std::filesystem::directory_iterator(root)) {
    if (!std::filesystem::exists(entry.path() / "golden.safetensors")) continue;
    ++cases;
    auto m = cedar::Model::Load(entry.path().string());
    cedar::GoldenReport r = cedar::CheckGolden(*m, (entry.path() / "golden.safetensors").string(), 1e-4);
    MESSAGE(entry.path().filename().string() << ": worst relative logit error " << r.worst_logit_rel_error << " at "
                                             << r.worst_where << ", top-k layers checked " << r.topk_checked);
    CAPTURE(r.checks.dump());
    CHECK(r.ok);
    CHECK(r.topk_checked > 0);
    CHECK(r.checks.size() > 30);  // prefill + 16 decodes per mode + replay
  }
  CHECK(cases >= 5);  // tiny, pool, tiny_hc, tiny_hc_kv, v41_tiny
}
