// One layer over a batch of rows on the device (device_forward.h), step for step as
// engine/forward.cpp: window entries, compressor, queries, indexer, sink attention, grouped
// output, FFN. Per-row metadata (positions, window ranges) is built on the host and uploaded
// once per layer; everything else stays on the device.
#include "engine/cuda/device_forward.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace cedar::gpu {

void DevSelection::Reset(int64_t first_pos, int n_rows, int w) {
  first = first_pos;
  width = w;
  if (size_t(n_rows) * w * sizeof(int32_t) > idx.bytes() || n_rows > rows) {
    CEDAR_GPU(idx.Allocate(std::max<size_t>(size_t(n_rows) * w, 1) * sizeof(int32_t)));
    CEDAR_GPU(count.Allocate(std::max<size_t>(size_t(n_rows), 1) * sizeof(int32_t)));
  }
  rows = n_rows;
}

void Embed(const DeviceModel& m, const int32_t* tokens, int n, int64_t first, DevRows& h) {
  const int d = m.config().dim;
  Workspace& ws = m.ws();
  h.first = first;
  h.n = n;
  float* out = h.h.Ensure(size_t(n) * d);
  if (n == 0) return;
  const int32_t* ids = UploadSmall(ws.tokens, std::vector<int32_t>(tokens, tokens + n));
  const DevWeight& e = m.embed();
  if (e.type == DType::kF32) {
    CEDAR_GPU(cu::MoeGather(e.p, DType::kF32, ids, n, d, out, m.stream()));
  } else {
    void* tmp = ws.embed_tmp.Ensure<uint16_t>(size_t(n) * d);
    CEDAR_GPU(cu::MoeGather(e.p, e.type, ids, n, d, tmp, m.stream()));
    CEDAR_GPU(cu::Convert(tmp, e.type, out, DType::kF32, int64_t(n) * d, m.stream()));
  }
}

std::vector<std::vector<float>> ComputeLogits(const DeviceModel& m, const float* h, int rows) {
  const ModelConfig& c = m.config();
  Workspace& ws = m.ws();
  float* x = ws.logits_x.Ensure(size_t(rows) * c.dim);
  float* y = ws.logits.Ensure(size_t(rows) * c.vocab_size);
  CEDAR_GPU(cu::RmsNorm(h, DType::kF32, m.norm().p, DType::kF32, x, DType::kF32, rows, c.dim, c.norm_eps, m.stream()));
  CEDAR_GPU(cu::Matmul(ws.blas, x, DType::kF32, m.head().p, m.head().type, y, DType::kF32, rows, c.dim, c.vocab_size,
                       0.0f, m.stream()));
  std::vector<float> all(size_t(rows) * c.vocab_size);
  CEDAR_GPU(cu::Synchronize(m.stream()));
  CEDAR_GPU(cu::CopyToHost(all.data(), y, all.size() * sizeof(float)));
  std::vector<std::vector<float>> out(static_cast<size_t>(rows));
  for (int r = 0; r < rows; ++r) out[size_t(r)].assign(all.begin() + size_t(r) * c.vocab_size, all.begin() + size_t(r + 1) * c.vocab_size);
  return out;
}

namespace {

// Window entries e_t = Rot(t)(RMSNorm_kv(Wkv u_t)) for rows >= the store's end (forward.cpp).
void AppendWindowEntries(const DeviceModel& m, int l, DeviceRows& store, const float* u, int64_t first, int n) {
  const ModelConfig& c = m.config();
  const DevLayer& w = m.layer(l);
  int64_t start = first;
  if (store.size() > 0 && store.hi() >= first && store.lo() <= first) start = std::max(first, store.hi());
  if (start >= first + n) return;
  const int rows = int(first + n - start), cd = c.head_dim;
  float* e = store.AppendRange(start, rows);  // [rows, c], written in place
  CEDAR_GPU(cu::Matmul(m.ws().blas, u + size_t(start - first) * c.dim, DType::kF32, w.wkv.p, w.wkv.type, e, DType::kF32,
                       rows, c.dim, cd, 0.0f, m.stream()));
  CEDAR_GPU(cu::RmsNorm(e, DType::kF32, w.kv_norm.p, DType::kF32, e, DType::kF32, rows, cd, c.norm_eps, m.stream()));
  CEDAR_GPU(cu::Rope(e, DType::kF32, rows, 1, cd, c.rope_dim, nullptr, start, 1, c.RopeBaseOf(l), 1, m.stream()));
}

void CopyRows(float* dst, const float* src, int rows, int d, cu::Stream s) {
  CEDAR_GPU(cu::CopyOnDeviceAsync(dst, src, size_t(rows) * d * sizeof(float), s));
}

}  // namespace

void RunLayerSegments(const DeviceModel& m, int l, std::vector<DevSegment>& segs, DevVec& h) {
  const ModelConfig& c = m.config();
  const DevLayer& w = m.layer(l);
  Workspace& ws = m.ws();
  const cu::Stream s = m.stream();
  const int d = c.dim, cd = c.head_dim, H = c.n_heads, qr = c.q_lora_rank;
  int n_in = 0;
  for (const DevSegment& sg : segs) {
    if (sg.out_from < sg.first) throw std::logic_error("RunLayer: out_from before the first row");
    n_in += sg.n;
  }
  // u = RMSNorm_attn(h): [n_in, d]
  float* u = ws.u.Ensure(std::max(size_t(n_in) * d, size_t(1)));
  CEDAR_GPU(cu::RmsNorm(h.get(), DType::kF32, w.attn_norm.p, DType::kF32, u, DType::kF32, n_in, d, c.norm_eps, s));
  std::vector<int> in_off(segs.size()), out_off(segs.size());
  int n = 0;
  for (size_t i = 0, r = 0; i < segs.size(); r += size_t(segs[i].n), ++i) {
    DevSegment& sg = segs[i];
    const float* us = u + r * d;
    AppendWindowEntries(m, l, sg.st->windows[size_t(l)], us, sg.first, sg.n);
    if (c.IsKvSource(l)) CompressRows(m, l, sg.st->PoolOfLayer(c, l), us, sg.first, sg.n);
    in_off[i] = int(r);
    out_off[i] = n;
    n += sg.n - int(std::min<int64_t>(sg.out_from - sg.first, sg.n));
  }
  // Output rows of every segment: uo = their u, out = their h (the residual stream).
  DevVec& out = ws.hout;  // swapped into h at the end: two buffers ping-pong across layers
  float* uo = ws.uo.Ensure(std::max(size_t(n) * d, size_t(1)));
  float* outp = out.Ensure(std::max(size_t(n) * d, size_t(1)));
  std::vector<int64_t> pos(static_cast<size_t>(n));
  for (size_t i = 0; i < segs.size(); ++i) {
    const DevSegment& sg = segs[i];
    const int off = int(std::min<int64_t>(sg.out_from - sg.first, sg.n)), cnt = sg.n - off;
    if (cnt == 0) continue;
    CopyRows(uo + size_t(out_off[i]) * d, u + size_t(in_off[i] + off) * d, cnt, d, s);
    CopyRows(outp + size_t(out_off[i]) * d, h.get() + size_t(in_off[i] + off) * d, cnt, d, s);
    for (int r = 0; r < cnt; ++r) pos[size_t(out_off[i] + r)] = sg.out_from + r;
  }
  if (n > 0) {
    const int64_t* pos_d = UploadSmall(ws.pos, pos);
    // Queries: cq = RMSNorm_q(Wq_a u) [n, q_rank]; q = Rot(p)(Wq_b cq) [n, H, c]
    float* cq = ws.cq.Ensure(size_t(n) * qr);
    float* q = ws.q.Ensure(size_t(n) * H * cd);
    CEDAR_GPU(cu::Matmul(ws.blas, uo, DType::kF32, w.wq_a.p, w.wq_a.type, cq, DType::kF32, n, d, qr, 0.0f, s));
    CEDAR_GPU(cu::RmsNorm(cq, DType::kF32, w.q_norm.p, DType::kF32, cq, DType::kF32, n, qr, c.norm_eps, s));
    CEDAR_GPU(cu::Matmul(ws.blas, cq, DType::kF32, w.wq_b.p, w.wq_b.type, q, DType::kF32, n, qr, H * cd, 0.0f, s));
    const float base = c.RopeBaseOf(l);
    CEDAR_GPU(cu::Rope(q, DType::kF32, n, H, cd, c.rope_dim, pos_d, 0, 0, base, 1, s));

    // Window range of every output row (host metadata, uploaded once).
    std::vector<int32_t> win_first(static_cast<size_t>(n)), n_win(static_cast<size_t>(n));
    for (size_t i = 0; i < segs.size(); ++i) {
      const DevSegment& sg = segs[i];
      const DeviceRows& win = sg.st->windows[size_t(l)];
      const int cnt = (i + 1 < segs.size() ? out_off[i + 1] : n) - out_off[i];
      for (int r = 0; r < cnt; ++r) {
        const int64_t t = sg.out_from + r;
        const int64_t lo = std::max(std::max(sg.floor, win.lo()), t - c.window + 1);
        win_first[size_t(out_off[i] + r)] = int32_t(win.Index(lo));
        n_win[size_t(out_off[i] + r)] = int32_t(t - lo + 1);
      }
    }
    const int32_t* win_first_d = UploadSmall(ws.win_first, win_first);
    const int32_t* n_win_d = UploadSmall(ws.n_win, n_win);

    // Indexer, then sink attention per segment (each has its own window, pool and selection).
    const int ratio = c.RatioOf(l);
    float* o = ws.o.Ensure(size_t(n) * H * cd);
    const float scale = 1.0f / std::sqrt(float(cd));
    for (size_t i = 0; i < segs.size(); ++i) {
      DevSegment& sg = segs[i];
      const int cnt = (i + 1 < segs.size() ? out_off[i + 1] : n) - out_off[i];
      if (cnt == 0) continue;
      cu::SinkAttentionArgs a;
      if (ratio > 0) {
        if (c.IsIndexSource(l))
          SelectEntries(m, *sg.st, l, cq + size_t(out_off[i]) * qr, uo + size_t(out_off[i]) * d, sg.out_from, cnt, *sg.ctx);
        auto it = sg.ctx->topk.find(c.IndexSourceOf(l));
        if (it == sg.ctx->topk.end() || !it->second.Covers(sg.out_from, cnt))
          throw std::logic_error("RunLayer: no top-k from the index source of layer " + std::to_string(l));
        a.pool = sg.st->PoolOfLayer(c, l).entries.base();
        a.sel = it->second.Row(sg.out_from);
        a.ld_sel = it->second.width;
        a.n_sel = it->second.Count(sg.out_from);
      }
      a.q = q + size_t(out_off[i]) * H * cd;
      a.out = o + size_t(out_off[i]) * H * cd;
      a.n_rows = cnt;
      a.n_heads = H;
      a.dim = cd;
      a.entry_type = DType::kF32;
      a.win = sg.st->windows[size_t(l)].base();
      a.win_first = win_first_d + out_off[i];
      a.n_win = n_win_d + out_off[i];
      a.sink = w.sink.f32();
      a.scale = scale;
      for (int r0 = 0; r0 < cnt; r0 += 65535) {  // the kernel's grid limit on rows
        cu::SinkAttentionArgs b = a;
        b.n_rows = std::min(65535, cnt - r0);
        b.q += size_t(r0) * H * cd, b.out += size_t(r0) * H * cd, b.win_first += r0, b.n_win += r0;
        if (b.sel) b.sel += size_t(r0) * b.ld_sel, b.n_sel += r0;
        CEDAR_GPU(cu::SinkAttention(b, s));
      }
    }
    // Undo the rotation of the output's RoPE part: o [n, H, c]
    CEDAR_GPU(cu::Rope(o, DType::kF32, n, H, cd, c.rope_dim, pos_d, 0, 0, base, -1, s));

    // Grouped output: g_k = Wo_a[k] concat(o of group k) [n, G·R]; h += Wo_b g
    const int G = c.o_groups, R = c.o_group_rank, gw = (H / G) * cd;
    float* g = ws.g.Ensure(size_t(n) * G * R);
    CEDAR_GPU(cu::GroupedMatmul(ws.blas, o, DType::kF32, w.wo_a.p, w.wo_a.type, g, DType::kF32, n, G, gw, R, 0.0f, s));
    CEDAR_GPU(cu::Matmul(ws.blas, g, DType::kF32, w.wo_b.p, w.wo_b.type, outp, DType::kF32, n, G * R, d, 1.0f, s));

    // FFN sub-layer on x = RMSNorm_ffn(h); it adds onto h.
    float* x = ws.x.Ensure(size_t(n) * d);
    CEDAR_GPU(cu::RmsNorm(outp, DType::kF32, w.ffn_norm.p, DType::kF32, x, DType::kF32, n, d, c.norm_eps, s));
    FfnAdd(m, l, x, outp, n);
  }
  for (size_t i = 0; i < segs.size(); ++i) {
    DevSegment& sg = segs[i];
    const int cnt = (i + 1 < segs.size() ? out_off[i + 1] : n) - out_off[i];
    sg.first = std::min(sg.out_from, sg.first + sg.n);
    sg.n = cnt;
    sg.ctx->layer_token_units += cnt;
    if (l == c.n_layers - 1) sg.ctx->last_layer_rows += cnt;
  }
  h.swap(out);
}

void RunLayer(const DeviceModel& m, DeviceState& st, int l, DevRows& h, int64_t out_from, int64_t floor,
              DevPassContext& ctx) {
  std::vector<DevSegment> segs{DevSegment{&st, &ctx, h.first, h.n, out_from, floor}};
  RunLayerSegments(m, l, segs, h.h);
  h.first = segs[0].n > 0 ? out_from : h.end();
  h.n = segs[0].n;
}

}  // namespace cedar::gpu
