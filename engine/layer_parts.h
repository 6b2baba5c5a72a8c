// The pieces of one layer, split by purpose (internal to engine/).
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "engine/forward.h"

namespace cedar {

// Compressor of kv-source layer l over rows [first, first+n) with normalised inputs u [n, d].
void CompressRows(const Model& m, int l, Pool& pool, const float* u, int64_t first, int n);

// Indexer of index-source layer l for rows [first, first+n): cq [n, q_rank], u [n, d].
// Fills ctx.topk[l] (and ctx.candidates[l] at the candidate source).
void SelectEntries(const Model& m, const SequenceState& st, int l, const float* cq,
                   const float* u, int64_t first, int n, PassContext& ctx);

// FFN sub-layer (MoE or dense) on rows x [n, d]: adds its output to h [n, d]. groups: the row
// groups whose products run apart (engine/row_groups.h ProductGroups; empty = one group).
void FfnAdd(const Model& m, int l, const float* x, float* h, int n, std::span<const int> groups = {});

}  // namespace cedar
