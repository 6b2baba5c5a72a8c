"""Batched (vectorised over a sequence) CED forward for training and evaluation.

Same math as the row-by-row reference (`tools/reference/model.py`, spec
`shared/spec/ced-model.md`, readings in `docs/spec-readings.md`), computed for a whole batch
of sequences [B, T] at once, differentiable. It covers `full` mode and the simulations the
trainer and `bench/quality` need, expressed as per-layer, per-row window floors:

  * `full`: every floor 0.
  * Decoder SWA Bounded Replay of a prefix n, then teacher-forced decode (spec §5): decoder
    layers after E get floor n-R (R = min(W, n)) for every row >= n-R; rows n-R..n-1 are the
    replayed rows, row n-1 gives the prefill's logits, rows >= n are decode rows (decode sees
    only the decoder window entries that exist, i.e. rows >= n-R). The paper's variant also
    truncates layer E's window for the replayed rows n-R..n-1.
  * Encoder SWA Bounded Replay of a prefix P (reading 9/12): encoder layers and layer E get
    floor P-R for rows >= P-R, and the pools keep the inputs of the original pass for rows < P
    (`pool_override`): the replay never recomputes cached compressed entries.

`tests/train_forward_test.py` holds this module to the reference in float64 (1e-9): full-mode
logits of every row, bounded and paper-bounded prefill + decode, and encoder replay.

Parameter names are exactly the tensor names of spec §4 (`state_dict()` keys), so a model
saves to `model.safetensors` with no renaming. `ffn.gate.bias` is a buffer: it only chooses
experts, so it gets no gradient; the trainer moves it (auxiliary-loss-free balancing).

Discrete choices (top-k entries, candidate blocks, experts) break ties toward the lower index
as the reference does. The indexer gets no gradient from the LM loss (top-k is discrete); the
trainer trains it with `indexer_aux_loss` (KL to the main attention, DeepSeek-V3.2 style).
"""
import math
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(_HERE, "..", "reference"))

from config import Config  # noqa: E402  (tools/reference)
import safetensors_io  # noqa: E402


# --------------------------------------------------------------------------------------------
# Elementary pieces (batched)
# --------------------------------------------------------------------------------------------

def rms_norm(x, weight, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def rope_cos_sin(pos, r, base, dtype, device):
    """cos/sin [len(pos), r/2] of angles pos * base^(-2i/r), angles computed in float64
    (like the reference), then cast."""
    i = torch.arange(r // 2, dtype=torch.float64, device=device)
    inv = torch.pow(torch.tensor(float(base), dtype=torch.float64, device=device), -2.0 * i / r)
    ang = pos.to(torch.float64)[:, None] * inv[None, :]
    ang = ang.to(dtype)
    return torch.cos(ang), torch.sin(ang)


def apply_rot(x, cos, sin, r):
    """Rotate the last r dims of x [B, T, (H,) D] in interleaved pairs; cos/sin [T, r/2]."""
    if x.dim() == 4:
        cos, sin = cos[:, None, :], sin[:, None, :]
    head, tail = x[..., :-r], x[..., -r:]
    x0, x1 = tail[..., 0::2], tail[..., 1::2]
    y0 = x0 * cos - x1 * sin
    y1 = x0 * sin + x1 * cos
    return torch.cat([head, torch.stack([y0, y1], dim=-1).reshape(tail.shape)], dim=-1)


def select_topk_mask(scores, k):
    """Boolean mask [.., J] of the k best finite scores, ties toward the lower index
    (the reference's sorted(key=(-score, j))[:k]). -inf is never selected."""
    J = scores.shape[-1]
    K = min(k, J)
    if K <= 0:
        return torch.zeros_like(scores, dtype=torch.bool)
    vals = scores.topk(K, dim=-1).values
    thr = vals[..., K - 1:K]
    gt = scores > thr
    eq = scores == thr
    need = K - gt.sum(-1, keepdim=True)
    sel = gt | (eq & (eq.cumsum(-1) <= need))
    return sel & torch.isfinite(scores)


def mask_to_indices(mask, K):
    """Indices of the True entries of mask [.., J] in ascending order, K slots per row
    (padded); returns (idx [.., K], valid [.., K])."""
    J = mask.shape[-1]
    K = min(K, J)
    ar = torch.arange(J, 0, -1, device=mask.device)  # J - j: larger for lower j
    key = torch.where(mask, ar, torch.zeros_like(ar))
    top = key.topk(K, dim=-1)
    valid = top.values > 0
    return top.indices, valid


# --------------------------------------------------------------------------------------------
# Parameters, named as spec §4
# --------------------------------------------------------------------------------------------

class P(nn.Module):
    """A holder with one `weight` parameter (so names read `....weight`)."""

    def __init__(self, *shape):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(*shape))


class Compressor(nn.Module):
    def __init__(self, c, d, m):
        super().__init__()
        self.wkv = P(c, d)
        if m == 2:
            self.wz = P(c, d)
        self.norm = P(c)


class Indexer(nn.Module):
    def __init__(self, cfg, kv_source, index_source):
        super().__init__()
        if kv_source:
            self.wk = P(cfg.index_head_dim, cfg.head_dim)
            self.k_norm = P(cfg.index_head_dim)
        if index_source:
            self.wq_b = P(cfg.index_heads * cfg.index_head_dim, cfg.q_lora_rank)
            self.weights_proj = P(cfg.index_heads, cfg.dim)


class Attn(nn.Module):
    def __init__(self, cfg, l):
        super().__init__()
        c, d = cfg.head_dim, cfg.dim
        self.wq_a = P(cfg.q_lora_rank, d)
        self.q_norm = P(cfg.q_lora_rank)
        self.wq_b = P(cfg.n_heads * c, cfg.q_lora_rank)
        self.wkv = P(c, d)
        self.kv_norm = P(c)
        self.sink = nn.Parameter(torch.empty(cfg.n_heads))
        self.wo_a = P(cfg.o_groups, cfg.o_group_rank, (cfg.n_heads // cfg.o_groups) * c)
        self.wo_b = P(d, cfg.o_groups * cfg.o_group_rank)
        kv, ix = cfg.is_kv_source(l), cfg.is_index_source(l)
        if kv:
            self.compressor = Compressor(c, d, cfg.ratio(l))
        if kv or ix:
            self.indexer = Indexer(cfg, kv, ix)


class SwiGLU(nn.Module):
    def __init__(self, d, inter):
        super().__init__()
        self.w1 = P(inter, d)
        self.w2 = P(d, inter)
        self.w3 = P(inter, d)


class Gate(nn.Module):
    def __init__(self, n, d):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(n, d))
        self.register_buffer("bias", torch.zeros(n))


class MoE(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.gate = Gate(cfg.n_routed_experts, cfg.dim)
        self.experts = nn.ModuleList([SwiGLU(cfg.dim, cfg.moe_inter_dim) for _ in range(cfg.n_routed_experts)])
        if cfg.n_shared_experts:
            self.shared = SwiGLU(cfg.dim, cfg.moe_inter_dim)


class Layer(nn.Module):
    def __init__(self, cfg, l):
        super().__init__()
        self.attn_norm = P(cfg.dim)
        self.ffn_norm = P(cfg.dim)
        self.attn = Attn(cfg, l)
        self.ffn = SwiGLU(cfg.dim, cfg.moe_inter_dim) if cfg.n_routed_experts == 0 else MoE(cfg)


class Stats:
    """What one forward reports besides logits."""

    def __init__(self):
        self.expert_load = {}   # layer -> tokens per expert [n_experts]
        self.aux = []           # indexer KL terms (scalars) when aux_rows is given
        self.pool_inputs = {}   # kv-source layer -> the u its compressor consumed [B, T, d]


# --------------------------------------------------------------------------------------------
# The model
# --------------------------------------------------------------------------------------------

class CED(nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        self.cfg = cfg
        self.embed = P(cfg.vocab_size, cfg.dim)
        self.layers = nn.ModuleList([Layer(cfg, l) for l in range(cfg.n_layers)])
        self.norm = P(cfg.dim)
        self.head = P(cfg.vocab_size, cfg.dim)

    # ---- weights in / out ----
    def load_tensors(self, tensors, strict=True):
        sd = self.state_dict()
        missing = [k for k in sd if k not in tensors]
        extra = [k for k in tensors if k not in sd]
        if strict and (missing or extra):
            raise KeyError(f"CED.load_tensors: missing {missing[:5]}, unexpected {extra[:5]}")
        with torch.no_grad():
            for k, v in sd.items():
                if k in tensors:
                    if list(tensors[k].shape) != list(v.shape):
                        raise ValueError(f"{k}: shape {list(tensors[k].shape)}, expected {list(v.shape)}")
                    v.copy_(tensors[k].to(v.dtype))
        return self

    def tensors(self):
        """name -> float32 CPU tensor, spec §4 names (what model.safetensors holds)."""
        return {k: v.detach().to("cpu", torch.float32).contiguous() for k, v in self.state_dict().items()}

    def save(self, out_dir, metadata=None, bf16=False):
        os.makedirs(out_dir, exist_ok=True)
        self.cfg.save(os.path.join(out_dir, "config.json"))
        t = self.tensors()
        safetensors_io.save(os.path.join(out_dir, "model.safetensors"), t, metadata or {},
                            bf16=set(t) if bf16 else ())

    @staticmethod
    def load(model_dir, dtype=torch.float32, device="cpu"):
        cfg = Config.load(os.path.join(model_dir, "config.json"))
        tensors, meta = safetensors_io.load(os.path.join(model_dir, "model.safetensors"))
        m = CED(cfg).to(device=device, dtype=dtype)
        m.load_tensors(tensors)
        return m

    def n_params(self):
        return sum(v.numel() for v in self.state_dict().values())

    # ---- forward ----
    def forward(self, tokens, floors=None, pool_override=None, aux_rows=None, stats=None):
        """tokens [B, T] long -> logits [B, T, V].

        floors: None or long tensor broadcastable to [L, B, T]: the window floor of each row in
          each layer (the query at p sees window entries [max(floor, p-W+1), p]).
        pool_override: None or (rows_mask [B, T] bool, {kv-source layer: u [B, T, d]}): the
          compressor of layer l consumes the given u on masked rows (a cached pool).
        aux_rows: None or long tensor [B, n] of rows on which to compute the indexer KL loss.
        stats: a Stats to fill (expert loads, aux terms, pool inputs)."""
        cfg = self.cfg
        B, T = tokens.shape
        dev = tokens.device
        dt = self.embed.weight.dtype
        L, W = cfg.n_layers, cfg.window
        if floors is None:
            floors = torch.zeros(1, 1, 1, dtype=torch.long, device=dev)
        floors = floors.to(dev)
        if floors.dim() == 2:  # [L, T]: the same floors for every sequence
            floors = floors[:, None, :]
        floors = floors.expand(L, B, T)
        pos = torch.arange(T, device=dev)
        rope = {}

        def cs(base):
            if base not in rope:
                rope[base] = rope_cos_sin(pos, cfg.rope_dim, base, dt, dev)
            return rope[base]

        x = self.embed.weight[tokens]
        pools = {}    # kv-source layer -> (entries [B,J,c], keys [B,J,dI], m)
        topk = {}     # index-source layer -> (idx [B,T,K], valid [B,T,K])
        cand = None   # [B, T, J] bool candidate mask over the decoder pool
        for l in range(L):
            lay = self.layers[l]
            at = lay.attn
            u = rms_norm(x, lay.attn_norm.weight, cfg.norm_eps)
            base = cfg.rope_base(l)
            cos, sin = cs(base)
            cq = rms_norm(u @ at.wq_a.weight.t(), at.q_norm.weight, cfg.norm_eps)
            q = (cq @ at.wq_b.weight.t()).view(B, T, cfg.n_heads, cfg.head_dim)
            q = apply_rot(q, cos, sin, cfg.rope_dim)
            e = apply_rot(rms_norm(u @ at.wkv.weight.t(), at.kv_norm.weight, cfg.norm_eps), cos, sin, cfg.rope_dim)
            if cfg.is_kv_source(l):
                u_pool = u
                if pool_override is not None and l in pool_override[1]:
                    rows = pool_override[0].to(dev)[:, :, None]
                    u_pool = torch.where(rows, pool_override[1][l].to(dt), u)
                if stats is not None:
                    stats.pool_inputs[l] = u_pool.detach()
                pools[l] = self._pool(l, u_pool)
            wl, wv = self._window_logits(q, e, floors[l], W)      # [B,T,H,S], values [B,T,S,c] view helper
            parts_l = [wl]
            sel = None
            if cfg.ratio(l) > 0:
                ent, keys, m, kinfo = pools[cfg.kv_source_of(l)]
                src = cfg.index_source_of(l)
                if src == l:
                    scores = self._index_scores(l, cq, u, keys, m, T)   # [B,T,J], -inf invisible
                    if l == cfg.candidate_source_layer and cfg.candidate_source_layer > 0:
                        cand = self._candidates(scores, m)
                    if cfg.uses_candidates(l):
                        scores = scores.masked_fill(~cand, float("-inf"))
                    mask = select_topk_mask(scores, cfg.index_topk)
                    topk[l] = mask_to_indices(mask, cfg.index_topk)
                    if aux_rows is not None and stats is not None:
                        stats.aux.append(self._indexer_aux(l, cq, u, q, ent, kinfo, m, aux_rows))
                idx, valid = topk[src]
                K = idx.shape[-1]
                J = ent.shape[1]
                flat = (idx + (torch.arange(B, device=dev) * J)[:, None, None]).reshape(-1)
                sel = ent.reshape(B * J, -1).index_select(0, flat).view(B, T, K, -1)  # [B,T,K,c]
                cl = torch.einsum("bthc,btkc->bthk", q, sel) / math.sqrt(cfg.head_dim)
                cl = cl.masked_fill(~valid[:, :, None, :], float("-inf"))
                parts_l.append(cl)
            sink = at.sink.view(1, 1, -1, 1).expand(B, T, cfg.n_heads, 1).to(dt)
            parts_l.append(sink)
            prob = torch.softmax(torch.cat(parts_l, dim=-1), dim=-1)
            S = wl.shape[-1]
            o = wv(prob[..., :S])
            if sel is not None:
                o = o + torch.einsum("bthk,btkc->bthc", prob[..., S:S + sel.shape[2]], sel)
            # undo the rotation of the output's RoPE part: Rot(-p)
            o = apply_rot(o, cos, -sin, cfg.rope_dim)
            hpg = cfg.n_heads // cfg.o_groups
            og = o.reshape(B, T, cfg.o_groups, hpg * cfg.head_dim)
            g = torch.einsum("btgi,gri->btgr", og, at.wo_a.weight)
            x = x + g.reshape(B, T, -1) @ at.wo_b.weight.t()
            x = x + self._ffn(l, rms_norm(x, lay.ffn_norm.weight, cfg.norm_eps), stats)
        return rms_norm(x, self.norm.weight, cfg.norm_eps) @ self.head.weight.t()

    # ---- pieces ----
    def _pool(self, l, u):
        """Compressed entries and index keys of kv-source layer l from u [B,T,d] (all complete groups)."""
        cfg = self.cfg
        at = self.layers[l].attn
        m = cfg.ratio(l)
        C = u @ at.compressor.wkv.weight.t()
        if m == 1:
            cj = C
        else:
            Z = u @ at.compressor.wz.weight.t()
            J = u.shape[1] // 2
            C0, C1 = C[:, 0:2 * J:2], C[:, 1:2 * J:2]
            Z0, Z1 = Z[:, 0:2 * J:2], Z[:, 1:2 * J:2]
            S = torch.softmax(torch.stack([Z0, Z1]), dim=0)
            cj = S[0] * C0 + S[1] * C1
        cj = rms_norm(cj, at.compressor.norm.weight, cfg.norm_eps)
        J = cj.shape[1]
        jpos = torch.arange(J, device=u.device) * m
        cos, sin = rope_cos_sin(jpos, cfg.rope_dim, cfg.compress_rope_theta, cj.dtype, u.device)
        ent = apply_rot(cj, cos, sin, cfg.rope_dim)
        with torch.no_grad():  # keys only serve the (discrete) selection; the aux loss recomputes them
            keys = self._keys(l, cj.detach(), cos, sin)
        return ent, keys, m, (cj.detach(), cos, sin, l)

    def _keys(self, l, cj, cos, sin):
        cfg = self.cfg
        at = self.layers[l].attn
        k = rms_norm(cj @ at.indexer.wk.weight.t(), at.indexer.k_norm.weight, cfg.norm_eps)
        return apply_rot(k, cos, sin, cfg.rope_dim)

    def _index_q(self, l, cq, u, rows_pos):
        cfg = self.cfg
        ix = self.layers[l].attn.indexer
        shp = cq.shape[:-1]
        qi = (cq @ ix.wq_b.weight.t()).view(*shp, cfg.index_heads, cfg.index_head_dim)
        cos, sin = rope_cos_sin(rows_pos.reshape(-1), cfg.rope_dim, cfg.compress_rope_theta, cq.dtype, cq.device)
        cos = cos.view(*rows_pos.shape, -1)
        sin = sin.view(*rows_pos.shape, -1)
        qi = apply_rot_general(qi, cos, sin, cfg.rope_dim)
        w = (u @ ix.weights_proj.weight.t()) / math.sqrt(cfg.index_head_dim * cfg.index_heads)
        return qi, w

    def _index_scores(self, l, cq, u, keys, m, T):
        """I_j = Σ_h w_h ReLU(qi_h · k_j) over visible j (j < (p+1) div m), -inf elsewhere. No grad."""
        B = cq.shape[0]
        with torch.no_grad():
            pos = torch.arange(T, device=cq.device).expand(B, T)
            qi, w = self._index_q(l, cq.detach(), u.detach(), pos)
            s = torch.einsum("bthd,bjd->bthj", qi, keys.detach())
            I = (F.relu(s) * w[..., None]).sum(2)
            J = keys.shape[1]
            vis = torch.arange(J, device=cq.device)[None, :] < ((torch.arange(T, device=cq.device) + 1) // m)[:, None]
            return I.masked_fill(~vis[None], float("-inf"))

    def _candidates(self, scores, m):
        """Reading 1: per row, keep the newest visible block and the best candidate_blocks-1 others."""
        cfg = self.cfg
        B, T, J = scores.shape
        bs, cb = cfg.candidate_block_size, cfg.candidate_blocks
        NB = (J + bs - 1) // bs
        pad = NB * bs - J
        sp = F.pad(scores, (0, pad), value=float("-inf")) if pad else scores
        bscore = sp.view(B, T, NB, bs).max(-1).values
        nvis = (torch.arange(T, device=scores.device) + 1) // m
        newest = torch.div(nvis - 1, bs, rounding_mode="floor")           # -1 when nothing visible
        blk = torch.arange(NB, device=scores.device)
        others = bscore.masked_fill(blk[None, None, :] >= newest[None, :, None], float("-inf"))
        keep = select_topk_mask(others, cb - 1) | (blk[None, None, :] == newest[None, :, None])
        return keep.repeat_interleave(bs, dim=-1)[..., :J]

    def _window_logits(self, q, e, floor, W):
        """Window attention logits in blocks of W: the query at p (block b = p div W) sees keys of
        blocks b-1 and b at positions [max(floor_p, p-W+1, 0), p]. Returns logits [B,T,H,2W] and a
        function mapping probabilities [B,T,H,2W] to the weighted sum of values [B,T,H,c]."""
        B, T, H, c = q.shape
        nb = (T + W - 1) // W
        Tp = nb * W
        if Tp != T:
            q = F.pad(q, (0, 0, 0, 0, 0, Tp - T))
            e = F.pad(e, (0, 0, 0, Tp - T))
            floor = F.pad(floor, (0, Tp - T))
        eb = e.view(B, nb, W, c)
        prev = torch.cat([torch.zeros_like(eb[:, :1]), eb[:, :-1]], dim=1)
        kv = torch.cat([prev, eb], dim=2)                                   # [B,nb,2W,c]
        qb = q.view(B, nb, W, H, c)
        lg = torch.einsum("bniHc,bnsc->bniHs", qb, kv) / math.sqrt(c)      # [B,nb,W,H,2W]
        p = torch.arange(Tp, device=q.device).view(nb, W)                  # query positions
        t = (torch.arange(nb, device=q.device)[:, None] - 1) * W + torch.arange(2 * W, device=q.device)[None, :]
        ok = (t[:, None, :] <= p[:, :, None]) & (t[:, None, :] >= p[:, :, None] - W + 1) & (t[:, None, :] >= 0)
        ok = ok[None] & (t[None, :, None, :] >= floor.reshape(B, nb, W)[..., None])   # [B,nb,W,2W]
        lg = lg.masked_fill(~ok[:, :, :, None, :], float("-inf"))
        lg = lg.reshape(B, Tp, H, 2 * W)[:, :T]

        def values(prob):
            pr = prob
            if Tp != T:
                pr = F.pad(pr, (0, 0, 0, 0, 0, Tp - T))
            o = torch.einsum("bniHs,bnsc->bniHc", pr.view(B, nb, W, H, 2 * W), kv)
            return o.reshape(B, Tp, H, c)[:, :T]

        return lg, values

    def _ffn(self, l, u, stats):
        cfg = self.cfg
        f = self.layers[l].ffn
        if cfg.n_routed_experts == 0:
            return swiglu(f, u, cfg.swiglu_limit)
        B, T, d = u.shape
        uf = u.reshape(-1, d)
        s = torch.sqrt(F.softplus(uf @ f.gate.weight.t()))                # [N, E]
        choose = (s + f.gate.bias.to(s.dtype)).detach()
        order = torch.sort(choose, dim=-1, descending=True, stable=True).indices
        chosen = order[:, :cfg.experts_per_token]                          # [N, k]
        sc = s.gather(1, chosen)
        wts = cfg.route_scale * sc / sc.sum(-1, keepdim=True)              # [N, k]
        y = torch.zeros_like(uf)
        for e in range(cfg.n_routed_experts):
            hit = (chosen == e)
            rows = hit.any(-1).nonzero().squeeze(-1)
            if stats is not None:
                stats.expert_load.setdefault(l, torch.zeros(cfg.n_routed_experts))
                stats.expert_load[l][e] += float(rows.numel())
            if rows.numel() == 0:
                continue
            we = (wts * hit).sum(-1).index_select(0, rows)
            ye = swiglu(f.experts[e], uf.index_select(0, rows), cfg.swiglu_limit)
            y = y.index_add(0, rows, ye * we[:, None])
        if cfg.n_shared_experts:
            y = y + swiglu(f.shared, uf, cfg.swiglu_limit)
        return y.view(B, T, d)

    def _indexer_aux(self, l, cq, u, q, ent, kinfo, m, rows):
        """KL(attention || indexer) on the given rows [B, n] over visible entries of the pool.
        Target: the main attention's softmax over the visible compressed entries, averaged over
        heads (no grad). Prediction: softmax of the index scores; gradients reach only the
        indexer's weights (its inputs are detached)."""
        cfg = self.cfg
        B, n = rows.shape
        J = ent.shape[1]
        bi = torch.arange(B, device=rows.device)[:, None]
        vis = torch.arange(J, device=rows.device)[None, None, :] < ((rows + 1) // m)[:, :, None]   # [B,n,J]
        okrow = vis.any(-1)
        if not bool(okrow.any()):
            return torch.zeros((), dtype=q.dtype, device=q.device)
        with torch.no_grad():
            qa = q[bi, rows]                                                 # [B,n,H,c]
            a = torch.einsum("bnhc,bjc->bnhj", qa, ent) / math.sqrt(cfg.head_dim)
            a = a.masked_fill(~vis[:, :, None, :], float("-inf"))
            tgt = torch.softmax(a, dim=-1).nan_to_num(0.0).mean(2)           # [B,n,J]
        qi, w = self._index_q(l, cq[bi, rows].detach(), u[bi, rows].detach(), rows)
        keys = self._keys(*[kinfo[3], kinfo[0], kinfo[1], kinfo[2]])
        s = torch.einsum("bnhd,bjd->bnhj", qi, keys)
        I = (F.relu(s) * w[..., None]).sum(2).masked_fill(~vis, float("-inf"))
        logp = torch.log_softmax(I, dim=-1).masked_fill(~vis, 0.0)
        kl = (tgt * (torch.log(tgt.clamp_min(1e-30)) - logp)).masked_fill(~vis, 0.0).sum(-1)
        return kl[okrow].mean()


def apply_rot_general(x, cos, sin, r):
    """apply_rot for x [..., H, D] with cos/sin [..., r/2] (one position per leading index)."""
    cos, sin = cos[..., None, :], sin[..., None, :]
    head, tail = x[..., :-r], x[..., -r:]
    x0, x1 = tail[..., 0::2], tail[..., 1::2]
    y0 = x0 * cos - x1 * sin
    y1 = x0 * sin + x1 * cos
    return torch.cat([head, torch.stack([y0, y1], dim=-1).reshape(tail.shape)], dim=-1)


def swiglu(f, x, lim):
    a = x @ f.w1.weight.t()
    b = x @ f.w3.weight.t()
    if lim > 0:
        a = torch.clamp(a, max=lim)
        b = torch.clamp(b, -lim, lim)
    return (F.silu(a) * b) @ f.w2.weight.t()


# --------------------------------------------------------------------------------------------
# Initialisation for training
# --------------------------------------------------------------------------------------------

def init_weights(model: CED, seed: int):
    """Seeded init for training: linear weights ~ N(0, 1/fan_in), residual-writing projections
    (attn wo_b, FFN w2) also / sqrt(2L), norm weights 1, sinks 0, embedding ~ N(0, 1), head
    ~ N(0, 1/d), gate bias 0."""
    cfg = model.cfg
    g = torch.Generator().manual_seed(seed)
    out_scale = 1.0 / math.sqrt(2 * cfg.n_layers)
    with torch.no_grad():
        for name, p in model.state_dict().items():
            shape = p.shape
            if name == "embed.weight":
                t = torch.randn(shape, generator=g)
            elif name.endswith("norm.weight"):
                t = torch.ones(shape)
            elif name.endswith("attn.sink") or name.endswith("gate.bias"):
                t = torch.zeros(shape)
            else:
                t = torch.randn(shape, generator=g) / math.sqrt(shape[-1])
                if name.endswith("attn.wo_b.weight") or name.endswith("w2.weight"):
                    t = t * out_scale
            p.copy_(t.to(p.dtype))
    return model


# --------------------------------------------------------------------------------------------
# Scenario floors (spec §5), used by the trainer and bench/quality
# --------------------------------------------------------------------------------------------

def bounded_floors(cfg, T, cuts, paper=False):
    """Floors [L, T] for Decoder SWA Bounded Replay segments. `cuts` = sorted prefill lengths
    n_1 < n_2 < ...; segment k starts at f_k = n_k - R and runs to the next segment's start.
    Rows of a segment are: replayed rows [f_k, n_k - 1], the prefill's last row n_k - 1, then
    decode rows. Decoder layers after E get floor f_k for the segment's rows; with paper=True
    layer E gets floor f_k for the replayed rows only (decode rows see layer E's whole window).
    Segments must not overlap: f_{k+1} >= n_k."""
    L, E, W = cfg.n_layers, cfg.n_encoder_layers, cfg.window
    fl = torch.zeros(L, T, dtype=torch.long)
    starts = []
    for n in cuts:
        R = min(W, n)
        starts.append((n - R, n))
    for i, (f, n) in enumerate(starts):
        if i and f < starts[i - 1][1]:
            raise ValueError("bounded_floors: segments overlap")
        end = starts[i + 1][0] if i + 1 < len(starts) else T
        fl[E + 1:, f:end] = f
        if paper:
            fl[E, f:n] = f
    return fl


def encoder_replay_floors(cfg, T, P, n):
    """Floors [L, T] for: prefix P cached with its pools, windows and H_E evicted, Encoder SWA
    Bounded Replay of rows [P-R, P) (R = min(W, P)), then a bounded prefill to length n >= P and
    teacher-forced decode. Encoder layers and layer E: floor P-R for rows >= P-R (nothing below
    exists); decoder layers after E: floor n-R' (R' = min(W, n)) for rows >= n-R'. The pools must
    keep the original pass's inputs for rows < P (pool_override)."""
    L, E, W = cfg.n_layers, cfg.n_encoder_layers, cfg.window
    fl = torch.zeros(L, T, dtype=torch.long)
    f = P - min(W, P)
    fl[:E + 1, f:] = f
    g = n - min(W, n)
    fl[E + 1:, g:] = g
    return fl
