// The indexer (spec §3.5): scores visible pool entries, optionally restricted to candidate
// blocks (docs/spec-readings.md #1), and keeps the top-k per query row.
#include <algorithm>
#include <cmath>
#include <limits>

#include "engine/kv_precision.h"
#include "engine/layer_parts.h"
#include "engine/rope.h"
#include "kernels/ops.h"
#include "kernels/thread_pool.h"

namespace cedar {

namespace k = kernels;

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr int kRowBlock = 64;  // rows scored at once: bounds the [rows, entries] score buffer

// Block ids kept for one row: the newest visible block, then the best others by max score.
std::vector<int32_t> ChooseBlocks(const float* scores, int64_t n_vis, int bs, int keep) {
  const int64_t n_blocks = (n_vis + bs - 1) / bs;
  std::vector<int32_t> kept;
  if (n_blocks <= keep) {
    for (int64_t b = 0; b < n_blocks; ++b) kept.push_back(int32_t(b));
    return kept;
  }
  std::vector<float> block_max(size_t(n_blocks - 1), kNegInf);  // all but the newest
  for (int64_t b = 0; b + 1 < n_blocks; ++b)
    for (int64_t j = b * bs; j < (b + 1) * bs; ++j) block_max[size_t(b)] = std::max(block_max[size_t(b)], scores[j]);
  std::vector<int32_t> best(size_t(keep - 1));
  k::TopK(block_max.data(), int(n_blocks - 1), keep - 1, best.data());
  kept = best;
  kept.push_back(int32_t(n_blocks - 1));
  return kept;
}

}  // namespace

void SelectEntries(const Model& m, const SequenceState& st, int l, const float* cq, const float* u,
                   int64_t first, int n, PassContext& ctx) {
  const ModelConfig& c = m.config();
  const LayerWeights& w = m.layer(l);
  const Pool& pool = st.PoolOfLayer(c, l);
  const int H = c.index_heads, hd = c.index_head_dim, ratio = pool.ratio;
  const int64_t count = pool.Count(c.head_dim);
  // Index queries [n, H, hd] rotated at the row's position; head weights [n, H].
  std::vector<float> q(size_t(n) * H * hd), wts(size_t(n) * H);
  k::MatmulW(cq, w.idx_wq_b.view(), q.data(), n);
  std::vector<int64_t> pos(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) pos[size_t(r)] = first + r;
  RopeLayer(c, l, q.data(), n, H, hd, pos.data(), 1);
  RoundIndexQueries(c, q.data(), n);  // kv_dtype "released": MXFP4 per head
  k::MatmulW(u, w.idx_wproj.view(), wts.data(), n);
  const float wscale = 1.0f / std::sqrt(float(hd) * float(H));
  for (float& x : wts) x *= wscale;

  Selection& sel = ctx.topk[l];
  sel.first = first;
  sel.width = c.index_topk;
  sel.idx.assign(size_t(n) * c.index_topk, 0);
  sel.count.assign(size_t(n), 0);
  const bool is_candidate_source = (l == c.candidate_source_layer && c.candidate_source_layer > 0);
  Selection* cand_out = nullptr;
  if (is_candidate_source) {
    cand_out = &ctx.candidates[l];
    cand_out->first = first;
    cand_out->width = c.candidate_blocks;
    cand_out->idx.assign(size_t(n) * c.candidate_blocks, 0);
    cand_out->count.assign(size_t(n), 0);
  }
  const Selection* cand_in = nullptr;
  if (c.UsesCandidates(l)) {
    auto it = ctx.candidates.find(c.candidate_source_layer);
    if (it != ctx.candidates.end()) cand_in = &it->second;
  }

  std::vector<float> scores;
  for (int r0 = 0; r0 < n; r0 += kRowBlock) {
    const int nb = std::min(kRowBlock, n - r0);
    const int64_t vis_max = std::min<int64_t>(count, (first + r0 + nb) / ratio);
    scores.assign(size_t(nb) * std::max<int64_t>(vis_max, 1), 0.0f);
    k::IndexScores(q.data() + size_t(r0) * H * hd, wts.data() + size_t(r0) * H, pool.keys.data(), nb, H, hd,
                   int(vis_max), scores.data());
    k::ParallelFor(nb, 4, [&](int64_t p0, int64_t p1) {
    for (int r = r0 + int(p0); r < r0 + int(p1); ++r) {
      const int64_t t = first + r;
      const int64_t n_vis = std::min<int64_t>(count, (t + 1) / ratio);
      float* s = scores.data() + size_t(r - r0) * vis_max;
      for (int64_t j = n_vis; j < vis_max; ++j) s[j] = kNegInf;
      if (cand_out) {
        std::vector<int32_t> kept = ChooseBlocks(s, n_vis, c.candidate_block_size, c.candidate_blocks);
        std::copy(kept.begin(), kept.end(), cand_out->idx.begin() + size_t(r) * c.candidate_blocks);
        cand_out->count[size_t(r)] = int32_t(kept.size());
      }
      if (cand_in && cand_in->Has(t)) {
        const int nk = cand_in->Count(t);
        const int64_t n_blocks = (n_vis + c.candidate_block_size - 1) / c.candidate_block_size;
        if (nk < n_blocks) {  // restricted: everything outside the kept blocks is invisible
          std::vector<char> keep(size_t(n_blocks), 0);
          for (int b = 0; b < nk; ++b) keep[size_t(cand_in->Row(t)[b])] = 1;
          for (int64_t j = 0; j < n_vis; ++j)
            if (!keep[size_t(j / c.candidate_block_size)]) s[j] = kNegInf;
        }
      }
      sel.count[size_t(r)] = k::TopK(s, int(n_vis), c.index_topk, sel.idx.data() + size_t(r) * c.index_topk);
      if (ctx.capture && t == ctx.capture->pos) {
        ctx.capture->scores[l].assign(s, s + n_vis);
        ctx.capture->topk[l].assign(sel.idx.begin() + size_t(r) * c.index_topk,
                                    sel.idx.begin() + size_t(r) * c.index_topk + sel.count[size_t(r)]);
      }
    }
    });
  }
}

}  // namespace cedar
