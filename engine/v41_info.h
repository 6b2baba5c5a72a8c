// The released checkpoint's tensors as a function of the config alone (names, shapes, dtypes,
// family), and what `cedar info --config` prints from them: parameters and bytes per tensor
// family and dtype, and the parameters active per prefill and per decode token. No weights read.
// Every name/shape/dtype rule has its source in docs/v41-contract.md ("Tensors").
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "engine/model.h"
#include "engine/safetensors.h"
#include "engine/v41_config.h"

namespace cedar {

// One tensor name pattern. `count` > 1 stands for the routed experts of one layer, named
// `...experts.{E}...` with E in [0, count). Vision tensors (vision.*, aligner.*, image_*) are out of
// scope and not listed.
struct V41TensorSpec {
  std::string name;             // e.g. "layers.2.attn.wq_a.weight"
  std::string family;           // embed, attention, compressor, indexer, routed_experts, shared_experts,
                                // router, mhc, norms, engram_tables, engram_proj, dspark, head
  DType dtype = DType::BF16;    // as stored
  std::vector<int64_t> shape;   // as stored (packed FP4: [rows, cols/2])
  int64_t count = 1;            // tensors this entry stands for
  bool is_scale = false;        // a block-scale tensor (bytes, not parameters)
  int layer = -1;               // backbone layer of a layers.N.* tensor; -1 for globals and mtp.*
  int64_t Elements() const;     // stored elements of one tensor
  int64_t Params() const;       // logical parameters of one tensor: 0 for scales, 2 per byte for packed FP4
  int64_t Bytes() const;        // stored bytes of one tensor
};

std::vector<V41TensorSpec> V41Tensors(const V41Config& c);

struct V41FamilyTotals {
  std::map<std::string, int64_t> params;  // by dtype name (logical parameters; "FP4" for packed I8)
  std::map<std::string, int64_t> bytes;   // by stored dtype name (scales included)
  int64_t tensors = 0;
};

struct V41Info {
  std::map<std::string, V41FamilyTotals> families;  // by family
  V41FamilyTotals total;
  std::map<std::string, int64_t> bytes_by_dtype;   // stored dtype -> bytes (what the index's shards sum to)
  int64_t backbone_params = 0;         // every parameter except Engram tables and DSpark (report: 552B)
  int64_t engram_table_params = 0;     // Engram rows x head_dim (report: 196B)
  // Active parameters per token (weights a token's computation reads; embedding lookup excluded):
  int64_t active_prefill = 0;  // encoder layers [0, L/2) + what a prompt token needs at the first
                               // decoder layer (attn_norm, compressor, index keys) (report: ~8B)
  int64_t active_decode = 0;   // all L layers + final norm + head (report: ~16B)
  std::vector<int64_t> active_per_layer;  // full per-token active count of each backbone layer
  // Stored bytes a decode token's weights take (the active_decode tensors as stored: FP8 and FP4
  // with their E8M0 scales, BF16, F32; n_activated experts' share, Engram's rows read): what an
  // engine holding every tensor as released streams per decode token. (Cedar's --weights as-stored
  // holds the matmul weights, the routers and Engram's wkv so, but the norms as F32: V41Held.)
  int64_t active_decode_bytes = 0;
  // Cache bytes per token of global KV as released: main entries FP4 + E4M3 per 16 (c/2 + c/16),
  // index keys MXFP4 + UE8M0 per 32 (cI/2 + cI/32), divided by each source's ratio (report: 890).
  double global_kv_bytes_per_token = 0;
};

V41Info ComputeV41Info(const V41Config& c);

// What Cedar holds of a released checkpoint loaded with `--weights p` (engine/v41_load.cpp), from
// the config alone: engine/v41_held.h's rule (HeldTypeOf) applied to V41Tensors, each tensor
// rounded up to the arena's 64 bytes as the loader allocates it. The loader holds every tensor of
// V41Tensors except ffn.gate.bias_vl (image routing) and the Engram tables, which stay in the
// shards and are read row by row; Engram's wkv (at p) and q * k (F32) are held beside the arena.
struct V41Held {
  int64_t arena_bytes = 0;         // the load's arena with every routed expert resident: embed, head,
                                   // backbone and DSpark (ReleasedLoadReport dense_bytes + expert_bytes)
  int64_t expert_bytes = 0;        // of those, the routed experts (what --max-ram may leave in the shards)
  int64_t engram_bytes = 0;        // Engram's wkv (at p) and q_weight * k_weight ([hc, d], F32), outside the arena
  int64_t decode_token_bytes = 0;  // the weights one decode token reads as held: every backbone layer's
                                   // (n_activated experts' share, Engram's table rows as stored),
                                   // the final norm and the head; the embedding lookup not counted
};
V41Held ComputeV41Held(const V41Config& c, WeightPrecision p);
nlohmann::json V41InfoToJson(const V41Info& info);
std::string V41InfoText(const V41Config& c, const V41Info& info);

}  // namespace cedar
