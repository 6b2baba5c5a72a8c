// The loaded model: config + weight views. Immutable after Load(); safe to share across
// threads for reading. Per-sequence state lives in SequenceState (engine/state.h).
#pragma once
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/config.h"
#include "engine/engram.h"
#include "engine/safetensors.h"
#include "engine/weight_arena.h"
#include "engine/weight_precision.h"
#include "kernels/weight_view.h"

namespace cedar {

// A read-only matrix view into the Model's weight arena (F32 copied, BF16 converted once at load)
// or, with LoadOptions::mmap_weights, F32 tensors in place in the memory-mapped file. The matmul
// weights may be stored in another precision (LoadOptions::weights, issue 20): then `data` is null
// and `stored`/`scales` hold them; products go through view() (kernels::MatmulW).
struct Weight {
  const float* data = nullptr;  // F32 only
  int64_t rows = 0, cols = 0;   // [rows, cols]; a vector has rows = its length, cols = 1
  kernels::WeightType type = kernels::WeightType::kF32;
  const void* stored = nullptr;  // type != kF32: the elements (kernels/weight_view.h layouts)
  const void* scales = nullptr;  // INT8/FP8/FP4: the block scales
  bool present() const { return data != nullptr || stored != nullptr; }
  kernels::WeightView view() const {
    kernels::WeightView v;
    v.type = type;
    v.data = type == kernels::WeightType::kF32 ? static_cast<const void*>(data) : stored;
    v.scales = scales;
    v.rows = rows;
    v.cols = cols;
    return v;
  }
};

struct FfnWeights {
  Weight w1;  // [inter, d]
  Weight w2;  // [d, inter]
  Weight w3;  // [inter, d]
};

struct LayerWeights {
  Weight attn_norm;  // [d]
  Weight ffn_norm;   // [d]
  Weight wq_a;       // [q_rank, d]
  Weight q_norm;     // [q_rank]
  Weight wq_b;       // [n_heads * c, q_rank]
  Weight wkv;        // [c, d]
  Weight kv_norm;    // [c]
  Weight sink;       // [n_heads]
  Weight wo_a;       // [o_groups * o_group_rank, (n_heads / o_groups) * c] (groups stacked)
  Weight wo_b;       // [d, o_groups * o_group_rank]
  // kv sources only
  Weight comp_wkv;   // [c, d]
  Weight comp_wz;    // [c, d] (ratio 2 only)
  Weight comp_norm;  // [c]
  Weight idx_wk;     // [index_head_dim, c]
  Weight idx_k_norm; // [index_head_dim]
  // index sources only
  Weight idx_wq_b;   // [index_heads * index_head_dim, q_rank]
  Weight idx_wproj;  // [index_heads, d]
  // FFN: MoE (gate + experts + optional shared) or dense
  Weight gate;       // [n_routed_experts, d]
  Weight gate_bias;  // [n_routed_experts]
  std::vector<FfnWeights> experts;
  FfnWeights shared;  // present when n_shared_experts == 1
  FfnWeights dense;   // present when n_routed_experts == 0
  // mHC (hc_mult > 1): the coefficients of the attention and FFN sub-layers (notes §2.1).
  // Tensor names as released: layers.N.hc_{attn,ffn}_{fn,base,scale}.
  Weight hc_attn_fn;     // [(2 + hc) * hc, hc * d]
  Weight hc_attn_base;   // [(2 + hc) * hc]
  Weight hc_attn_scale;  // [3]
  Weight hc_ffn_fn;      // [(2 + hc) * hc, hc * d]
  Weight hc_ffn_base;    // [(2 + hc) * hc]
  Weight hc_ffn_scale;   // [3]
};

// The DSpark drafter of the released checkpoint (mtp.S.*, engine/dspark.h; docs/v41-contract.md §6):
// stages shaped like backbone layers without compressor, indexer or Engram, each with its own
// routed expert bank; stage 0 reads the target's hidden states through main_proj/main_norm, the
// last stage holds the output norm and the markov and confidence heads. Embedding and head are
// the target's.
struct DSparkWeights {
  std::vector<LayerWeights> stages;  // mtp.S.*: attention (sliding window only), MoE (its own bank), mHC
  Weight main_proj;     // [d, n_targets * d] mtp.0.main_proj
  Weight main_norm;     // [d] mtp.0.main_norm
  Weight norm;          // [d] mtp.{last}.norm
  Weight markov_embed;  // [V, rank] mtp.{last}.markov_head.embed: previous token -> rank
  Weight markov_head;   // [V, rank] mtp.{last}.markov_head.head: rank -> logit bias
  Weight confidence;    // [1, d + rank] mtp.{last}.confidence_head.proj
  std::vector<int> target_layers;  // dspark_target_layer_ids: whose outputs feed main_proj
  int block_size = 0;              // dspark_block_size: most tokens drafted per pass
  int noise_token = 0;             // dspark_noise_token_id: the id of the rows still to draft
  int rank = 0;                    // dspark_markov_rank
  int n_experts = 0;               // dspark_n_routed_experts: the stages' routed experts
  int experts_per_token = 0;       // dspark_num_experts_per_tok
};

struct LoadOptions {
  // Read F32 tensors in place from the memory-mapped file instead of copying every weight
  // into the anonymous huge-page arena (WeightArena). Saves the copy's RAM and load time;
  // decode streams the weights 4-10% slower out of 4 KiB file pages.
  bool mmap_weights = false;
  // Released layout only: the most bytes of weights to hold in RAM (0 = no limit). The dense
  // part must fit (else a clear error naming both sizes); routed experts beyond it are read
  // from the memory-mapped shards on demand.
  int64_t max_ram_bytes = 0;
  // The matmul weights' precision in memory (issue 20). kF32 keeps today's numbers bit for bit.
  WeightPrecision weights = WeightPrecision::kF32;
  // Released layout: the machine's memory the held weights (or --max-ram) must fit in; 0 = this
  // machine's physical memory. Tests set less to reach the refusal.
  int64_t machine_memory_bytes = 0;
};

// ---- Released layout (issue 21, engine/v41_load.cpp): what loading a sharded FP8/FP4 checkpoint
// ---- cost, measured once at load (printed by the CLI, read by tests and bench).
struct ReleasedLoadReport {
  int64_t tensors = 0;          // tensors dequantised into the arena
  int64_t stored_bytes = 0;     // bytes of those tensors (and their scales) as stored in the shards
  int64_t dense_bytes = 0;      // arena bytes of every weight except routed experts, as held at --weights
  int64_t expert_bytes = 0;     // arena bytes of the routed experts, as held at --weights
  double check_seconds = 0;     // config + index + every shard header checked against the inventory
  double dequant_seconds = 0;   // reading the mapped shards and dequantising into the arena
  double total_seconds = 0;     // the whole LoadReleased call
};

// A routed expert's weights as the FFN reads them: resident in the arena (pin empty) or, for a
// released checkpoint loaded with experts on demand, a cache entry kept alive by `pin` while used.
struct ExpertRef {
  const FfnWeights* f = nullptr;
  std::shared_ptr<const void> pin;
};
class ExpertCache;

class Model {
 public:
  // Loads DIR/config.json and DIR/model.safetensors (memory-mapped). Throws
  // std::runtime_error that names the file and, for tensors, the tensor with its expected and
  // found shape or dtype.
  // A directory in the released DeepSeek-V4.1 layout (config.json in the released spelling and
  // model.safetensors.index.json) is read by LoadReleased (engine/v41_load.cpp).
  static std::unique_ptr<const Model> Load(const std::string& dir, const LoadOptions& options = {});

  const ModelConfig& config() const { return config_; }
  const Weight& embed() const { return embed_; }  // [V, d]
  const Weight& norm() const { return norm_; }    // [d]
  const Weight& head() const { return head_; }    // [V, d]
  const LayerWeights& layer(int l) const { return layers_[size_t(l)]; }
  // A 64-bit fingerprint of config and weights (for cache keys): XXH3 over the file bytes.
  uint64_t fingerprint() const { return fingerprint_; }
  const std::string& dir() const { return dir_; }
  // The matmul weights' precision this model was loaded with, and the bytes per parameter those
  // weights take on average (scales included): what decode streams per active parameter.
  WeightPrecision weight_precision() const { return precision_; }
  double matmul_bytes_per_param() const { return matmul_params_ > 0 ? matmul_bytes_ / matmul_params_ : 4.0; }
  // The same for the routed experts' weights and for every other matmul weight. A decode token
  // streams all of the others but only experts_per_token experts a layer, so where the experts
  // are held smaller (fp8-fp4: FP4 experts, FP8 the rest) its bytes are not the whole model's mix,
  // which the inactive experts dominate (info.h DecodeWeightBytesHeld).
  double routed_expert_bytes_per_param() const { return routed_params_ > 0 ? routed_bytes_ / routed_params_ : matmul_bytes_per_param(); }
  double dense_matmul_bytes_per_param() const {
    const double p = matmul_params_ - routed_params_;
    return p > 0 ? (matmul_bytes_ - routed_bytes_) / p : matmul_bytes_per_param();
  }
  // Released layout only (nullptr otherwise): sizes and times of the load.
  const ReleasedLoadReport* released_load() const { return released_load_.get(); }
  // Routed expert e of layer l (FFN code reads experts only through this). Resident experts come
  // from layer(l).experts; with experts on demand (released layout, --max-ram below the expert
  // bytes) layer(l).experts hold no data and this dequantises from the mapped shard (engine/expert_cache.h).
  ExpertRef expert(int l, int e) const;
  const ExpertCache* expert_cache() const { return expert_cache_.get(); }  // nullptr: all resident
  // The Engram blocks, one per config().engram_layers entry, in that order (released layout only).
  const std::vector<EngramWeights>& engram() const { return engram_; }
  // The DSpark drafter's weights (released layout with num_nextn_predict_layers > 0), else nullptr.
  const DSparkWeights* dspark() const { return dspark_.get(); }

 private:
  Model() = default;
  // The released layout (engine/v41_load.cpp): config mapped onto ModelConfig, tensors renamed,
  // FP8/FP4 weights dequantised with their E8M0 block scales.
  static std::unique_ptr<const Model> LoadReleased(const std::string& dir, const LoadOptions& options);
  Weight Take(const std::string& name, std::vector<int64_t> shape);
  // A matmul weight at the chosen precision (engine/model_precision.cpp); F32 mode is Take.
  Weight TakeMatmul(const std::string& name, std::vector<int64_t> shape, WeightPrecision p);
  void* AllocateBytes(size_t bytes);  // in the arena, or owned_ when mmap_weights
  // --weights fp8-fp4: f ([w.rows, w.cols] F32) converted to ReleasedTypeOf(name) into the arena.
  void HoldReleased(const std::string& name, std::span<const float> f, Weight& w);
  std::string dir_;
  ModelConfig config_;
  std::unique_ptr<SafetensorsFile> file_;
  std::unique_ptr<WeightArena> arena_;                        // every weight (unless mmap_weights)
  std::vector<std::unique_ptr<std::vector<float>>> owned_;  // mmap_weights: BF16 -> F32 copies
  Weight embed_, norm_, head_;
  std::vector<LayerWeights> layers_;
  uint64_t fingerprint_ = 0;
  WeightPrecision precision_ = WeightPrecision::kF32;
  // A matmul weight's parameters and held bytes into the sums below.
  void CountMatmul(const std::string& name, int64_t rows, int64_t cols, kernels::WeightType held);
  double matmul_bytes_ = 0, matmul_params_ = 0;  // sums over the matmul weights (TakeMatmul)
  double routed_bytes_ = 0, routed_params_ = 0;  // the routed experts' part of them
  std::unique_ptr<ReleasedLoadReport> released_load_;  // released layout only
  std::vector<EngramWeights> engram_;                   // one per engram_layers entry
  std::shared_ptr<const ExpertCache> expert_cache_;     // released layout, experts on demand only
  std::unique_ptr<DSparkWeights> dspark_;               // released layout with DSpark stages only
};

// The tensor names and shapes a config requires (spec §4), in file order. Used by the loader,
// the random initialiser and `info`.
struct TensorSpec {
  std::string name;
  std::vector<int64_t> shape;
};
std::vector<TensorSpec> RequiredTensors(const ModelConfig& c);
// Whether a tensor (Cedar's or the released name, Engram's wkv included) is a matmul weight, stored
// at LoadOptions::weights; every other tensor (embeddings, norms, router, mHC mixes, sinks) stays
// F32, except a released checkpoint's BF16 routers (engine/v41_held.h).
bool IsMatmulTensor(const std::string& name);
// The type a matmul weight of a Cedar-layout model is held at with --weights fp8-fp4: BF16 for the
// head, FP4 for routed experts (inputs a multiple of 32, as the released ones are; else FP8), FP8 for the rest.
kernels::WeightType ReleasedTypeOf(const std::string& name, int64_t cols);

}  // namespace cedar
