#include "engine/dspark.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>

#include "engine/attention.h"
#include "engine/expert_cache.h"
#include "engine/forward.h"
#include "engine/kv_precision.h"
#include "engine/mhc.h"
#include "engine/rope.h"
#include "kernels/ops.h"

namespace cedar {

namespace k = kernels;

namespace {

float Softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

// The stage's MoE (its own bank of ds.n_experts, top ds.experts_per_token, the backbone's router
// function, bias, norm_topk_prob, route scale and clamped SwiGLU; engine/ffn.cpp's equations):
// adds FFN(x) [n, d] to h [n, d].
void StageFfnAdd(const Model& m, int stage, const DSparkWeights& ds, const LayerWeights& w, const float* x, float* h, int n) {
  const ModelConfig& c = m.config();
  const int ne = ds.n_experts, kk = ds.experts_per_token, d = c.dim, inter = c.moe_inter_dim;
  std::vector<float> s(size_t(n) * ne);  // [n, ne]
  k::MatmulW(x, w.gate.view(), s.data(), n);  // F32, or the released router's BF16 (engine/v41_held.h)
  auto run = [&](const FfnWeights& f, const float* xr, float* hr, float weight) {
    std::vector<float> g(static_cast<size_t>(inter)), up(static_cast<size_t>(inter)), y(static_cast<size_t>(d));
    k::MatmulW(xr, f.w1.view(), g.data(), 1);
    k::MatmulW(xr, f.w3.view(), up.data(), 1);
    k::SwiGLU(g.data(), up.data(), g.data(), inter, c.swiglu_limit);
    k::MatmulW(g.data(), f.w2.view(), y.data(), 1);
    for (int i = 0; i < d; ++i) hr[i] += weight * y[size_t(i)];
  };
  std::vector<int32_t> order(static_cast<size_t>(ne));
  std::vector<float> choice(static_cast<size_t>(ne));
  for (int r = 0; r < n; ++r) {
    float* sr = s.data() + size_t(r) * ne;
    if (c.score_func == "sigmoid") {
      for (int e = 0; e < ne; ++e) sr[e] = 1.0f / (1.0f + std::exp(-sr[e]));
    } else if (c.score_func == "softmax") {
      const float mx = *std::max_element(sr, sr + ne);
      double sum = 0;
      for (int e = 0; e < ne; ++e) sum += (sr[e] = std::exp(sr[e] - mx));
      for (int e = 0; e < ne; ++e) sr[e] = float(sr[e] / sum);
    } else {
      for (int e = 0; e < ne; ++e) sr[e] = std::sqrt(Softplus(sr[e]));
    }
    for (int e = 0; e < ne; ++e) choice[size_t(e)] = sr[e] + w.gate_bias.data[e];
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return choice[size_t(a)] > choice[size_t(b)]; });
    float sum = 0;
    for (int j = 0; j < kk; ++j) sum += sr[order[size_t(j)]];
    const float* xr = x + size_t(r) * d;
    float* hr = h + size_t(r) * d;
    for (int j = 0; j < kk; ++j) {
      const int e = order[size_t(j)];
      // Resident, or (experts on demand, --max-ram) read through the model's cache as layer L + stage.
      const ExpertRef ref = m.expert_cache() ? m.expert_cache()->Get(c.n_layers + stage, e) : ExpertRef{&w.experts[size_t(e)], nullptr};
      run(*ref.f, xr, hr, c.norm_topk_prob ? c.route_scale * sr[e] / (sum + 1e-20f) : c.route_scale * sr[e]);
    }
    if (w.shared.w1.present()) run(w.shared, xr, hr, 1.0f);
  }
}

}  // namespace

DSparkDrafter::DSparkDrafter(const Model& m) : m_(m), w_(*[&]() {
  if (!m.dspark()) throw std::invalid_argument("speculative decoding: model " + m.dir() + " has no DSpark drafter (mtp.* tensors, num_nextn_predict_layers 0)");
  return m.dspark();
}()), ctx_(m.config().dim) {
  const ModelConfig& c = m.config();
  rope_layer_ = -1;
  for (int l = 0; l < c.n_layers && rope_layer_ < 0; ++l)
    if (c.RatioOf(l) == 0) rope_layer_ = l;
  if (w_.noise_token < 0 || w_.noise_token >= c.vocab_size)
    throw std::invalid_argument("DSpark: model " + m.dir() + ": dspark_noise_token_id " + std::to_string(w_.noise_token) +
                                " lies outside the vocabulary [0, " + std::to_string(c.vocab_size) + ")");
  if (rope_layer_ < 0) throw std::invalid_argument("DSpark: the model has no sliding-window-only layer whose RoPE table the stages share");
  // The context taps the stream ENTERING each target layer (§10): the output of the layer before,
  // which equals it unless the target layer starts with an Engram update.
  for (int t : w_.target_layers) {
    if (t < 1) throw std::invalid_argument("DSpark: model " + m.dir() + ": dspark_target_layer_ids: the tap before layer 0 is the embedding; expected layers >= 1, found " + std::to_string(t));
    if (std::find(c.engram_layers.begin(), c.engram_layers.end(), t) != c.engram_layers.end())
      throw std::invalid_argument("DSpark: model " + m.dir() + ": dspark_target_layer_ids: layer " + std::to_string(t) +
                                  " has an Engram, whose output (the tapped stream) the forward does not expose");
  }
}

std::vector<int> DSparkDrafter::HiddenLayers() const {
  std::vector<int> out;
  for (int t : w_.target_layers) out.push_back(t - 1);  // rows leaving t - 1 = rows entering t
  return out;
}

void DSparkDrafter::Observe(int64_t first, int64_t keep, const std::vector<std::vector<float>>& hidden) {
  const ModelConfig& c = m_.config();
  const int d = c.dim, rw = c.ResidualWidth(), nt = int(w_.target_layers.size());
  if (int(hidden.size()) != nt) return;
  std::vector<float> cat(size_t(keep) * nt * d), y(size_t(keep) * d);  // [keep, nt*d], [keep, d]
  for (int j = 0; j < nt; ++j)
    for (int64_t r = 0; r < keep; ++r) {
      const float* row = hidden[size_t(j)].data() + size_t(r) * rw;
      float* dst = cat.data() + size_t(r) * nt * d + size_t(j) * d;
      // The mean of the hc streams X [hc, d] (not the pre-mix collapse): §10, DS-MLX / DS-RS.
      std::fill(dst, dst + d, 0.0f);
      for (int sidx = 0; sidx < c.hc_mult; ++sidx)
        for (int i = 0; i < d; ++i) dst[i] += row[size_t(sidx) * d + i];
      if (c.hc_mult > 1)
        for (int i = 0; i < d; ++i) dst[i] /= float(c.hc_mult);
    }
  k::MatmulW(cat.data(), w_.main_proj.view(), y.data(), int(keep));
  k::RmsNorm(y.data(), w_.main_norm.data, y.data(), int(keep), d, c.norm_eps);
  for (int64_t r = 0; r < keep; ++r) std::copy(y.begin() + r * d, y.begin() + (r + 1) * d, ctx_.Append(first + r));
  ctx_.DropBefore(first + keep - c.window);
}

void DSparkDrafter::Stage(int s, std::vector<float>& x, int nb, int64_t p0) const {
  const ModelConfig& c = m_.config();
  const LayerWeights& w = w_.stages[size_t(s)];
  const int d = c.dim, cd = c.head_dim, H = c.n_heads, qr = c.q_lora_rank, hc = c.hc_mult;
  // u = RMSNorm_attn(collapse(x)) [nb, d]
  std::vector<float> u(size_t(nb) * d);
  if (hc > 1) HcCollapseRows(x.data(), nb, hc, d, u.data());
  else std::copy(x.begin(), x.end(), u.begin());
  k::RmsNorm(u.data(), w.attn_norm.data, u.data(), nb, d, c.norm_eps);
  // Keys/values: the context rows (stage 0's projected target states, the same rows for every
  // stage) of the `window` positions before p0, then the block rows; one shared latent per row [*, c].
  const int64_t lo = std::max(ctx_.lo(), p0 - c.window);
  const int n_ctx = int(std::max<int64_t>(0, std::min(ctx_.hi(), p0) - lo));
  const int nk = n_ctx + nb;
  std::vector<float> src(size_t(nk) * d), kv(size_t(nk) * cd);
  for (int r = 0; r < n_ctx; ++r) std::copy(ctx_.Row(lo + r), ctx_.Row(lo + r) + d, src.begin() + size_t(r) * d);
  std::copy(u.begin(), u.end(), src.begin() + size_t(n_ctx) * d);
  k::MatmulW(src.data(), w.wkv.view(), kv.data(), nk);
  k::RmsNorm(kv.data(), w.kv_norm.data, kv.data(), nk, cd, c.norm_eps);
  std::vector<int64_t> kpos(static_cast<size_t>(nk)), qpos(static_cast<size_t>(nb));
  for (int r = 0; r < n_ctx; ++r) kpos[size_t(r)] = lo + r;
  for (int r = 0; r < nb; ++r) kpos[size_t(n_ctx + r)] = qpos[size_t(r)] = p0 + r;
  RopeLayer(c, rope_layer_, kv.data(), nk, 1, cd, kpos.data(), 1);
  RoundWindowEntries(c, kv.data(), nk);  // stored as the backbone's window rows (FP8 under released KV)
  // Queries of the block rows; every row sees every key (non-causal inside the block).
  std::vector<float> cq(size_t(nb) * qr), q(size_t(nb) * H * cd), o(size_t(nb) * H * cd);
  k::MatmulW(u.data(), w.wq_a.view(), cq.data(), nb);
  k::RmsNorm(cq.data(), w.q_norm.data, cq.data(), nb, qr, c.norm_eps);
  k::MatmulW(cq.data(), w.wq_b.view(), q.data(), nb);
  RopeLayer(c, rope_layer_, q.data(), nb, H, cd, qpos.data(), 1);
  std::vector<AttentionRow> rows(static_cast<size_t>(nb));
  for (AttentionRow& a : rows) {
    a.win = kv.data();
    a.n_win = nk;
  }
  AttendRows(c, rows, q.data(), w.sink.data, 1.0f / std::sqrt(float(cd)), o.data());
  RopeLayer(c, rope_layer_, o.data(), nb, H, cd, qpos.data(), -1);
  const int G = c.o_groups, R = c.o_group_rank, gw = (H / G) * cd;
  std::vector<float> grp(size_t(nb) * gw), g(size_t(nb) * G * R), gk(size_t(nb) * R), y(size_t(nb) * d);
  for (int gi = 0; gi < G; ++gi) {
    for (int r = 0; r < nb; ++r)
      std::copy(o.begin() + size_t(r) * H * cd + size_t(gi) * gw, o.begin() + size_t(r) * H * cd + size_t(gi + 1) * gw, grp.begin() + size_t(r) * gw);
    k::MatmulW(grp.data(), w.wo_a.view().Rows(int64_t(gi) * R, R), gk.data(), nb);  // group gi: [R, gw]
    for (int r = 0; r < nb; ++r) std::copy(gk.begin() + size_t(r) * R, gk.begin() + size_t(r + 1) * R, g.begin() + size_t(r) * G * R + size_t(gi) * R);
  }
  k::MatmulW(g.data(), w.wo_b.view(), y.data(), nb);
  // Residual updates: mHC as the backbone (engine/mhc.h) with the stage's coefficients, or a sum.
  std::vector<float> xf(size_t(nb) * d), f(size_t(nb) * d, 0.0f);
  if (hc > 1) {
    HcCoeffs ka, kf;
    HcCoefficients(c, HcParams{w.hc_attn_fn, w.hc_attn_base, w.hc_attn_scale}, x.data(), nb, &ka);
    HcUpdateRows(x.data(), nb, hc, d, y.data(), ka);
    HcCoefficients(c, HcParams{w.hc_ffn_fn, w.hc_ffn_base, w.hc_ffn_scale}, x.data(), nb, &kf);
    HcCollapseRows(x.data(), nb, hc, d, xf.data());
    k::RmsNorm(xf.data(), w.ffn_norm.data, xf.data(), nb, d, c.norm_eps);
    StageFfnAdd(m_, s, w_, w, xf.data(), f.data(), nb);
    HcUpdateRows(x.data(), nb, hc, d, f.data(), kf);
  } else {
    for (size_t i = 0; i < x.size(); ++i) x[i] += y[i];
    k::RmsNorm(x.data(), w.ffn_norm.data, xf.data(), nb, d, c.norm_eps);
    StageFfnAdd(m_, s, w_, w, xf.data(), x.data(), nb);
  }
}

void DSparkDrafter::Propose(const SequenceState& st, int32_t anchor, int k, const SamplingParams& sp, std::mt19937_64& rng,
                            std::vector<int32_t>* drafts, std::vector<std::vector<double>>* q) {
  const ModelConfig& c = m_.config();
  const int d = c.dim, rw = c.ResidualWidth(), V = c.vocab_size, rank = w_.rank;
  k = std::min(k, w_.block_size);
  drafts->clear();
  if (q) q->clear();
  confidence_.clear();
  base_.clear();
  logits_.clear();
  if (k <= 0) return;
  // The block: always dspark_block_size rows, the anchor at st.pos then noise rows (attention is
  // non-causal inside the block, so its length matters); row i's output gives draft i + 1.
  const int nb = w_.block_size;
  const int64_t p0 = st.pos;
  std::vector<int32_t> ids(size_t(nb), w_.noise_token);
  ids[0] = anchor;
  std::vector<float> x(size_t(nb) * rw);
  for (int r = 0; r < nb; ++r) EmbedRow(m_, ids[size_t(r)], x.data() + size_t(r) * rw);
  for (int s = 0; s < int(w_.stages.size()); ++s) Stage(s, x, nb, p0);
  // h_i = collapse(x_i) [nb, d]; base logits U_i = head(RMSNorm_out(h_i)) of the first k rows [k, V].
  std::vector<float> hid(size_t(nb) * d), normed(size_t(nb) * d);
  if (c.hc_mult > 1) HcCollapseRows(x.data(), nb, c.hc_mult, d, hid.data());
  else std::copy(x.begin(), x.end(), hid.begin());
  k::RmsNorm(hid.data(), w_.norm.data, normed.data(), nb, d, c.norm_eps);
  std::vector<float> U(size_t(k) * V);
  k::MatmulW(normed.data(), m_.head().view(), U.data(), k);
  // Sequential Markov head: logits_i = U_i + markov_head · markov_embed[previous token].
  std::vector<float> e(static_cast<size_t>(rank)), bias(static_cast<size_t>(V)), conf_in(size_t(d + rank));
  int32_t prev = anchor;
  for (int i = 0; i < k; ++i) {
    std::copy(w_.markov_embed.data + size_t(prev) * rank, w_.markov_embed.data + size_t(prev + 1) * rank, e.begin());
    k::MatmulW(e.data(), w_.markov_head.view(), bias.data(), 1);
    std::vector<float> logits(U.begin() + size_t(i) * V, U.begin() + size_t(i + 1) * V);
    base_.push_back(logits);
    for (int v = 0; v < V; ++v) logits[size_t(v)] += bias[size_t(v)];
    logits_.push_back(logits);
    // Confidence: sigmoid(proj · [h_i before the final norm, markov embedding of the previous token]).
    std::copy(hid.begin() + size_t(i) * d, hid.begin() + size_t(i + 1) * d, conf_in.begin());
    std::copy(e.begin(), e.end(), conf_in.begin() + d);
    float z = 0;
    k::MatmulW(conf_in.data(), w_.confidence.view(), &z, 1);
    confidence_.push_back(1.0f / (1.0f + std::exp(-z)));
    int32_t t;
    if (sp.temperature <= 0.0f) {
      t = Argmax(logits);
    } else {
      std::vector<double> qi = SamplingProbs(logits, sp);
      t = SampleFrom(qi, rng);
      if (q) q->push_back(std::move(qi));
    }
    drafts->push_back(t);
    prev = t;
  }
  spdlog::debug("dspark at {}: {} drafts, context rows {}", p0, k, ctx_.size());
}

}  // namespace cedar
