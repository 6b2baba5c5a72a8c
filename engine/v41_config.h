// The released DeepSeek-V4.1-Flash configuration, read from either spelling the release ships:
// the Hugging Face `config.json` (model keys nested under `text_config`, `quantization_config` at
// the top) and the flat `inference/config.json` of the reference code (`dim`, `n_layers`, ...).
// Both map to this one struct; ValidateV41Config checks it once, naming the key on any defect.
// Key names and released values: docs/v41-contract.md and tests/data/v41/README.md.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace cedar {

struct V41Config {
  // --- backbone ---
  int vocab_size = 0;           // vocab_size: token ids (129280); embed and head rows
  int dim = 0;                  // hidden_size | dim: residual width d (5120)
  int n_layers = 0;             // num_hidden_layers | n_layers: backbone blocks (40), DSpark not counted
  int n_heads = 0;              // num_attention_heads | n_heads: query heads (64), one shared K=V latent
  int head_dim = 0;             // head_dim: K=V latent and query head width c (512)
  int rope_dim = 0;             // qk_rope_head_dim | rope_head_dim: RoPE on the last dims of a head (64)
  int q_lora_rank = 0;          // q_lora_rank: low-rank query width (1280), q_norm acts here
  int o_lora_rank = 0;          // o_lora_rank: per-group output rank d_g (1024)
  int o_groups = 0;             // o_groups: output groups g (8); wo_a is block-diagonal over them
  int window = 0;               // sliding_window | window_size: SWA keys per query incl. itself (128)
  double norm_eps = 0;          // rms_norm_eps | norm_eps: RMSNorm epsilon (1e-20)
  // --- RoPE ---
  double rope_theta = 0;           // rope_theta: base on ratio-0 layers, no YaRN (10000)
  double compress_rope_theta = 0;  // compress_rope_theta: base on compressed layers, with YaRN (160000)
  double rope_factor = 1;          // rope_scaling.factor | rope_factor: YaRN stretch (16)
  int64_t original_seq_len = 0;    // rope_scaling.original_max_position_embeddings | original_seq_len (65536)
  double beta_fast = 0;            // rope_scaling.beta_fast | beta_fast (32)
  double beta_slow = 0;            // rope_scaling.beta_slow | beta_slow (1)
  int64_t max_positions = 0;       // max_position_embeddings (nested only; flat: original_seq_len * rope_factor)
  // --- layer roles (CSA2 / CED) ---
  std::vector<int> compress_ratios;      // compress_ratios: per layer, backbone then DSpark (43 entries)
  std::vector<int> kv_source_layers;     // kv_source_layer_ids | kv_source_layers: own a compressor ([2,8,14,20])
  std::vector<int> index_source_layers;  // index_source_layer_ids | index_source_layers: run an indexer
  int candidate_source_layer = -1;       // candidate_source_layer_id | candidate_source_layer: -1 = none (20)
  int candidate_topk_blocks = 0;         // candidate_topk_blocks: blocks kept at the candidate source (2048)
  int candidate_block_size = 0;          // candidate_block_size: entries per candidate block (8)
  int index_n_heads = 0;                 // index_n_heads: indexer query heads (32)
  int index_head_dim = 0;                // index_head_dim: indexer key/query width (128)
  int index_topk = 0;                    // index_topk: compressed entries attended per query (512)
  // --- mHC ---
  int hc_mult = 1;              // hc_mult: residual streams per token (4)
  int hc_sinkhorn_iters = 0;    // hc_sinkhorn_iters: Sinkhorn rounds for comb (20)
  double hc_eps = 0;            // hc_eps: added in pre and in Sinkhorn (1e-6)
  // --- MoE ---
  int moe_inter_dim = 0;        // moe_intermediate_size | moe_inter_dim: expert hidden width (2304)
  int n_routed_experts = 0;     // n_routed_experts (384)
  int n_shared_experts = 0;     // n_shared_experts (1)
  int n_activated_experts = 0;  // num_experts_per_tok | n_activated_experts: top-k (6)
  std::string score_func;       // scoring_func | score_func: sqrtsoftplus | sigmoid | softmax
  bool norm_topk_prob = true;   // norm_topk_prob (nested only; the flat file has none: true)
  double route_scale = 1;       // routed_scaling_factor | route_scale (1.5)
  double swiglu_limit = 0;      // swiglu_limit: clamp of the SwiGLU inputs, 0 = none (10)
  // --- Engram ---
  std::vector<int> engram_layer_ids;          // engram_layer_ids: layers with an Engram before them ([1,14])
  std::vector<int64_t> engram_num_embeddings; // engram_num_embeddings: table rows per Engram layer
  int engram_max_ngram = 0;                   // engram_max_ngram_size: n-gram orders 2..this (4)
  int64_t engram_vocab_size = 0;              // engram_vocab_size: primes are drawn above this (16000000)
  int engram_n_heads = 0;                     // engram_n_heads: hash heads per order (8)
  int engram_head_dim = 0;                    // engram_head_dim: row width (256); flat file may omit (256)
  int engram_pad_id = 0;                      // engram_pad_token_id | engram_pad_id (2)
  int64_t engram_compressed_vocab = 0;        // engram_compressed_vocab_size: normalised classes (99092)
  // --- DSpark (mtp.N.*) ---
  int n_mtp_layers = 0;                       // num_nextn_predict_layers | n_mtp_layers: draft blocks (3)
  int dspark_block_size = 0;                  // dspark_block_size: tokens drafted per step (5)
  int dspark_noise_token_id = 0;              // dspark_noise_token_id (128799)
  std::vector<int> dspark_target_layer_ids;   // dspark_target_layer_ids: hidden states fed to main_proj
  int dspark_markov_rank = 0;                 // dspark_markov_rank: markov head rank (256)
  int dspark_n_routed_experts = 0;            // dspark_n_routed_experts: draft expert bank (128)
  int dspark_n_activated_experts = 0;         // dspark_num_experts_per_tok | dspark_n_activated_experts (3)
  // --- quantisation and misc ---
  std::string weight_dtype = "fp8";           // quantization_config.quant_method | dtype: dense weights
  std::string expert_dtype = "fp4";           // quantization_config.expert_dtype | expert_dtype: routed experts
  std::string scale_fmt = "ue8m0";            // quantization_config.scale_fmt (flat: implied ue8m0)
  int weight_block_rows = 32;                 // quantization_config.weight_block_size[0] (flat: 32)
  int weight_block_cols = 32;                 // quantization_config.weight_block_size[1] (flat: 32)
  int image_token_id = -1;                    // image_token_id (129264): vision is out of scope
  std::string spelling;                       // "hf" (nested text_config) or "inference" (flat), for messages

  // Derived roles. KvSourceOf / IndexSourceOf: the latest source at or before l, -1 if none.
  int KvSourceOf(int l) const;
  int IndexSourceOf(int l) const;
  bool IsKvSource(int l) const;
  bool IsIndexSource(int l) const;
  bool IsEngramLayer(int l) const;
  int RatioOf(int l) const { return l < int(compress_ratios.size()) ? compress_ratios[l] : 0; }
  int EncoderLayers() const { return n_layers / 2; }  // the CED split: layers [0, L/2) encode
};

// Parses either spelling; throws std::invalid_argument naming the key, what was expected and what
// was found. `where` prefixes messages (usually the file path). Calls ValidateV41Config.
V41Config ParseV41Config(const nlohmann::json& j, const std::string& where);
V41Config LoadV41ConfigFile(const std::string& path);
// True when the JSON looks like a released V4.1 config in either spelling.
bool LooksLikeV41Config(const nlohmann::json& j);
// Cross-field checks (layer roles, sizes); throws std::invalid_argument naming the key.
void ValidateV41Config(const V41Config& c, const std::string& where);

}  // namespace cedar
