// Sink attention (spec §3.6) for a batch of query rows over two entry sources (an entry is both
// key and value): for row r and head h, with E_r = the row's window entries followed by its
// selected pool entries,
//   out[r, h] = Σ_{e∈E_r} exp(q[r, h]·e · scale) e / (Σ_{e∈E_r} exp(q[r, h]·e · scale) + exp(sink[h]))
// Window entries of row r: win[(win_first[r] + i) mod win_capacity] for i < n_win[r] (no wrap
// when win_capacity is 0); selected entries: pool[sel[r, i]] for i < n_sel[r]. One softmax,
// F32 online (running max and sum), duplicates kept. Equals ref::SinkAttention per row.
#pragma once
#include <cstdint>

#include "kernels/cuda/common.h"

namespace cedar::kernels::cuda {

struct SinkAttentionArgs {
  const float* q = nullptr;           // [n_rows, n_heads, dim]
  float* out = nullptr;               // [n_rows, n_heads, dim]
  int n_rows = 0, n_heads = 0, dim = 0;
  DType entry_type = DType::kF32;     // of win and pool
  const void* win = nullptr;          // window store [*, dim]
  const int32_t* win_first = nullptr; // [n_rows]: index of the row's oldest window entry
  const int32_t* n_win = nullptr;     // [n_rows]; null: no window entries
  int32_t win_capacity = 0;           // ring size of the window store; 0: not a ring
  const void* pool = nullptr;         // compressed entries [*, dim]
  const int32_t* sel = nullptr;       // [n_rows, ld_sel]: selected pool indices
  int64_t ld_sel = 0;
  const int32_t* n_sel = nullptr;     // [n_rows]; null: no selected entries
  const float* sink = nullptr;        // [n_heads]: sink logits
  float scale = 1.0f;                 // 1/sqrt(head_dim)
};

Status SinkAttention(const SinkAttentionArgs& a, Stream stream);

}  // namespace cedar::kernels::cuda
