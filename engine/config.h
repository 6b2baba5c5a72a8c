// ModelConfig: the single source of truth for a CED model's shape (spec §2). Loaded from
// config.json, validated once by Validate(); every other part of Cedar reads it, none copies
// its fields into globals.
#pragma once
#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace cedar {

struct ModelConfig {
  int vocab_size = 0;          // V: number of token ids.
  int dim = 0;                 // d: residual stream width.
  int n_layers = 0;            // L: total layers (encoder + decoder).
  int n_encoder_layers = 0;    // E: the cut; layers [0, E) are the encoder, H_E enters layer E.
  int n_heads = 0;             // query heads (MQA: one latent K=V per layer).
  int head_dim = 0;            // c: the latent that is both key and value.
  int rope_dim = 0;            // r: the last r dims of q/K/V carry RoPE (even, < c).
  int q_lora_rank = 0;         // d_c: low-rank query width.
  int o_groups = 0;            // G: groups of the grouped output projection.
  int o_group_rank = 0;        // width of each group's projection.
  int window = 0;              // W: sliding window, the same in every layer.
  std::vector<int> compress_ratios;      // per layer: 0 = SWA only, 2 or 1 = compressed branch.
  std::vector<int> kv_source_layers;     // layers owning a compressor ("pool"), ascending.
  std::vector<int> index_source_layers;  // layers running the indexer, ascending.
  int index_heads = 0;         // indexer heads.
  int index_head_dim = 0;      // indexer query/key width.
  int index_topk = 0;          // compressed entries each query reads.
  int candidate_source_layer = 0;  // layer choosing candidate blocks for re-index layers; 0 = off.
  int candidate_blocks = 0;        // blocks kept per query (the newest visible one included).
  int candidate_block_size = 0;    // decoder-pool entries per block.
  int n_routed_experts = 0;    // 0 = one dense SwiGLU FFN of moe_inter_dim.
  int n_shared_experts = 0;    // 0 or 1.
  int experts_per_token = 0;   // routed experts chosen per token.
  int moe_inter_dim = 0;       // inner width of every FFN (routed, shared, dense).
  float route_scale = 1.0f;    // routed weights = route_scale * s_e / sum of chosen s.
  float swiglu_limit = 0.0f;   // clamp of the SwiGLU inputs; <= 0 means no clamp.
  float rope_theta = 10000.0f;           // RoPE base of ratio-0 layers.
  float compress_rope_theta = 160000.0f; // RoPE base of layers with a compressed branch.
  float norm_eps = 1e-6f;      // RMSNorm epsilon.
  int max_seq_len = 65536;     // Cedar's own limit on positions served (not in the spec).
  // Prompt format the model was trained on (tools_bridge/lib/chat_format.h): "cedar" (our
  // template, tools_bridge/lib/chat_template.h) or "deepseek_v41" (the released V4.1 encoding,
  // tools_bridge/lib/dsml_encoding.h). Absent in config.json means "cedar".
  std::string chat_format = "cedar";

  // ---- The released DeepSeek-V4.1 parts (issue 21, docs/v41-contract.md). The defaults give ----
  // ---- our own family, and with them the forward is bit-identical to the one before these   ----
  // ---- switches existed. A released checkpoint sets them from its config (engine/v41_*).    ----
  // Where the weights come from: "cedar" = config.json (this struct's JSON) + one
  // model.safetensors with our names, F32/BF16; "deepseek_v41" = the released layout (config.json
  // in the released spelling, sharded safetensors + index, FP8/FP4 weights with E8M0 scales).
  std::string weight_layout = "cedar";
  int hc_mult = 1;               // mHC residual streams per token; 1 = one plain residual stream.
  int hc_sinkhorn_iters = 20;    // Sinkhorn rounds of the comb matrix (used when hc_mult > 1).
  float hc_eps = 1e-6f;          // mHC epsilon, added to pre and inside Sinkhorn (hc_mult > 1).
  float rope_factor = 1.0f;      // YaRN stretch on compressed layers' RoPE; 1 = plain RoPE.
  int64_t rope_original_seq_len = 0;  // YaRN original_max_position_embeddings (rope_factor > 1).
  float rope_beta_fast = 32.0f;  // YaRN beta_fast (rope_factor > 1).
  float rope_beta_slow = 1.0f;   // YaRN beta_slow (rope_factor > 1).
  std::string score_func = "sqrtsoftplus";  // router score: sqrtsoftplus | sigmoid | softmax.
  bool norm_topk_prob = true;    // routed weights divided by the sum of the chosen scores.
  std::string kv_dtype = "f32";  // stored KV precision: "f32", or "released" (FP4/MXFP4/FP8 as released).
  // Engram blocks, applied to the streams before the listed layers (empty = none; all < E).
  std::vector<int> engram_layers;
  std::vector<int64_t> engram_table_rows;  // per Engram layer: rows of its hashed table.
  int engram_max_ngram = 0;      // n-gram orders 2..this.
  int engram_n_heads = 0;        // hash heads per order.
  int engram_head_dim = 0;       // width of one table row.
  int64_t engram_vocab_size = 0;       // primes for the bucket ranges are drawn above this.
  int64_t engram_compressed_vocab = 0; // classes of the token normalisation table.
  int engram_pad_id = 0;         // token id that pads n-grams before position 0.
  int n_mtp_layers = 0;          // DSpark draft blocks (mtp.N.*) in the checkpoint; 0 = none.

  // Floats per token of the residual state: X [hc_mult, dim] followed, when hc_mult > 1, by the
  // pre-mix a [hc_mult] the next sub-layer collapses X with (notes §2.1). What H_E, boundary
  // snapshots and replay inputs store per row.
  int ResidualWidth() const { return hc_mult == 1 ? dim : hc_mult * dim + hc_mult; }
  bool IsEngramLayer(int layer) const;

  // Derived lookups (valid after Validate()).
  int RatioOf(int layer) const { return compress_ratios[layer]; }
  bool IsKvSource(int layer) const;
  bool IsIndexSource(int layer) const;
  // The kv source whose pool `layer` reads (latest source <= layer), or -1 for ratio-0 layers.
  int PoolOf(int layer) const;
  // The index source whose top-k `layer` uses (latest index source <= layer), or -1.
  int IndexSourceOf(int layer) const;
  // True for index sources after E that restrict scoring to the candidate blocks.
  bool UsesCandidates(int layer) const;
  float RopeBaseOf(int layer) const { return RatioOf(layer) > 0 ? compress_rope_theta : rope_theta; }
  int DecoderLayers() const { return n_layers - n_encoder_layers; }
  // Rows the staircase needs: W + (L-E-1)(W-1) (spec §1).
  int64_t StaircaseLength() const;
  int PoolRatio(int pool_layer) const { return compress_ratios[pool_layer]; }

  // Returns "" when valid, else every problem found, one per line ("field: expected ..., found ...").
  std::string Validate() const;
  // The checks of the released-model switches above (called by Validate).
  void ValidateReleasedParts(std::ostringstream* err) const;
};

ModelConfig ConfigFromJson(const nlohmann::json& j);  // throws std::runtime_error on bad types
nlohmann::json ConfigToJson(const ModelConfig& c);
// Loads and validates; throws std::runtime_error naming the file and every problem.
ModelConfig LoadConfigFile(const std::string& path);

// Presets: "tiny" (tests; "tiny-hc" and "tiny-kvq" its hyper-connection and released-KV variants),
// "small" and "medium" (benchmarks), "flash" (the real V4.1-Flash shape, info only).
bool PresetConfig(const std::string& name, ModelConfig* out);
std::vector<std::string> PresetNames();
// The names joined by sep, for help texts and messages ("tiny, tiny-hc, ...").
std::string JoinNames(const std::vector<std::string>& names, const char* sep);
// "unknown preset 'NAME' (expected one of tiny, ..., medium[, more...])": the one message every
// command gives for a preset it does not know (`more`: names it takes besides PresetNames()).
std::string UnknownPresetMessage(const std::string& name, const std::vector<std::string>& more = {});

}  // namespace cedar
