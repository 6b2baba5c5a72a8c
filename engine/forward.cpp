// One layer over a batch of rows: window entries, compressor, indexer, sink attention,
// grouped output projection, FFN (spec §3).
#include "engine/forward.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "engine/attention.h"
#include "engine/kv_precision.h"
#include "engine/layer_parts.h"
#include "engine/mhc.h"
#include "engine/rope.h"
#include "engine/row_groups.h"
#include "engine/scratch.h"
#include "kernels/ops.h"
#include "kernels/thread_pool.h"

namespace cedar {

namespace k = kernels;

// Up to this many output rows a layer is a decode step (one row per sequence): its products run
// on the kernels' few-row path (kernels/cpu_internal.h kFewRowsMax), whose every output is the
// same dot product however the products are grouped into pool passes.
constexpr int kDecodeRows = 16;

void EmbedRow(const Model& m, int32_t token, float* row) {
  const ModelConfig& c = m.config();
  const float* e = m.embed().data + size_t(token) * c.dim;
  if (c.hc_mult > 1) HcEmbedRow(e, c.hc_mult, c.dim, row);
  else std::copy(e, e + c.dim, row);
}

Rows Embed(const Model& m, const int32_t* tokens, int n, int64_t first) {
  const int rw = m.config().ResidualWidth();
  Rows r;
  r.first = first;
  r.n = n;
  r.h.resize(size_t(n) * rw);
  for (int i = 0; i < n; ++i) EmbedRow(m, tokens[i], r.h.data() + size_t(i) * rw);
  return r;
}

std::vector<float> ComputeLogits(const Model& m, const float* h_row) {
  const ModelConfig& c = m.config();
  std::vector<float> x(size_t(c.dim)), logits(size_t(c.vocab_size));
  if (c.hc_mult > 1) {  // RMSNorm_final(sum_i a[i] X_i) with the last FFN's pre (notes §2.1)
    HcCollapseRows(h_row, 1, c.hc_mult, c.dim, x.data());
    k::RmsNorm(x.data(), m.norm().data, x.data(), 1, c.dim, c.norm_eps);
  } else {
    k::RmsNorm(h_row, m.norm().data, x.data(), 1, c.dim, c.norm_eps);
  }
  k::MatmulW(x.data(), m.head().view(), logits.data(), 1);
  return logits;
}

namespace {

// The first row of [first, ...) that the window store does not hold yet.
int64_t WindowStart(const RowStore& store, int64_t first) {
  if (store.size() > 0 && store.hi() >= first && store.lo() <= first) return std::max(first, store.hi());
  return first;
}

// Window entries e_t = Rot(t)(RMSNorm_kv(Wkv u_t)) for rows >= the store's end. wkv_u: Wkv u of
// all n rows when the caller computed it already (decode, with the queries' product), or null.
void AppendWindowEntries(const Model& m, int l, RowStore& store, const float* u, int64_t first, int n, const float* wkv_u) {
  const ModelConfig& c = m.config();
  const LayerWeights& w = m.layer(l);
  const int64_t start = WindowStart(store, first);
  if (start >= first + n) return;
  const int rows = int(first + n - start), cd = c.head_dim;
  Scratch<float> e(size_t(rows) * cd);  // [rows, c]
  if (wkv_u) std::copy(wkv_u + size_t(start - first) * cd, wkv_u + size_t(n) * cd, e.begin());
  else k::MatmulW(u + size_t(start - first) * c.dim, w.wkv.view(), e.data(), rows);
  k::RmsNorm(e.data(), w.kv_norm.data, e.data(), rows, cd, c.norm_eps);
  std::vector<int64_t> pos(static_cast<size_t>(rows));
  for (int r = 0; r < rows; ++r) pos[size_t(r)] = start + r;
  RopeLayer(c, l, e.data(), rows, 1, cd, pos.data(), 1);
  RoundWindowEntries(c, e.data(), rows);  // kv_dtype "released": FP8 as stored, before anyone reads it
  for (int r = 0; r < rows; ++r) std::copy(e.begin() + size_t(r) * cd, e.begin() + size_t(r + 1) * cd, store.Append(start + r));
}

// With mHC (hc_mult > 1), from the attention output y [n, d] on: the attention sub-layer's
// stream update, then the whole FFN sub-layer, on residual rows [n, hc*d + hc] (notes §2.1).
// groups: ProductGroups over the n rows.
void MhcSubLayerTails(const Model& m, int l, float* rows, int n, const float* y, std::span<const int> groups) {
  const ModelConfig& c = m.config();
  const LayerWeights& w = m.layer(l);
  const int hc = c.hc_mult, d = c.dim;
  HcCoeffs k_attn, k_ffn;
  // Coefficients from X as it entered the layer, then X' = post y + comb^T X, a' = pre_attn.
  HcCoefficients(c, HcParams{w.hc_attn_fn, w.hc_attn_base, w.hc_attn_scale}, rows, n, &k_attn, groups);
  HcUpdateRows(rows, n, hc, d, y, k_attn);
  // FFN: coefficients from X'; input RMSNorm_ffn(sum_i pre_attn[i] X'_i); X'' and a'' = pre_ffn.
  HcCoefficients(c, HcParams{w.hc_ffn_fn, w.hc_ffn_base, w.hc_ffn_scale}, rows, n, &k_ffn, groups);
  std::vector<float> x(size_t(n) * d), f(size_t(n) * d, 0.0f);
  HcCollapseRows(rows, n, hc, d, x.data());
  k::RmsNorm(x.data(), w.ffn_norm.data, x.data(), n, d, c.norm_eps);
  FfnAdd(m, l, x.data(), f.data(), n, groups);
  HcUpdateRows(rows, n, hc, d, f.data(), k_ffn);
}

}  // namespace

namespace {

// Engram before block l (engine/engram.h): X of a segment's rows as they enter layer l, x [n, rw].
void EngramBeforeLayer(const Model& m, int l, const Segment& sg, float* x) {
  const ModelConfig& c = m.config();
  const auto it = std::find(c.engram_layers.begin(), c.engram_layers.end(), l);
  const size_t j = size_t(it - c.engram_layers.begin());
  if (j >= m.engram().size()) throw std::logic_error("forward: no Engram weights loaded for layer " + std::to_string(l));
  const PassContext& ctx = *sg.ctx;
  auto token_at = [&](int64_t p) -> int32_t {
    if (ctx.new_tokens && p >= ctx.new_tokens_first && p < ctx.new_tokens_first + ctx.n_new_tokens)
      return ctx.new_tokens[p - ctx.new_tokens_first];
    if (p >= 0 && p < int64_t(sg.st->tokens.size())) return sg.st->tokens[size_t(p)];
    throw std::logic_error("forward: Engram needs the token at position " + std::to_string(p) + ", which this pass does not hold");
  };
  std::vector<int32_t> tokens(static_cast<size_t>(sg.n));  // [n] ids at sg.first..
  for (int r = 0; r < sg.n; ++r) tokens[size_t(r)] = token_at(sg.first + r);
  const int64_t k = std::min<int64_t>(sg.first, c.engram_max_ngram - 1);
  std::vector<int32_t> prev(static_cast<size_t>(k));  // [k] the n-gram history before the first row
  for (int64_t r = 0; r < k; ++r) prev[size_t(r)] = token_at(sg.first - k + r);
  EngramAdd(m.engram()[j], c, tokens.data(), sg.first, sg.n, k > 0 ? prev.data() : nullptr, x);
}

}  // namespace

void RunLayerSegments(const Model& m, int l, std::vector<Segment>& segs, std::vector<float>& h) {
  const ModelConfig& c = m.config();
  if (c.IsEngramLayer(l)) {
    size_t r = 0;
    for (const Segment& sg : segs) {
      if (sg.n > 0) EngramBeforeLayer(m, l, sg, h.data() + r * size_t(c.ResidualWidth()));
      r += size_t(sg.n);
    }
  }
  const LayerWeights& w = m.layer(l);
  const int d = c.dim, cd = c.head_dim, H = c.n_heads, qr = c.q_lora_rank;
  // Residual rows are rw floats: h [d] with one stream, [X (hc*d) | a (hc)] with mHC (mhc.h).
  const int hc = c.hc_mult, rw = c.ResidualWidth();
  int n_in = 0;
  for (const Segment& sg : segs) {
    if (sg.out_from < sg.first) throw std::logic_error("RunLayer: out_from before the first row");
    n_in += sg.n;
  }
  // u = RMSNorm_attn(h), or RMSNorm_attn(sum_i a[i] X_i) with mHC: [n_in, d]
  Scratch<float> u(size_t(n_in) * d);
  if (hc > 1) {
    HcCollapseRows(h.data(), n_in, hc, d, u.data());
    k::RmsNorm(u.data(), w.attn_norm.data, u.data(), n_in, d, c.norm_eps);
  } else {
    k::RmsNorm(h.data(), w.attn_norm.data, u.data(), n_in, d, c.norm_eps);
  }
  // Decode (every row new to its window and an output row, a few rows): Wkv u and the queries'
  // Wq_a u in one pass of the thread pool (one hand-off instead of two; each output is the same
  // dot product either way). wkv_u [n_in, c], cq_pre [n_in, q_rank]; empty otherwise.
  Scratch<float> wkv_u, cq_pre;
  bool fuse = n_in > 0 && n_in <= kDecodeRows;
  for (const Segment& sg : segs)
    fuse = fuse && sg.out_from <= sg.first && WindowStart(sg.st->windows[size_t(l)], sg.first) == sg.first;
  if (fuse) {
    wkv_u.resize(size_t(n_in) * cd);
    cq_pre.resize(size_t(n_in) * qr);
    const k::MatmulJob jobs[2] = {k::JobW(u.data(), w.wq_a.view(), cq_pre.data(), n_in), k::JobW(u.data(), w.wkv.view(), wkv_u.data(), n_in)};
    k::MatmulMany(jobs, 2);
  }
  // Per segment: window entries, compressor; and where each segment's output rows start.
  std::vector<int> in_off(segs.size()), out_off(segs.size());
  int n = 0;  // output rows over all segments
  for (size_t i = 0, r = 0; i < segs.size(); r += size_t(segs[i].n), ++i) {
    Segment& sg = segs[i];
    const float* us = u.data() + r * d;
    AppendWindowEntries(m, l, sg.st->windows[size_t(l)], us, sg.first, sg.n, fuse ? wkv_u.data() + r * cd : nullptr);
    if (c.IsKvSource(l)) CompressRows(m, l, sg.st->PoolOfLayer(c, l), us, sg.first, sg.n);
    in_off[i] = int(r);
    out_off[i] = n;
    n += sg.n - int(std::min<int64_t>(sg.out_from - sg.first, sg.n));
  }
  // Output rows: uo [n, d] and their residuals out [n, rw]. When every input row is an output
  // row (one segment, as a full prefill), they are u itself and h itself, not copies.
  const bool all_rows_out = segs.size() == 1 && segs[0].out_from <= segs[0].first;
  Scratch<float> uo_rows(all_rows_out ? 0 : size_t(n) * d);
  const float* const uo = all_rows_out ? u.data() : uo_rows.data();
  std::vector<float> out;  // appended segment by segment below
  if (all_rows_out) out = std::move(h);
  else out.reserve(size_t(n) * rw);
  Scratch<int64_t> pos(static_cast<size_t>(n));
  Scratch<int32_t> seg_of(static_cast<size_t>(n));
  for (size_t i = 0; i < segs.size(); ++i) {
    const Segment& sg = segs[i];
    const int off = int(std::min<int64_t>(sg.out_from - sg.first, sg.n)), cnt = sg.n - off;
    if (!all_rows_out) {
      std::copy(u.begin() + size_t(in_off[i] + off) * d, u.begin() + size_t(in_off[i] + sg.n) * d, uo_rows.begin() + size_t(out_off[i]) * d);
      out.insert(out.end(), h.begin() + size_t(in_off[i] + off) * rw, h.begin() + size_t(in_off[i] + sg.n) * rw);  // at out_off[i] * rw
    }
    for (int r = 0; r < cnt; ++r) {
      pos[size_t(out_off[i] + r)] = sg.out_from + r;
      seg_of[size_t(out_off[i] + r)] = int32_t(i);
    }
  }
  if (n > 0) {
    // Which output rows share a product (engine/row_groups.h): one group unless rows of
    // several segments would change each other's summation order.
    std::vector<int> seg_rows(segs.size());
    for (size_t i = 0; i < segs.size(); ++i) seg_rows[i] = (i + 1 < segs.size() ? out_off[i + 1] : n) - out_off[i];
    const std::vector<int> groups = ProductGroups(seg_rows);
    // Queries: cq = RMSNorm_q(Wq_a u) [n, q_rank]; q = Rot(p)(Wq_b cq) [n, H, c]
    Scratch<float> cq(fuse ? 0 : size_t(n) * qr), q(size_t(n) * H * cd);
    if (fuse) cq.swap(cq_pre);  // n == n_in <= 16: every row is an output row, summed alone
    else MatmulGroups(uo, w.wq_a.view(), cq.data(), groups);
    k::RmsNorm(cq.data(), w.q_norm.data, cq.data(), n, qr, c.norm_eps);
    MatmulGroups(cq.data(), w.wq_b.view(), q.data(), groups);
    RopeLayer(c, l, q.data(), n, H, cd, pos.data(), 1);

    const int ratio = c.RatioOf(l);
    std::vector<const Selection*> sel(segs.size(), nullptr);
    for (size_t i = 0; i < segs.size(); ++i) {
      Segment& sg = segs[i];
      const int cnt = (i + 1 < segs.size() ? out_off[i + 1] : n) - out_off[i];
      if (ratio == 0 || cnt == 0) continue;
      if (c.IsIndexSource(l))
        SelectEntries(m, *sg.st, l, cq.data() + size_t(out_off[i]) * qr, uo + size_t(out_off[i]) * d, sg.out_from, cnt, *sg.ctx);
      auto it = sg.ctx->topk.find(c.IndexSourceOf(l));
      if (it == sg.ctx->topk.end()) throw std::logic_error("RunLayer: no top-k from the index source of layer " + std::to_string(l));
      sel[i] = &it->second;
    }

    // Sink attention per row, then undo the rotation of the output's RoPE part: o [n, H, c]
    Scratch<float> o(size_t(n) * H * cd);
    std::vector<AttentionRow> rows(static_cast<size_t>(n));
    for (int r = 0; r < n; ++r) {
      const size_t i = size_t(seg_of[size_t(r)]);
      const Segment& sg = segs[i];
      const RowStore& win = sg.st->windows[size_t(l)];
      const int64_t t = pos[size_t(r)];
      AttentionRow& a = rows[size_t(r)];
      const int64_t lo = std::max(std::max(sg.floor, win.lo()), t - c.window + 1);
      a.n_win = int(t - lo + 1);
      a.win = win.Row(lo);
      a.pool = ratio > 0 ? sg.st->PoolOfLayer(c, l).entries.data() : nullptr;
      a.sel = sel[i] ? sel[i]->Row(t) : nullptr;
      a.n_sel = sel[i] ? sel[i]->Count(t) : 0;
    }
    AttendRows(c, rows, q.data(), w.sink.data, 1.0f / std::sqrt(float(cd)), o.data());
    RopeLayer(c, l, o.data(), n, H, cd, pos.data(), -1);

    // Grouped output: g_k = Wo_a[k] concat(o of group k) [n, R]; y = Wo_b concat(g) [n, d]
    const int G = c.o_groups, R = c.o_group_rank, gw = (H / G) * cd;
    Scratch<float> g(size_t(n) * G * R), y(size_t(n) * d);
    {
      // The G products in one pass of the thread pool (one hand-off per layer instead of G; every
      // output is the same dot product however the products are grouped into passes, so the bits
      // do not change). One row reads its groups in place; more rows gather them:
      // grp [G, n, gw] -> gk [G, n, R].
      Scratch<float> grp(n > 1 ? size_t(G) * n * gw : 0), gk(n > 1 ? size_t(G) * n * R : 0);
      std::vector<k::MatmulJob> jobs;
      for (int gi = 0; gi < G; ++gi) {
        float* xg = o.data() + size_t(gi) * gw;
        float* yg = g.data() + size_t(gi) * R;
        if (n > 1) {
          xg = grp.data() + size_t(gi) * n * gw;
          yg = gk.data() + size_t(gi) * n * R;
          for (int r = 0; r < n; ++r)
            std::copy(o.begin() + size_t(r) * H * cd + size_t(gi) * gw, o.begin() + size_t(r) * H * cd + size_t(gi + 1) * gw, xg + size_t(r) * gw);
        }
        for (size_t b = 0; b + 1 < groups.size(); ++b)  // group gi's weight [R, gw], per row group
          jobs.push_back(k::JobW(xg + size_t(groups[b]) * gw, w.wo_a.view().Rows(int64_t(gi) * R, R), yg + size_t(groups[b]) * R,
                                 groups[b + 1] - groups[b]));
      }
      k::MatmulMany(jobs.data(), int(jobs.size()));
      for (int gi = 0; gi < G && n > 1; ++gi)
        for (int r = 0; r < n; ++r)
          std::copy(gk.begin() + (size_t(gi) * n + r) * R, gk.begin() + (size_t(gi) * n + r + 1) * R, g.begin() + size_t(r) * G * R + size_t(gi) * R);
    }
    MatmulGroups(g.data(), w.wo_b.view(), y.data(), groups);

    if (hc > 1) {
      MhcSubLayerTails(m, l, out.data(), n, y.data(), groups);
    } else {
      // h <- h + y on the output rows; then the FFN sub-layer.
      k::ParallelFor(int64_t(out.size()), 1 << 15, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) out[size_t(i)] += y[size_t(i)];
      });
      Scratch<float> x(out.size());
      k::RmsNorm(out.data(), w.ffn_norm.data, x.data(), n, d, c.norm_eps);
      FfnAdd(m, l, x.data(), out.data(), n, groups);
    }
  }
  for (size_t i = 0; i < segs.size(); ++i) {
    Segment& sg = segs[i];
    const int cnt = (i + 1 < segs.size() ? out_off[i + 1] : n) - out_off[i];
    sg.first = std::min(sg.out_from, sg.first + sg.n);
    sg.n = cnt;
    sg.ctx->layer_token_units += cnt;
    if (l == c.n_layers - 1) sg.ctx->last_layer_rows += cnt;
  }
  h = std::move(out);
}

void RunLayer(const Model& m, SequenceState& st, int l, Rows& h, int64_t out_from, int64_t floor, PassContext& ctx) {
  std::vector<Segment> segs{Segment{&st, &ctx, h.first, h.n, out_from, floor}};
  RunLayerSegments(m, l, segs, h.h);
  h.first = segs[0].n > 0 ? out_from : h.end();
  h.n = segs[0].n;
}

}  // namespace cedar
