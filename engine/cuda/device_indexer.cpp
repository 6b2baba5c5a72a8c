// The indexer on the device (spec §3.5, docs/spec-readings.md #1), as engine/indexer.cpp:
// scores of visible pool entries per query row, the candidate blocks at the candidate source,
// the restriction to them at re-index layers, and the top-k, all per block of rows (the
// scores tile is [rows, visible entries]).
#include <algorithm>
#include <stdexcept>

#include "engine/cuda/device_forward.h"

namespace cedar::gpu {

namespace {

// Rows scored at once: bounds the F32 scores tile to about 256 MiB (and the kernels' 65535-row grids).
int RowBlock(int64_t n_keys) { return int(std::clamp<int64_t>((int64_t(64) << 20) / std::max<int64_t>(n_keys, 1), 1, 4096)); }

// Copies what the capture wants of row t (the last prompt row) back to the host.
void Capture(const DeviceModel& m, int l, const float* scores_row, int64_t n_vis, const DevSelection& sel, int64_t t,
             IndexCapture* cap) {
  std::vector<float> sc(static_cast<size_t>(n_vis));
  int32_t count = 0;
  CEDAR_GPU(cu::Synchronize(m.stream()));
  CEDAR_GPU(cu::CopyToHost(sc.data(), scores_row, sc.size() * sizeof(float)));
  CEDAR_GPU(cu::CopyToHost(&count, sel.Count(t), sizeof(int32_t)));
  std::vector<int32_t> idx(static_cast<size_t>(count));
  CEDAR_GPU(cu::CopyToHost(idx.data(), sel.Row(t), idx.size() * sizeof(int32_t)));
  cap->scores[l] = std::move(sc);
  cap->topk[l] = std::move(idx);
}

}  // namespace

void SelectEntries(const DeviceModel& m, DeviceState& st, int l, const float* cq, const float* u, int64_t first,
                   int n, DevPassContext& ctx) {
  const ModelConfig& c = m.config();
  const DevLayer& w = m.layer(l);
  Workspace& ws = m.ws();
  const cu::Stream s = m.stream();
  const DevicePool& pool = st.PoolOfLayer(c, l);
  const int H = c.index_heads, hd = c.index_head_dim, ratio = pool.ratio;
  const int64_t count = pool.Count();
  // Index queries [n, H, hd] rotated at the rows' positions; head weights [n, H] (pre-scaled).
  float* q = ws.iq.Ensure(size_t(n) * H * hd);
  float* wts = ws.iw.Ensure(size_t(n) * H);
  CEDAR_GPU(cu::Matmul(ws.blas, cq, DType::kF32, w.idx_wq_b.p, w.idx_wq_b.type, q, DType::kF32, n, c.q_lora_rank, H * hd, 0.0f, s));
  CEDAR_GPU(cu::Rope(q, DType::kF32, n, H, hd, c.rope_dim, nullptr, first, 1, c.RopeBaseOf(l), 1, s));
  CEDAR_GPU(cu::Matmul(ws.blas, u, DType::kF32, w.idx_wproj.p, w.idx_wproj.type, wts, DType::kF32, n, c.dim, H, 0.0f, s));

  DevSelection& sel = ctx.topk[l];
  sel.Reset(first, n, c.index_topk);
  const bool is_candidate_source = (l == c.candidate_source_layer && c.candidate_source_layer > 0);
  DevSelection* cand_out = nullptr;
  if (is_candidate_source) {
    cand_out = &ctx.candidates[l];
    cand_out->Reset(first, n, c.candidate_blocks);
  }
  const DevSelection* cand_in = nullptr;
  if (c.UsesCandidates(l)) {
    auto it = ctx.candidates.find(c.candidate_source_layer);
    if (it != ctx.candidates.end()) {
      cand_in = &it->second;
      if (!cand_in->Covers(first, n)) throw std::logic_error("indexer: candidate blocks do not cover the rows of layer " + std::to_string(l));
    }
  }

  const int rb = RowBlock(count);
  for (int r0 = 0; r0 < n; r0 += rb) {
    const int nb = std::min(rb, n - r0);
    const int64_t vis_max = std::min<int64_t>(count, (first + r0 + nb) / ratio);
    const int64_t ld = std::max<int64_t>(vis_max, 1);
    std::vector<int32_t> len(static_cast<size_t>(nb));
    for (int r = 0; r < nb; ++r) len[size_t(r)] = int32_t(std::min<int64_t>(count, (first + r0 + r + 1) / ratio));
    const int32_t* len_d = UploadSmall(ws.lengths, len);
    float* scores = ws.scores.Ensure(size_t(nb) * ld);  // [nb, ld]
    cu::IndexScoresArgs a;
    a.q = q + size_t(r0) * H * hd;
    a.keys = pool.keys.base();
    a.type = DType::kF32;
    a.w = wts + size_t(r0) * H;
    a.scores = scores;
    a.n_rows = nb, a.n_heads = H, a.head_dim = hd, a.n_keys = int(vis_max);
    a.ld_scores = ld;
    CEDAR_GPU(cu::IndexScores(ws.blas, a, s));
    if (cand_out) {
      void* cw = ws.cand_ws.Ensure<char>(std::max<size_t>(cu::CandidateBlocksWorkspaceBytes(nb, int(vis_max), c.candidate_block_size), 1));
      CEDAR_GPU(cu::CandidateBlocks(scores, ld, len_d, nb, int(vis_max), c.candidate_block_size, c.candidate_blocks, cw,
                                    cand_out->idx.as<int32_t>() + size_t(r0) * c.candidate_blocks, c.candidate_blocks,
                                    cand_out->count.as<int32_t>() + r0, s));
    }
    if (cand_in)
      CEDAR_GPU(cu::MaskToCandidateBlocks(scores, ld, len_d, nb, int(vis_max), cand_in->Row(first + r0), cand_in->width,
                                          cand_in->Count(first + r0), c.candidate_block_size, s));
    CEDAR_GPU(cu::TopK(scores, ld, len_d, nb, int(vis_max), c.index_topk, sel.idx.as<int32_t>() + size_t(r0) * c.index_topk,
                       c.index_topk, sel.count.as<int32_t>() + r0, s));
    if (ctx.capture && ctx.capture->pos >= first + r0 && ctx.capture->pos < first + r0 + nb) {
      const int r = int(ctx.capture->pos - first - r0);
      Capture(m, l, scores + size_t(r) * ld, len[size_t(r)], sel, ctx.capture->pos, ctx.capture);
    }
  }
}

}  // namespace cedar::gpu
