// The DSpark drafter of DeepSeek-V4.1 (mtp.S.*, docs/v41-contract.md §6): a block-parallel draft
// of k tokens in one pass of its stages, then a sequential low-rank Markov head over the drafted
// tokens. Its state (the projected target context) lives here, passed in explicitly: the Model
// stays immutable. Which equations are established and which are Cedar's reading is in §6; the
// speculative machinery (engine/speculative.h) is exact whatever the drafter proposes.
#pragma once
#include <cstdint>
#include <vector>

#include "engine/model.h"
#include "engine/speculative.h"
#include "engine/state.h"

namespace cedar {

class DSparkDrafter final : public Drafter {
 public:
  // REQUIRES: m.dspark() (a released checkpoint with num_nextn_predict_layers > 0); throws
  // std::invalid_argument naming the model otherwise.
  explicit DSparkDrafter(const Model& m);

  std::vector<int> HiddenLayers() const override;
  // The layers before the targets: their output rows are the streams entering the targets.
  // Context rows c_t = RMSNorm_main(main_proj · concat_j mean_streams(h_j(t))) for the kept rows.
  void Observe(int64_t first, int64_t keep, const std::vector<std::vector<float>>& hidden) override;
  void Propose(const SequenceState& st, int32_t anchor, int k, const SamplingParams& sp, std::mt19937_64& rng,
               std::vector<int32_t>* drafts, std::vector<std::vector<double>>* q) override;

  // The confidence head's acceptance probability of each draft of the last Propose.
  const std::vector<float>& confidence() const { return confidence_; }
  // The block's base logits U [k][V] of the last Propose, before the Markov bias (tests, reference).
  const std::vector<std::vector<float>>& base_logits() const { return base_; }
  // The draft logits [k][V] of the last Propose: U_i plus the Markov bias of draft i's predecessor
  // (what each draft was chosen from; tests/dspark_golden_test.cpp checks them against the reference).
  const std::vector<std::vector<float>>& draft_logits() const { return logits_; }
  // Context rows held (positions with a projected target state).
  int64_t context_rows() const { return ctx_.size(); }

 private:
  // One stage on the block rows x [nb, ResidualWidth()] at positions p0.. with the context rows.
  void Stage(int s, std::vector<float>& x, int nb, int64_t p0) const;

  const Model& m_;
  const DSparkWeights& w_;
  int rope_layer_ = 0;        // a ratio-0 layer: its RoPE table (theta = rope_theta, no YaRN) is the stages'
  RowStore ctx_;              // [*, d] context rows by position, the last `window` kept
  std::vector<float> confidence_;
  std::vector<std::vector<float>> base_;
  std::vector<std::vector<float>> logits_;
};

}  // namespace cedar
