// The AVX2 tiled SinkAttention of one query row (kernels/attention_tiled.cpp), behind
// kernels::SinkAttention. Internal to kernels/.
#pragma once

namespace cedar::kernels::internal {

// out[h] = SinkAttention of q[h] over the row's entries ent[0..n) (each [dim], window first),
// for n_heads heads; q, out: [n_heads, dim], sink: [n_heads]. Returns false (and writes nothing)
// when this build or shape has no tiled path (no AVX2 + FMA, n_heads % 4 != 0 or dim % 16 != 0).
// Each head's result depends only on that head's q, sink and the entries: the same bits whether
// the head is computed with its row's other heads or in a group of 4 alone.
bool SinkAttentionTiled(const float* q, int n_heads, int dim, const float* const* ent, int n, const float* sink, float scale,
                        float* out);

}  // namespace cedar::kernels::internal
