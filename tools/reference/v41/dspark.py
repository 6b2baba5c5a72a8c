"""The DSpark drafter of DeepSeek-V4.1-Flash (mtp.S.*), float64, from the equations of
docs/v41-contract.md §10 (not from engine/dspark.cpp). It reads a model folder in the released
layout through the reference model (model.py, v41/checkpoint.py) and writes golden draft logits.

Equations (contract §10, with their sources there):
  context    c_t = RMSNorm_main(main_proj · concat_j mean_streams(X entering target layer T_j, row t))
             for the positions t < p0 the target has processed, the last `window` of them;
  block      rows [anchor, noise × (block_size - 1)] at positions p0 .. p0 + block_size - 1,
             embedded as the backbone embeds (e in every stream, pre-mix (1, 0, ..));
  stage S    per row: u = RMSNorm_attn(collapse(X, a)); keys = values = Rot(t)(RMSNorm_kv(wkv ·)) of the
             context rows (t < p0) and of every block row (non-causal), stored as the backbone's window
             rows (FP8 E4M3 + UE8M0 per 32 under released KV); q = Rot(p)(wq_b RMSNorm_q(wq_a u));
             sink attention; Rot(-p) on the output; grouped wo_a; wo_b; the stage's mHC coefficients
             (hc_attn_*, then hc_ffn_* from the updated streams, the FFN input collapsed with the
             attention's pre, the FFN's pre carried); MoE over the stage's own bank (the backbone's
             router score, selection bias, norm_topk_prob, route scale, clamped SwiGLU, shared expert);
  head       h_i = collapse(X_i, a_i); U_i = head(RMSNorm_norm(h_i)) for rows i < k (row i drafts token
             i + 1); logits_i = U_i + markov_head · markov_embed[x_{i-1}] (x_0 = anchor); greedy
             x_i = argmax logits_i (ties to the lower id).

  /usr/bin/python3 tools/reference/v41/dspark.py --model tests/golden/v41_dspark
writes <model>/dspark_golden.safetensors: prompt [N] i32, anchor [1] i32, drafts [k] i32,
draft_logits [k, V] f32, base_logits [k, V] f32, with the decision margins in the metadata.
"""
import argparse
import json
import math
import os
import sys

import torch
import torch.nn.functional as F

# The reference's folder first (model.py appends v41/ itself, last: v41/config.py must not shadow
# ../config.py), so this file's own folder leaves the front of the path.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
sys.path.insert(0, os.path.dirname(_HERE))

from model import Model, PassCtx, SeqState, rms_norm  # noqa: E402
import checkpoint  # noqa: E402  (v41/, on the path through model.py)
import mhc  # noqa: E402
import quant  # noqa: E402
import safetensors_io  # noqa: E402
import write_released  # noqa: E402


class DSpark:
    def __init__(self, folder):
        cfg, tensors = write_released.load_released(folder, with_dspark=True)  # the backbone
        self.model = Model(cfg, tensors, torch.float64)
        self.cfg = self.model.cfg
        with open(os.path.join(folder, "config.json"), encoding="utf-8") as f:
            j = json.load(f)
        t = j.get("text_config", j)
        self.n_stages = t["num_nextn_predict_layers"]
        if self.n_stages <= 0:
            raise ValueError(f"{folder}: num_nextn_predict_layers is {self.n_stages}: no DSpark drafter")
        self.targets = list(t["dspark_target_layer_ids"])
        self.block = t["dspark_block_size"]
        self.noise = t["dspark_noise_token_id"]
        self.n_experts = t["dspark_n_routed_experts"]
        self.top = t["dspark_num_experts_per_tok"]
        ck = checkpoint.Checkpoint(folder)
        self.w = {n: ck.tensor(n) for n in ck.weight_map if n.startswith("mtp.")}
        # the stages' RoPE table: a ratio-0 (sliding-window-only) layer's, plain rope_theta
        self.rope_layer = next(l for l in range(self.cfg.L) if self.cfg.ratio(l) == 0)
        self.min_gap = math.inf  # smallest relative expert-selection margin in the drafter

    def W(self, s, name):
        return self.w[f"mtp.{s}.{name}"]

    # ---- the target's hidden states ----
    def prefill_capture(self, st, tokens):
        """model.prefill_full with the residual rows entering each target layer kept: (logits, {T: {p: row}})."""
        m, c = self.model, self.cfg
        ctx = PassCtx()
        rows, h = m._append_tokens(st, tokens)
        taps = {}
        for l in range(c.L):
            if l == c.E:
                for p in rows:
                    st.H_E[p] = h[p]
            if l in m.engram:
                h = m.engram_add(st, l, dict(h), rows)
            if l in self.targets:
                taps[l] = dict(h)  # the stream entering layer l (after its Engram, if any)
            m.layer_write(st, l, h, rows)
            h = m.layer_attend(st, l, h, rows, 0, ctx)
        return m.logits(h[rows[-1]]), taps

    def context(self, taps, positions):
        """{t: c_t}: RMSNorm_main(main_proj · concat_j mean over the hc streams of X_j(t))."""
        d, hc = self.cfg.dim, self.model.hc
        out = {}
        for t in positions:
            parts = []
            for T in self.targets:
                X = taps[T][t][:hc * d].reshape(hc, d)
                parts.append(X.mean(0))
            y = self.W(0, "main_proj.weight") @ torch.cat(parts)
            out[t] = rms_norm(y, self.W(0, "main_norm.weight"), self.cfg.norm_eps)
        return out

    # ---- one stage ----
    def kv_row(self, s, x, pos):
        e = rms_norm(self.W(s, "attn.wkv.weight") @ x, self.W(s, "attn.kv_norm.weight"), self.cfg.norm_eps)
        return self.model._stored(self.model.rope(e, pos, self.rope_layer), quant.qdq_fp8_ue8m0)

    def ffn(self, s, u):
        c, r = self.cfg, self.cfg.released
        z = self.W(s, "ffn.gate.weight") @ u
        if r["score_func"] == "sqrtsoftplus":
            sc = torch.sqrt(F.softplus(z))
        elif r["score_func"] == "sigmoid":
            sc = torch.sigmoid(z)
        else:
            sc = torch.softmax(z, dim=0)
        choose = sc + self.W(s, "ffn.gate.bias")
        order = sorted(range(self.n_experts), key=lambda e: (-float(choose[e]), e))
        chosen = order[:self.top]
        if self.top < self.n_experts:
            g = float(choose[order[self.top - 1]] - choose[order[self.top]]) / max(float(choose.abs().max()), 1e-30)
            self.min_gap = min(self.min_gap, g)
        tot = sum(sc[e] for e in chosen)

        def swiglu(prefix):
            a = self.W(s, prefix + "w1.weight") @ u
            b = self.W(s, prefix + "w3.weight") @ u
            if c.swiglu_limit > 0:
                a = torch.clamp(a, max=c.swiglu_limit)
                b = torch.clamp(b, -c.swiglu_limit, c.swiglu_limit)
            return self.W(s, prefix + "w2.weight") @ (F.silu(a) * b)

        y = torch.zeros_like(u)
        for e in chosen:
            omega = c.route_scale * sc[e] / tot if r["norm_topk_prob"] else c.route_scale * sc[e]
            y = y + omega * swiglu(f"ffn.experts.{e}.")
        if f"mtp.{s}.ffn.shared_experts.w1.weight" in self.w:
            y = y + swiglu("ffn.shared_experts.")
        return y

    def stage(self, s, X, a, ctx, p0):
        """X [nb] streams [hc, d], a [nb] pre-mixes -> the stage's output (X, a)."""
        c, m = self.cfg, self.model
        hc, r = m.hc, c.released
        nb = len(X)
        hcp = lambda which: (self.W(s, f"hc_{which}_fn"), self.W(s, f"hc_{which}_scale"), self.W(s, f"hc_{which}_base"))
        u = [rms_norm(mhc.collapse(X[i], a[i]), self.W(s, "attn_norm.weight"), c.norm_eps) for i in range(nb)]
        lo = p0 - c.window
        keys = [self.kv_row(s, ctx[t], t) for t in sorted(ctx) if lo <= t < p0]
        keys += [self.kv_row(s, u[i], p0 + i) for i in range(nb)]  # every block row: non-causal
        outX, outA = [], []
        for i in range(nb):
            p = p0 + i
            pre, post, comb = mhc.hc_coeffs(X[i], *hcp("attn"), hc, r["hc_sinkhorn_iters"], r["hc_eps"], c.norm_eps)
            cq = rms_norm(self.W(s, "attn.wq_a.weight") @ u[i], self.W(s, "attn.q_norm.weight"), c.norm_eps)
            q = m.rope((self.W(s, "attn.wq_b.weight") @ cq).view(c.n_heads, c.head_dim), p, self.rope_layer)
            o = m.sink_attention(q, keys, self.W(s, "attn.attn_sink"))
            o = m.rope(o, -p, self.rope_layer)
            hpg = c.n_heads // c.o_groups
            wo_a = self.W(s, "attn.wo_a.weight").reshape(c.o_groups, c.o_group_rank, -1)
            g = torch.cat([wo_a[k] @ o[k * hpg:(k + 1) * hpg].reshape(-1) for k in range(c.o_groups)])
            Xi = mhc.stream_update(X[i], self.W(s, "attn.wo_b.weight") @ g, post, comb)
            pre_f, post_f, comb_f = mhc.hc_coeffs(Xi, *hcp("ffn"), hc, r["hc_sinkhorn_iters"], r["hc_eps"], c.norm_eps)
            y = self.ffn(s, rms_norm(mhc.collapse(Xi, pre), self.W(s, "ffn_norm.weight"), c.norm_eps))
            outX.append(mhc.stream_update(Xi, y, post_f, comb_f))
            outA.append(pre_f)
        return outX, outA

    def draft(self, ctx, anchor, p0, k):
        """(drafts [k], draft logits [k, V], base logits [k, V], logit margins [k])."""
        m, c = self.model, self.cfg
        ids = [anchor] + [self.noise] * (self.block - 1)
        X, a = [], []
        for t in ids:
            Xi, ai = m.split(m.embed(t))
            X.append(Xi)
            a.append(ai)
        for s in range(self.n_stages):
            X, a = self.stage(s, X, a, ctx, p0)
        last = self.n_stages - 1
        drafts, logits, base, margins = [], [], [], []
        prev = anchor
        for i in range(min(k, self.block)):
            h = mhc.collapse(X[i], a[i])
            U = m.w["head.weight"] @ rms_norm(h, self.W(last, "norm.weight"), c.norm_eps)
            bias = self.W(last, "markov_head.head.weight") @ self.W(last, "markov_head.embed.weight")[prev]
            z = U + bias
            top2 = torch.topk(z, 2).values
            margins.append(float(top2[0] - top2[1]) / max(float(z.abs().max()), 1e-30))
            prev = int(torch.argmax(z))
            drafts.append(prev)
            logits.append(z)
            base.append(U)
        return drafts, torch.stack(logits), torch.stack(base), margins


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="model folder in the released layout, with mtp.* tensors")
    ap.add_argument("--out", help="golden file (default: <model>/dspark_golden.safetensors)")
    ap.add_argument("--prompt-len", type=int, default=13, help="prompt tokens (more than the window: the context is cut)")
    ap.add_argument("--seed", type=int, default=21, help="seeds the prompt")
    ap.add_argument("--check", action="store_true", help="compare with the existing golden file instead of writing it")
    a = ap.parse_args()
    ds = DSpark(a.model)
    c = ds.cfg
    g = torch.Generator().manual_seed(a.seed)
    prompt = torch.randint(0, c.vocab_size, (a.prompt_len,), generator=g).tolist()
    st = SeqState(c)
    logits, taps = ds.prefill_capture(st, prompt)
    N = len(prompt)
    ctx = ds.context(taps, range(max(0, N - c.window), N))
    anchor = int(torch.argmax(logits))
    top2 = torch.topk(logits, 2).values
    anchor_margin = float(top2[0] - top2[1]) / float(logits.abs().max())
    drafts, dl, bl, margins = ds.draft(ctx, anchor, N, ds.block)
    km = ds.model.kv_margins
    meta = {
        "generator": "tools/reference/v41/dspark.py",
        "compute_dtype": "float64",
        "prompt_seed": str(a.seed),
        "context_rows": str(len(ctx)),
        "block_size": str(ds.block),
        "min_expert_margin": f"{ds.min_gap:.3e}",
        "min_draft_logit_margin": f"{min(margins):.3e}",
        "anchor_logit_margin": f"{anchor_margin:.3e}",
        "kv_rounding_min_margin": f"{km.min:.3e}",
        "kv_rounding_near_ties": f"{km.near} of {km.count} (margin < {km.NEAR:.0e})",
    }
    out = {
        "prompt": torch.tensor(prompt, dtype=torch.int32),
        "anchor": torch.tensor([anchor], dtype=torch.int32),
        "drafts": torch.tensor(drafts, dtype=torch.int32),
        "draft_logits": dl.to(torch.float32).contiguous(),
        "base_logits": bl.to(torch.float32).contiguous(),
    }
    path = a.out or os.path.join(a.model, "dspark_golden.safetensors")
    if a.check:  # the committed golden is what this reference computes from the committed model
        have, _ = safetensors_io.load(path)
        bad = [k for k in out if k not in have or not torch.equal(have[k].to(out[k].dtype), out[k])]
        print(json.dumps({"check": path, "mismatched": bad}))
        sys.exit(1 if bad else 0)
    safetensors_io.save(path, out, meta)
    print(json.dumps({"out": path, "drafts": drafts, "anchor": anchor, **meta}))


if __name__ == "__main__":
    main()
