// The FFN sub-layer on the device (spec §3 FFN), as engine/ffn.cpp: route, group the chosen
// (row, expert) pairs by expert, gather, one stacked W1‖W3 product + SwiGLU + W2 product per
// expert over its rows, weighted scatter-add onto h; then the shared expert (or the dense FFN)
// with its W2 product accumulating onto h (beta = 1). The expert offsets are read back once
// per layer to size the per-expert products (a grouped GEMM would avoid that wait: later).
#include <algorithm>

#include "engine/cuda/device_forward.h"

namespace cedar::gpu {

namespace {

// out[n, d] (+)= W2 · SwiGLU(W1 x, W3 x) for one FFN; beta 1 accumulates onto out.
void RunFfn(const DeviceModel& m, const DevFfn& f, const float* x, int n, float* out, float beta) {
  const ModelConfig& c = m.config();
  Workspace& ws = m.ws();
  const cu::Stream s = m.stream();
  const int d = c.dim, inter = c.moe_inter_dim;
  float* t13 = ws.t13.Ensure(size_t(n) * 2 * inter);  // [n, 2·inter]: W1 x ‖ W3 x
  float* act = ws.act.Ensure(size_t(n) * inter);      // [n, inter]
  CEDAR_GPU(cu::Matmul(ws.blas, x, DType::kF32, f.w13.p, f.w13.type, t13, DType::kF32, n, d, 2 * inter, 0.0f, s));
  CEDAR_GPU(cu::SwiGLU(t13, t13 + inter, DType::kF32, act, DType::kF32, n, inter, 2 * inter, inter, c.swiglu_limit, s));
  CEDAR_GPU(cu::Matmul(ws.blas, act, DType::kF32, f.w2.p, f.w2.type, out, DType::kF32, n, inter, d, beta, s));
}

}  // namespace

void FfnAdd(const DeviceModel& m, int l, const float* x, float* h, int n) {
  const ModelConfig& c = m.config();
  const DevLayer& w = m.layer(l);
  Workspace& ws = m.ws();
  const cu::Stream s = m.stream();
  if (n <= 0) return;
  if (c.n_routed_experts == 0) {
    RunFfn(m, w.dense, x, n, h, 1.0f);
    return;
  }
  const int ne = c.n_routed_experts, k = c.experts_per_token, d = c.dim;
  float* logits = ws.gate.Ensure(size_t(n) * ne);  // [n, n_experts]
  CEDAR_GPU(cu::Matmul(ws.blas, x, DType::kF32, w.gate.p, w.gate.type, logits, DType::kF32, n, d, ne, 0.0f, s));
  int32_t* experts = ws.experts.Ensure<int32_t>(size_t(n) * k);  // [n, k]
  float* weights = ws.weights.Ensure(size_t(n) * k);             // [n, k]
  CEDAR_GPU(cu::MoeRoute(logits, w.gate_bias.f32(), n, ne, k, c.route_scale, experts, weights, s));
  int32_t* counts = ws.counts.Ensure<int32_t>(size_t(ne));
  int32_t* offsets = ws.offsets.Ensure<int32_t>(size_t(ne) + 1);
  int32_t* rows = ws.rows.Ensure<int32_t>(size_t(n) * k);
  int32_t* position = ws.position.Ensure<int32_t>(size_t(n) * k);
  CEDAR_GPU(cu::MoeGroup(experts, n, ne, k, counts, offsets, rows, position, s));
  float* xg = ws.xg.Ensure(size_t(n) * k * d);  // [n·k, d] rows in expert order
  float* yg = ws.yg.Ensure(size_t(n) * k * d);  // [n·k, d] their expert outputs
  CEDAR_GPU(cu::MoeGather(x, DType::kF32, rows, n * k, d, xg, s));
  std::vector<int32_t> off(size_t(ne) + 1);
  CEDAR_GPU(cu::Synchronize(s));
  CEDAR_GPU(cu::CopyToHost(off.data(), offsets, off.size() * sizeof(int32_t)));
  for (int e = 0; e < ne; ++e) {
    const int cnt = off[size_t(e) + 1] - off[size_t(e)];
    if (cnt > 0) RunFfn(m, w.experts[size_t(e)], xg + size_t(off[size_t(e)]) * d, cnt, yg + size_t(off[size_t(e)]) * d, 0.0f);
  }
  CEDAR_GPU(cu::MoeScatterAdd(yg, DType::kF32, position, weights, n, k, d, h, s));
  if (c.n_shared_experts == 1) RunFfn(m, w.shared, x, n, h, 1.0f);
}

}  // namespace cedar::gpu
