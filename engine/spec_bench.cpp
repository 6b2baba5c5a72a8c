#include "engine/spec_bench.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "engine/dspark.h"
#include "engine/engine.h"
#include "engine/flag_values.h"
#include "engine/model.h"
#include "engine/speculative.h"
#include "engine/v41_init.h"

namespace cedar {

void RunSpecBench(const std::string& model_dir_in, const std::string& preset, int spec_tokens, int decode_n, int prompts) {
  std::string model_dir = model_dir_in;
  if (model_dir.empty()) {
    V41Config v;
    if (!V41PresetConfig(preset, &v))
      throw UsageError("--spec-tokens: expected --model DIR or --preset v41-tiny|v41-small, found preset " + preset);
    if (v.n_mtp_layers == 0) throw UsageError("--spec-tokens: preset " + preset + " has no DSpark stages");
    model_dir = (std::filesystem::temp_directory_path() / ("cedar-bench-" + preset)).string();
    if (!std::filesystem::exists(model_dir + "/model.safetensors.index.json")) WriteReleasedModel(v, 1, model_dir);
  }
  auto m = Model::Load(model_dir);
  const ModelConfig& c = m->config();
  std::mt19937_64 rng(1);
  double plain_s = 0, spec_s = 0;
  int64_t produced = 0, drafted = 0, accepted = 0, passes = 0, plain_passes = 0;
  bool same = true;
  for (int p = 0; p < prompts; ++p) {
    std::vector<int32_t> prompt(64);
    for (auto& x : prompt) x = int32_t(rng() % uint64_t(c.vocab_size));
    GenerateOptions o;
    o.max_tokens = decode_n;
    GenerateResult r[2];
    for (int spec = 0; spec < 2; ++spec) {
      SequenceState st(c);
      PrefillOptions po;
      po.mode = PrefillMode::kBounded;
      DSparkDrafter drafter(*m);
      HiddenCapture cap = PrefillCaptureFor(*m, drafter);  // the drafter sees the prompt
      if (spec) po.hidden = &cap;
      std::vector<float> logits = Prefill(*m, st, prompt, po).logits;
      if (spec) ObservePrefill(drafter, cap);
      o.spec_tokens = spec ? spec_tokens : 0;
      const auto t0 = std::chrono::steady_clock::now();
      r[spec] = Generate(*m, st, std::move(logits), o, spec ? &drafter : nullptr);
      (spec ? spec_s : plain_s) += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    same = same && r[0].tokens == r[1].tokens;
    produced += int64_t(r[0].tokens.size());
    plain_passes += r[0].passes;
    passes += r[1].passes;
    drafted += r[1].drafted;
    accepted += r[1].accepted;
  }
  nlohmann::json j = {{"bench", "speculative"}, {"model", model_dir_in.empty() ? preset : model_dir}, {"spec_tokens", spec_tokens},
                      {"prompts", prompts}, {"tokens", produced}, {"greedy_tokens_equal", same},
                      {"drafted", drafted}, {"accepted", accepted},
                      {"acceptance_rate", drafted > 0 ? double(accepted) / double(drafted) : 0.0},
                      {"tokens_per_pass", passes > 0 ? double(produced) / double(passes) : 0.0},
                      {"decode_tokens_per_s_plain", double(produced) / plain_s},
                      {"decode_tokens_per_s_speculative", double(produced) / spec_s},
                      {"speedup", plain_s / spec_s}, {"plain_passes", plain_passes}, {"speculative_passes", passes}};
  std::printf("%s\n", j.dump().c_str());
  std::fflush(stdout);
}

}  // namespace cedar
