"""Independent PyTorch reference of the CED model (shared/spec/ced-model.md + docs/spec-readings.md).

Written for clarity, not speed: rows are processed one at a time inside a layer, layers one
after the other over the rows that pass them ("layer-major"). Every function implements one
equation of the spec; section numbers refer to the spec.

Per-sequence state is explicit (`SeqState`):
  window[l]  : dict absolute position -> window entry e_t of layer l (rotated, dim c)
  pools[l]   : for each kv-source layer l, a `Pool` (main entries ĉ_j, index keys k_j, pending half)
  H_E        : dict absolute position -> residual stream entering layer E
  tokens     : the token ids fed so far (needed by Encoder SWA Bounded Replay)

The released DeepSeek-V4.1 parts are config switches (config.RELEASED; their equations live in
v41/: mhc.py, rope.py, quant.py) and with their defaults nothing below changes:
  hc_mult > 1  single-pass mHC: a row's residual state (h[p], H_E[p]) is the flat vector
               X [hc, d] followed by the pre-mix a [hc] the next sub-layer collapses X with
               (width hc*d + hc); the embedding fills every stream, a = (1, 0, ..); the head reads
               RMSNorm_final(sum_i a_i X_i) with the last FFN's pre.
  rope_factor > 1  YaRN (factor, rope_original_seq_len, beta_fast, beta_slow) over
               compress_rope_theta on every rotation of a compressed layer (query, window entry,
               de-rotation, pool entries, index keys and queries); ratio-0 layers keep plain RoPE.
  score_func, norm_topk_prob  the router's score (sqrtsoftplus | sigmoid | softmax) and whether
               the chosen weights are divided by their sum.
  engram_*     Engram before the listed (encoder) layers: n-gram hashes of the tokens by absolute
               position (identity class table: engram_compressed_vocab == vocab_size), table rows
               `layers.N.engram.embed.weight`, gated per stream into X (v41/engram.py).
  kv_dtype "released"  what is stored is read back as released (v41/quant.py, the whole vector,
               RoPE dims included, after the rotation, float32 before rounding): window entries FP8
               E4M3 with a UE8M0 scale per 32; main pool entries FP4 E2M1 with an E4M3 scale per
               16; index keys and index queries MXFP4 (E2M1, UE8M0 per 32). The pending half group
               of a ratio-2 pool (C, Z) stays unquantised, as the released compressor state.
"""
import math

import os
import sys

import torch
import torch.nn.functional as F

from config import Config

# v41/ goes last on the path: its config.py must not shadow this folder's config.py
sys.path.append(os.path.join(os.path.dirname(os.path.abspath(__file__)), "v41"))
import engram as v41engram  # noqa: E402
import mhc  # noqa: E402
import quant  # noqa: E402
import rope as v41rope  # noqa: E402


# --------------------------------------------------------------------------------------------
# Elementary pieces
# --------------------------------------------------------------------------------------------

def rms_norm(x, weight, eps):
    """RMSNorm with a learned weight."""
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def rope_angles(pos, r, base, dtype):
    """Angles of the r/2 pairs at position pos: pos * base^(-2i/r) (reading 4)."""
    i = torch.arange(r // 2, dtype=torch.float64)
    ang = float(pos) * torch.pow(torch.tensor(float(base), dtype=torch.float64), -2.0 * i / r)
    return ang.to(dtype)


def rot(x, pos, r, base):
    """Rot(pos): rotate the last r dims of x (any leading shape) in interleaved pairs (2i, 2i+1):
    (x0, x1) -> (x0 cos - x1 sin, x0 sin + x1 cos). Rot(-p) is rot(x, -p, ...)."""
    ang = rope_angles(pos, r, base, x.dtype)
    cos, sin = torch.cos(ang), torch.sin(ang)
    head, tail = x[..., :-r], x[..., -r:]
    x0, x1 = tail[..., 0::2], tail[..., 1::2]
    y0 = x0 * cos - x1 * sin
    y1 = x0 * sin + x1 * cos
    out_tail = torch.stack([y0, y1], dim=-1).reshape(tail.shape)
    return torch.cat([head, out_tail], dim=-1)


def select_topk(scores, k):
    """Indices of the k best scores (ties toward the lower index), sorted by position (reading 2).
    Entries with score -inf are never selected."""
    cand = [j for j in range(len(scores)) if scores[j] != float("-inf")]
    order = sorted(cand, key=lambda j: (-float(scores[j]), j))
    return sorted(order[:k])


def topk_gap(scores, k):
    """Gap between the k-th and (k+1)-th best finite score (inf when no boundary): a near-tie guard."""
    vals = sorted([float(s) for s in scores if s != float("-inf")], reverse=True)
    if len(vals) <= k or vals[k - 1] == vals[k]:
        return math.inf  # no boundary, or an exact tie (e.g. zeros from ReLU), broken by index
    return vals[k - 1] - vals[k]


# --------------------------------------------------------------------------------------------
# State
# --------------------------------------------------------------------------------------------

class Pool:
    """Compressed entries of one kv-source layer (§3.3)."""

    def __init__(self, m):
        self.m = m
        self.entries = []   # ĉ_j = Rot(j m)(c_j)
        self.keys = []      # k_j = Rot(j m)(RMSNorm_k(Wi_k c_j))
        self.pending = None  # m = 2, odd count of fed rows: (C, Z) of the half group's first token
        self.next_pos = 0   # the next row position this pool expects

    def clone(self):
        p = Pool(self.m)
        p.entries, p.keys = list(self.entries), list(self.keys)
        p.pending = self.pending
        p.next_pos = self.next_pos
        return p


class SeqState:
    def __init__(self, cfg):
        self.cfg = cfg
        self.pos = 0
        self.tokens = []
        self.window = [dict() for _ in range(cfg.n_layers)]
        self.pools = {l: Pool(cfg.compress_ratios[l]) for l in cfg.kv_source_layers}
        self.H_E = {}

    def clone(self):
        s = SeqState(self.cfg)
        s.pos = self.pos
        s.tokens = list(self.tokens)
        s.window = [dict(w) for w in self.window]
        s.pools = {l: p.clone() for l, p in self.pools.items()}
        s.H_E = dict(self.H_E)
        return s

    def drop_windows_and_HE(self):
        """What the prefix cache evicts first: all window entries and the H_E tail (pools stay)."""
        self.window = [dict() for _ in range(self.cfg.n_layers)]
        self.H_E = {}


class PassCtx:
    """Per-pass bookkeeping: top-k per (index source, row), candidate masks, traces, guards."""

    def __init__(self, trace_row=None):
        self.topk = {}        # (layer, p) -> list of selected entry indices
        self.cand = {}        # p -> bool mask over visible decoder-pool entries
        self.trace_row = trace_row
        self.trace = {}       # layer -> (scores tensor over visible entries, topk list)
        self.min_gap = math.inf  # smallest relative decision margin (top-k, blocks, experts)
        self.units = 0           # layer-token units: rows that passed a layer (reading 6)

    def gap(self, g, scale):
        if g != math.inf:
            self.min_gap = min(self.min_gap, g / max(scale, 1e-30))


class RoundingMargins:
    """How close the released KV rounding came to a tie (kv_dtype released). For every rounded value
    the distance of x/s to the nearest rounding midpoint, in grid steps (0 = a tie, 0.5 = on the
    grid), and for every block scale the distance of its input to a scale boundary (a power of two
    for UE8M0 scales, in log2 units; an E4M3 midpoint for the FP4 scale, in E4M3 steps). An engine
    computing in float32 (relative error ~1e-6) can round a value near a tie the other
    way (a value holds up to 16 grid steps, so ~1e-4 steps); `near` counts those within 1e-4."""

    NEAR = 1e-4

    def __init__(self):
        self.min = math.inf
        self.near = 0
        self.count = 0

    @staticmethod
    def _grid_margin(r, e2m1):
        a = r.abs()
        if e2m1:
            step = torch.where(a < 2, torch.full_like(a, 0.5), torch.where(a < 4, torch.ones_like(a), torch.full_like(a, 2.0)))
        else:
            _, e = torch.frexp(torch.where(a > 0, a, torch.ones_like(a)))
            step = torch.where(a >= 2.0 ** -6, torch.ldexp(torch.ones_like(a), (e - 4).to(torch.float64)),
                               torch.full_like(a, 2.0 ** -9))
        t = a / step
        return ((t - torch.floor(t)) - 0.5).abs()

    def note(self, x, qdq):
        x = x.to(torch.float32).to(torch.float64)
        if qdq is quant.qdq_fp8_ue8m0:
            s, block, e2m1, amax_div = quant.fp8_ue8m0_scales(x), 32, False, 448.0
        elif qdq is quant.qdq_mxfp4:
            s, block, e2m1, amax_div = quant.mxfp4_scales(x), 32, True, 6.0
        else:
            s, block, e2m1, amax_div = quant.fp4_e4m3_scales(x), 16, True, None
        g = x.reshape(*x.shape[:-1], -1, block)
        r = g / s.unsqueeze(-1)
        m = [self._grid_margin(r, e2m1).reshape(-1)]
        amax = g.abs().amax(-1).reshape(-1)
        if amax_div is None:   # E4M3 scale = e4m3(amax / 6): distance to an E4M3 midpoint
            m.append(self._grid_margin(torch.clamp(amax, min=6 * 2.0 ** -9) / 6, False))
        else:                  # power-of-two scale: distance of log2(amax / max) to an integer
            lg = torch.log2(torch.clamp(amax, min=1e-30) / amax_div)
            m.append((lg - torch.round(lg)).abs())
        m = torch.cat(m)
        self.min = min(self.min, float(m.min()))
        self.near += int((m < self.NEAR).sum())
        self.count += m.numel()


# --------------------------------------------------------------------------------------------
# The model
# --------------------------------------------------------------------------------------------

class Model:
    def __init__(self, cfg: Config, tensors, dtype=torch.float64):
        self.cfg = cfg
        self.dtype = dtype
        self.w = {k: v.to(dtype) for k, v in tensors.items()}
        self._check_tensors()
        r = cfg.released
        self._engram_setup()
        self.hc = cfg.hc
        self.kv_margins = RoundingMargins()
        # YaRN inverse frequencies of the compressed layers (None: plain RoPE everywhere)
        self.yarn_freq = None
        if r["rope_factor"] > 1:
            self.yarn_freq = v41rope.yarn_inv_freq(cfg.rope_dim, cfg.compress_rope_theta, r["rope_factor"],
                                                   r["rope_original_seq_len"], r["rope_beta_fast"],
                                                   r["rope_beta_slow"])

    # ---- Engram (v41/engram.py; docs/v41-contract.md §8) ----
    def _engram_setup(self):
        """Hash constants of the Engram layers. The token -> class table is the identity: without the
        tokenizer only engram_compressed_vocab == vocab_size is defined (contract §8.2)."""
        c, r = self.cfg, self.cfg.released
        self.engram = {}
        if not r["engram_layers"]:
            return
        if r["engram_compressed_vocab"] != c.vocab_size:
            raise NotImplementedError(f"model: Engram needs the tokenizer's class table unless engram_compressed_vocab "
                                      f"== vocab_size ({c.vocab_size}); found {r['engram_compressed_vocab']}")
        N, heads = r["engram_max_ngram"], r["engram_n_heads"]
        primes = v41engram.engram_primes(len(r["engram_layers"]), N, heads, r["engram_vocab_size"])
        for i, l in enumerate(r["engram_layers"]):
            if sum(primes[i]) != r["engram_table_rows"][i]:
                raise ValueError(f"model: engram_table_rows[{i}]: expected {sum(primes[i])} (the primes of layer {l}), "
                                 f"found {r['engram_table_rows'][i]}")
            self.engram[l] = (primes[i], v41engram.engram_offsets(primes[i]),
                              v41engram.engram_multipliers(l, N, r["engram_compressed_vocab"]))

    def engram_add(self, st, l, h, rows):
        """Before block l (an Engram layer): X_i += gate_i * value for every row, from the table rows
        its n-grams hash to (history by absolute position: st.tokens); the pre-mix a is untouched."""
        c, r = self.cfg, self.cfg.released
        primes, offsets, mult = self.engram[l]
        upto = max(rows) + 1
        ids = v41engram.engram_row_ids(st.tokens[:upto], [False] * upto, range(c.vocab_size), r["engram_pad_id"],
                                       r["engram_max_ngram"], r["engram_n_heads"], mult, primes, offsets)
        pre = f"layers.{l}.engram."
        for p in rows:
            table = self.w[pre + "embed.weight"][ids[p]]                  # [(N-1)*heads, head_dim]
            if self.hc > 1:
                X, a = self.split(h[p])
            else:
                X, a = h[p].unsqueeze(0), None
            X = v41engram.engram_apply(X, table, self.w[pre + "wkv.weight"], self.w[pre + "q_weight"],
                                       self.w[pre + "k_weight"], c.norm_eps)
            h[p] = self.join(X, a) if self.hc > 1 else X[0]
        return h

    # ---- RoPE per layer (reading 4; YaRN on compressed layers when rope_factor > 1) ----
    def rope(self, x, pos, l):
        """Rot(pos) with layer l's table: plain over rope_base(l), or YaRN over compress_rope_theta."""
        c = self.cfg
        if self.yarn_freq is not None and c.ratio(l) > 0:
            return v41rope.rotate(x, pos, self.yarn_freq)
        return rot(x, pos, c.rope_dim, c.rope_base(l))

    def rope_compressed(self, x, pos):
        """The table of compressed layers: pool entries, index keys, index queries."""
        if self.yarn_freq is not None:
            return v41rope.rotate(x, pos, self.yarn_freq)
        return rot(x, pos, self.cfg.rope_dim, self.cfg.compress_rope_theta)

    # ---- KV as stored (kv_dtype) ----
    def _stored(self, x, qdq):
        """x as the KV store reads it back: itself (f32), or quantise-dequantise as released."""
        if not self.cfg.kv_released:
            return x
        self.kv_margins.note(x, qdq)
        return qdq(x).to(self.dtype)

    def W_(self, name):
        return self.w[name]

    def lw(self, l, name):
        return self.w[f"layers.{l}.{name}"]

    def _check_tensors(self):
        c = self.cfg
        for name in expected_shapes(c):
            if name not in self.w:
                raise KeyError(f"model: missing tensor {name}")

    # ---- §3.1 query ----
    def query(self, l, u, p):
        """cq = RMSNorm_q(Wq_a u); q_h = Rot(p)(Wq_b cq)_h. Returns (cq, q [n_heads, c])."""
        c = self.cfg
        cq = rms_norm(self.lw(l, "attn.wq_a.weight") @ u, self.lw(l, "attn.q_norm.weight"), c.norm_eps)
        q = (self.lw(l, "attn.wq_b.weight") @ cq).view(c.n_heads, c.head_dim)
        q = self.rope(q, p, l)
        return cq, q

    # ---- §3.2 window entry ----
    def window_entry(self, l, u, p):
        """e_t = Rot(p)(RMSNorm_kv(Wkv u)); kv_dtype released: FP8 E4M3, UE8M0 per 32, after the rotation."""
        c = self.cfg
        e = rms_norm(self.lw(l, "attn.wkv.weight") @ u, self.lw(l, "attn.kv_norm.weight"), c.norm_eps)
        return self._stored(self.rope(e, p, l), quant.qdq_fp8_ue8m0)

    # ---- §3.3 compressor ----
    def compress_m1(self, l, u):
        """m = 1: c_j = RMSNorm_c(Wc_kv u_j) (un-rotated)."""
        c = self.cfg
        return rms_norm(self.lw(l, "attn.compressor.wkv.weight") @ u,
                        self.lw(l, "attn.compressor.norm.weight"), c.norm_eps)

    def compress_m2_parts(self, l, u):
        """m = 2, per token: C = Wc_kv u, Z = Wc_z u."""
        return (self.lw(l, "attn.compressor.wkv.weight") @ u, self.lw(l, "attn.compressor.wz.weight") @ u)

    def compress_m2_group(self, l, part0, part1):
        """m = 2: per channel softmax over the group's two tokens (reading 5), c_j = RMSNorm_c(Σ S ⊙ C)."""
        (C0, Z0), (C1, Z1) = part0, part1
        S = torch.softmax(torch.stack([Z0, Z1]), dim=0)
        return rms_norm(S[0] * C0 + S[1] * C1, self.lw(l, "attn.compressor.norm.weight"), self.cfg.norm_eps)

    def index_key(self, l, cj, j, m):
        """k_j = Rot(j m)(RMSNorm_k(Wi_k c_j)) with compress_rope_theta; released: MXFP4 after the rotation."""
        c = self.cfg
        k = rms_norm(self.lw(l, "attn.indexer.wk.weight") @ cj, self.lw(l, "attn.indexer.k_norm.weight"), c.norm_eps)
        return self._stored(self.rope_compressed(k, j * m), quant.qdq_mxfp4)

    def main_entry(self, cj, j, m):
        """ĉ_j = Rot(j m)(c_j) with compress_rope_theta (an entry's position is its group's first token);
        released: FP4 E2M1 with an E4M3 scale per 16, after the rotation."""
        return self._stored(self.rope_compressed(cj, j * m), quant.qdq_fp4_e4m3)

    def pool_feed(self, l, pool, u, p):
        """Feed row p (input u of kv-source layer l) to its pool; appends an entry when one completes."""
        if p != pool.next_pos:
            raise RuntimeError(f"pool of layer {l}: expected row {pool.next_pos}, got {p}")
        pool.next_pos += 1
        m = pool.m
        if m == 1:
            cj, j = self.compress_m1(l, u), p
        else:
            part = self.compress_m2_parts(l, u)
            if p % 2 == 0:
                pool.pending = part
                return
            cj, j = self.compress_m2_group(l, pool.pending, part), p // 2
            pool.pending = None
        assert j == len(pool.entries)
        pool.entries.append(self.main_entry(cj, j, m))
        pool.keys.append(self.index_key(l, cj, j, m))

    # ---- §3.4 visibility ----
    @staticmethod
    def visible_count(p, m):
        """Entry j is visible to a query at p iff j < floor((p+1)/m)."""
        return (p + 1) // m

    # ---- §3.5 indexer ----
    def index_scores(self, l, cq, u, p, keys):
        """I_j = Σ_h w_h ReLU(qi_h · k_j), qi_h = Rot(p)(Wi_q cq)_h, w = Wi_w u / sqrt(dI · hI)."""
        c = self.cfg
        if len(keys) == 0:
            return torch.zeros(0, dtype=self.dtype)
        qi = (self.lw(l, "attn.indexer.wq_b.weight") @ cq).view(c.index_heads, c.index_head_dim)
        qi = self._stored(self.rope_compressed(qi, p), quant.qdq_mxfp4)   # released: MXFP4 per head
        w = (self.lw(l, "attn.indexer.weights_proj.weight") @ u) / math.sqrt(c.index_head_dim * c.index_heads)
        K = torch.stack(keys)                       # [n, dI]
        return (F.relu(qi @ K.T) * w[:, None]).sum(0)  # [n]

    def candidate_mask(self, scores, ctx):
        """Reading 1: blocks of bs entries, block score = max inside; newest visible block always
        kept, then the best candidate_blocks-1 others (ties toward the lower block)."""
        c = self.cfg
        n, bs, nb_keep = len(scores), c.candidate_block_size, c.candidate_blocks
        nb = (n + bs - 1) // bs
        mask = torch.ones(n, dtype=torch.bool)
        if nb <= nb_keep:
            return mask
        bscore = [float(scores[b * bs:(b + 1) * bs].max()) for b in range(nb)]
        others = sorted(range(nb - 1), key=lambda b: (-bscore[b], b))
        keep = set(others[:nb_keep - 1]) | {nb - 1}
        if nb_keep >= 2:
            g = bscore[others[nb_keep - 2]] - bscore[others[nb_keep - 1]]
            ctx.gap(g if g != 0 else math.inf, max(abs(x) for x in bscore))
        for b in range(nb):
            if b not in keep:
                mask[b * bs:(b + 1) * bs] = False
        return mask

    def select_entries(self, st, l, p, cq, u, ctx):
        """Top-k of layer l for the query at p: index sources score, reuse layers copy (§3.5)."""
        c = self.cfg
        src = c.index_source_of(l)
        if src != l:
            return ctx.topk[(src, p)]
        pool = st.pools[c.kv_source_of(l)]
        n_vis = self.visible_count(p, pool.m)
        if len(pool.entries) < n_vis:
            raise RuntimeError(f"layer {l} row {p}: pool holds {len(pool.entries)} entries, {n_vis} visible")
        scores = self.index_scores(l, cq, u, p, pool.keys[:n_vis])
        if l == c.candidate_source_layer and c.candidate_source_layer > 0:
            ctx.cand[p] = self.candidate_mask(scores, ctx)
        if c.uses_candidates(l):
            scores = scores.masked_fill(~ctx.cand[p], float("-inf"))
        sel = select_topk(scores, c.index_topk)
        finite = [abs(float(s)) for s in scores if s != float("-inf")]
        ctx.gap(topk_gap(scores, c.index_topk), max(finite) if finite else 1.0)
        ctx.topk[(l, p)] = sel
        if p == ctx.trace_row:
            ctx.trace[l] = (scores.clone(), list(sel))
        return sel

    # ---- §3.6 attention with sink ----
    def sink_attention(self, q, entries, sink):
        """o_h = Σ_e exp(q_h·e/√c) e / (Σ_e exp(q_h·e/√c) + exp(sink_h)); entries are K and V."""
        c = self.cfg
        Ent = torch.stack(entries)                     # [n, c]
        logits = (q @ Ent.T) / math.sqrt(c.head_dim)   # [H, n]
        full = torch.cat([logits, sink[:, None]], dim=1)
        prob = torch.softmax(full, dim=1)[:, :-1]      # sink takes mass but carries no value
        return prob @ Ent                              # [H, c]

    # ---- §3.7 un-rotation ----
    def unrotate(self, l, o, p):
        """o_h[c-r:] = Rot(-p)(o_h[c-r:])."""
        return self.rope(o, -p, l)

    # ---- §3.8 grouped output ----
    def grouped_output(self, l, o):
        """g_k = Wo_a[k] concat(o of group k); y = Wo_b concat(g_1..g_G)."""
        c = self.cfg
        hpg = c.n_heads // c.o_groups
        wo_a = self.lw(l, "attn.wo_a.weight")  # [G, rank, hpg*c]
        g = [wo_a[k] @ o[k * hpg:(k + 1) * hpg].reshape(-1) for k in range(c.o_groups)]
        return self.lw(l, "attn.wo_b.weight") @ torch.cat(g)

    # ---- FFN ----
    def swiglu(self, prefix, x):
        """FFN(x) = W2(SiLU(min(W1 x, limit)) ⊙ clamp(W3 x, -limit, limit)); limit <= 0: no clamp."""
        lim = self.cfg.swiglu_limit
        a = self.w[prefix + "w1.weight"] @ x
        b = self.w[prefix + "w3.weight"] @ x
        if lim > 0:
            a = torch.clamp(a, max=lim)
            b = torch.clamp(b, -lim, lim)
        return self.w[prefix + "w2.weight"] @ (F.silu(a) * b)

    def ffn(self, l, u, ctx):
        """Router s = sqrt(softplus(Wg u)) (score_func: or sigmoid, softmax); experts = top-k of s + bias;
        weights route_scale s_e / Σ s (norm_topk_prob; without it route_scale s_e)."""
        c = self.cfg
        pre = f"layers.{l}.ffn."
        if c.n_routed_experts == 0:
            return self.swiglu(pre, u)
        z = self.w[pre + "gate.weight"] @ u
        sf = c.released["score_func"]
        if sf == "sqrtsoftplus":
            s = torch.sqrt(F.softplus(z))
        elif sf == "sigmoid":
            s = torch.sigmoid(z)
        else:
            s = torch.softmax(z, dim=0)
        choose = s + self.w[pre + "gate.bias"]
        order = sorted(range(c.n_routed_experts), key=lambda e: (-float(choose[e]), e))
        chosen = order[:c.experts_per_token]
        if c.experts_per_token < c.n_routed_experts:
            ctx.gap(float(choose[order[c.experts_per_token - 1]] - choose[order[c.experts_per_token]]),
                    float(choose.abs().max()))
        tot = sum(s[e] for e in chosen)
        norm = c.released["norm_topk_prob"]
        y = torch.zeros_like(u)
        for e in chosen:
            omega = c.route_scale * s[e] / tot if norm else c.route_scale * s[e]
            y = y + omega * self.swiglu(pre + f"experts.{e}.", u)
        if c.n_shared_experts:
            y = y + self.swiglu(pre + "shared.", u)
        return y

    # ---- final ----
    def embed(self, tok):
        """A row's residual state after the embedding: e, or (hc > 1) e in every stream, a = (1, 0, ..)."""
        e = self.w["embed.weight"][tok]
        if self.hc == 1:
            return e
        return self.join(*mhc.embed_streams(e, self.hc))

    def logits(self, h):
        """logits = W_head RMSNorm_final(h); hc > 1: of the streams collapsed with the last pre."""
        if self.hc > 1:
            X, a = self.split(h)
            h = mhc.collapse(X, a)
        return self.w["head.weight"] @ rms_norm(h, self.w["norm.weight"], self.cfg.norm_eps)

    # ---- mHC residual state (hc > 1): flat [hc*d + hc] = X [hc, d] then a [hc] ----
    def split(self, h):
        n = self.hc * self.cfg.dim
        return h[:n].reshape(self.hc, self.cfg.dim), h[n:]

    @staticmethod
    def join(X, a):
        return torch.cat([X.reshape(-1), a])

    def attn_input(self, l, h):
        """u = RMSNorm_attn of the row's state (hc > 1: the streams collapsed with the carried pre-mix)."""
        if self.hc > 1:
            X, a = self.split(h)
            h = mhc.collapse(X, a)
        return rms_norm(h, self.lw(l, "attn_norm.weight"), self.cfg.norm_eps)

    def hc_coeffs(self, l, X, which):
        """(pre, post, comb) of layer l's `attn` or `ffn` sub-layer from the streams X entering it."""
        c, r = self.cfg, self.cfg.released
        return mhc.hc_coeffs(X, self.lw(l, f"hc_{which}_fn"), self.lw(l, f"hc_{which}_scale"),
                             self.lw(l, f"hc_{which}_base"), self.hc, r["hc_sinkhorn_iters"], r["hc_eps"],
                             c.norm_eps)

    # --------------------------------------------------------------------------------------------
    # One layer over a set of rows (layer-major)
    # --------------------------------------------------------------------------------------------

    def layer_write(self, st, l, h, rows, window=True, pool=True):
        """Write what rows contribute to layer l's state: window entries and (kv source) pool entries."""
        c = self.cfg
        for p in rows:
            u = self.attn_input(l, h[p])
            if window:
                st.window[l][p] = self.window_entry(l, u, p)
            if pool and c.is_kv_source(l):
                self.pool_feed(l, st.pools[l], u, p)

    def window_of(self, st, l, p, floor):
        """Window entries of the query at p: [max(floor, p-W+1, lowest existing), p] (§3.6)."""
        lo = max(floor, p - self.cfg.window + 1, 0)
        ps = [t for t in range(lo, p + 1) if t in st.window[l]]
        if not ps or ps[-1] != p or ps != list(range(ps[0], p + 1)):
            raise RuntimeError(f"layer {l} row {p}: window entries missing or not contiguous: {ps}")
        return [st.window[l][t] for t in ps]

    def layer_attend(self, st, l, h, rows, floor, ctx):
        """Attention + FFN sub-layers of layer l for rows; returns dict p -> new h."""
        c = self.cfg
        out = {}
        ctx.units += len(rows)
        for p in rows:
            x = h[p]
            if self.hc > 1:
                X, a = self.split(x)
                pre, post, comb = self.hc_coeffs(l, X, "attn")
            u = self.attn_input(l, x)
            cq, q = self.query(l, u, p)
            entries = self.window_of(st, l, p, floor)
            if c.ratio(l) > 0:
                sel = self.select_entries(st, l, p, cq, u, ctx)
                pool = st.pools[c.kv_source_of(l)]
                entries = entries + [pool.entries[j] for j in sel]
            o = self.sink_attention(q, entries, self.lw(l, "attn.sink"))
            o = self.unrotate(l, o, p)
            if self.hc == 1:
                x = x + self.grouped_output(l, o)
                x = x + self.ffn(l, rms_norm(x, self.lw(l, "ffn_norm.weight"), c.norm_eps), ctx)
                out[p] = x
                continue
            # single-pass mHC (v41/mhc.py): the FFN's input collapses the streams with the
            # attention's pre; the FFN's own pre is carried to the next layer's attention
            X = mhc.stream_update(X, self.grouped_output(l, o), post, comb)
            pre_f, post_f, comb_f = self.hc_coeffs(l, X, "ffn")
            y = self.ffn(l, rms_norm(mhc.collapse(X, pre), self.lw(l, "ffn_norm.weight"), c.norm_eps), ctx)
            out[p] = self.join(mhc.stream_update(X, y, post_f, comb_f), pre_f)
        return out

    # --------------------------------------------------------------------------------------------
    # Execution modes (§5)
    # --------------------------------------------------------------------------------------------

    def _append_tokens(self, st, tokens):
        P0 = st.pos
        st.tokens.extend(int(t) for t in tokens)
        st.pos += len(tokens)
        rows = list(range(P0, st.pos))
        h = {p: self.embed(st.tokens[p]) for p in rows}
        return rows, h

    def _encoder(self, st, rows, h, floor, ctx, pool=True):
        """Layers 0..E-1 for rows; stores H_E of the rows; returns H_E dict of the rows."""
        for l in range(self.cfg.E):
            if l in self.engram:
                h = self.engram_add(st, l, dict(h), rows)
            self.layer_write(st, l, h, rows, pool=pool)
            h = self.layer_attend(st, l, h, rows, floor, ctx)
        for p in rows:
            st.H_E[p] = h[p]
        return h

    def prefill_full(self, st, tokens, ctx=None):
        """`full`: every new row passes all L layers, windows never truncated. Returns logits of
        the last new row. Decoding one token is prefill_full with one token."""
        c = self.cfg
        ctx = ctx or PassCtx()
        rows, h = self._append_tokens(st, tokens)
        for l in range(c.L):
            if l == c.E:
                for p in rows:
                    st.H_E[p] = h[p]
            if l in self.engram:
                h = self.engram_add(st, l, dict(h), rows)
            self.layer_write(st, l, h, rows)
            h = self.layer_attend(st, l, h, rows, 0, ctx)
        return self.logits(h[rows[-1]])

    def decode(self, st, token, ctx=None):
        """Decode: the new token passes all L layers, attending to whatever state exists."""
        return self.prefill_full(st, [token], ctx)

    def prefill_bounded(self, st, tokens, paper=False, ctx=None):
        """`bounded` (Decoder SWA Bounded Replay): encoder for the new rows; layer E's pool and
        window entries for the new rows (projections of H_E); then layers E..L-1 only for the
        last R = min(W, N) rows of the whole sequence, floor N-R in layers after E (and in layer E
        too when paper=True). Returns logits of the last row."""
        c = self.cfg
        ctx = ctx or PassCtx()
        rows, h = self._append_tokens(st, tokens)
        self._encoder(st, rows, h, 0, ctx)
        N = st.pos
        self.layer_write(st, c.E, st.H_E, rows)            # layer E pool + window entries, all new rows
        R = min(c.W, N)
        rep = list(range(N - R, N))
        missing = [p for p in rep if p not in st.H_E]
        if missing:
            raise RuntimeError(f"bounded: H_E missing for rows {missing}")
        h = {p: st.H_E[p] for p in rep}
        h = self.layer_attend(st, c.E, h, rep, N - R if paper else 0, ctx)
        for l in range(c.E + 1, c.L):
            self.layer_write(st, l, h, rep)
            h = self.layer_attend(st, l, h, rep, N - R, ctx)
        return self.logits(h[N - 1])

    def prefill_exact(self, st, tokens, ctx=None):
        """`exact`: encoder for all rows, layer E's pool and window entries for all; decoder
        layer l only for the last min(N, W + (L-1-l)(W-1)) rows (the staircase). From an empty state."""
        c = self.cfg
        assert st.pos == 0, "prefill_exact starts from an empty sequence"
        ctx = ctx or PassCtx()
        rows, h = self._append_tokens(st, tokens)
        N = st.pos
        self._encoder(st, rows, h, 0, ctx)
        self.layer_write(st, c.E, st.H_E, rows)
        h = dict(st.H_E)
        for l in range(c.E, c.L):
            if l > c.E:
                self.layer_write(st, l, h, sorted(h))       # rows that passed layer l-1
            n_l = c.exact_rows(l, N)
            pass_rows = list(range(N - n_l, N))
            h = self.layer_attend(st, l, h, pass_rows, 0, ctx)
        return self.logits(h[N - 1])

    def encoder_replay(self, st, ctx=None):
        """Encoder SWA Bounded Replay of the prefix P = st.pos (reading 9): rows [P-R, P),
        R = min(W, P), pass layers 0..E-1 with floor P-R, pools used as cached (never recomputed);
        regenerates encoder window entries, H_E of those rows, and layer E's window entries."""
        c = self.cfg
        ctx = ctx or PassCtx()
        P = st.pos
        R = min(c.W, P)
        rows = list(range(P - R, P))
        h = {p: self.embed(st.tokens[p]) for p in rows}
        self._encoder(st, rows, h, P - R, ctx, pool=False)
        self.layer_write(st, c.E, st.H_E, rows, pool=False)


# --------------------------------------------------------------------------------------------
# Tensor names (§4)
# --------------------------------------------------------------------------------------------

def expected_shapes(c: Config):
    d, cdim, V = c.dim, c.head_dim, c.vocab_size
    s = {"embed.weight": [V, d], "norm.weight": [d], "head.weight": [V, d]}
    for l in range(c.n_layers):
        p = f"layers.{l}."
        s[p + "attn_norm.weight"] = [d]
        s[p + "ffn_norm.weight"] = [d]
        s[p + "attn.wq_a.weight"] = [c.q_lora_rank, d]
        s[p + "attn.q_norm.weight"] = [c.q_lora_rank]
        s[p + "attn.wq_b.weight"] = [c.n_heads * cdim, c.q_lora_rank]
        s[p + "attn.wkv.weight"] = [cdim, d]
        s[p + "attn.kv_norm.weight"] = [cdim]
        s[p + "attn.sink"] = [c.n_heads]
        s[p + "attn.wo_a.weight"] = [c.o_groups, c.o_group_rank, (c.n_heads // c.o_groups) * cdim]
        s[p + "attn.wo_b.weight"] = [d, c.o_groups * c.o_group_rank]
        if c.hc > 1:  # mHC coefficients (F32, no .weight suffix, as released)
            hc = c.hc
            for which in ("attn", "ffn"):
                s[p + f"hc_{which}_fn"] = [(2 + hc) * hc, hc * d]
                s[p + f"hc_{which}_base"] = [(2 + hc) * hc]
                s[p + f"hc_{which}_scale"] = [3]
        if c.is_kv_source(l):
            s[p + "attn.compressor.wkv.weight"] = [cdim, d]
            if c.ratio(l) == 2:
                s[p + "attn.compressor.wz.weight"] = [cdim, d]
            s[p + "attn.compressor.norm.weight"] = [cdim]
            s[p + "attn.indexer.wk.weight"] = [c.index_head_dim, cdim]
            s[p + "attn.indexer.k_norm.weight"] = [c.index_head_dim]
        if c.is_index_source(l):
            s[p + "attn.indexer.wq_b.weight"] = [c.index_heads * c.index_head_dim, c.q_lora_rank]
            s[p + "attn.indexer.weights_proj.weight"] = [c.index_heads, d]
        if l in c.released["engram_layers"]:  # released names (contract §8.1); table F32 rows here
            r, hc = c.released, c.hc
            k = r["engram_table_rows"][r["engram_layers"].index(l)]
            s[p + "engram.embed.weight"] = [k, r["engram_head_dim"]]
            s[p + "engram.q_weight"] = [hc, d]
            s[p + "engram.k_weight"] = [hc, d]
            s[p + "engram.wkv.weight"] = [(hc + 1) * d, (r["engram_max_ngram"] - 1) * r["engram_n_heads"] * r["engram_head_dim"]]
        I = c.moe_inter_dim
        if c.n_routed_experts == 0:
            s[p + "ffn.w1.weight"] = [I, d]
            s[p + "ffn.w2.weight"] = [d, I]
            s[p + "ffn.w3.weight"] = [I, d]
        else:
            s[p + "ffn.gate.weight"] = [c.n_routed_experts, d]
            s[p + "ffn.gate.bias"] = [c.n_routed_experts]
            names = [f"experts.{e}." for e in range(c.n_routed_experts)]
            if c.n_shared_experts:
                names.append("shared.")
            for n in names:
                s[p + f"ffn.{n}w1.weight"] = [I, d]
                s[p + f"ffn.{n}w2.weight"] = [d, I]
                s[p + f"ffn.{n}w3.weight"] = [I, d]
    return s


def load_model(model_dir, dtype=torch.float64):
    """A model folder in our layout (config.json + model.safetensors) or in the released layout
    (model.safetensors.index.json: read through v41/write_released.load_released, dequantised)."""
    import safetensors_io
    if os.path.isfile(os.path.join(model_dir, "model.safetensors.index.json")):
        import write_released
        cfg, tensors = write_released.load_released(model_dir)
        return Model(cfg, tensors, dtype)
    cfg = Config.load(os.path.join(model_dir, "config.json"))
    tensors, _ = safetensors_io.load(os.path.join(model_dir, "model.safetensors"))
    return Model(cfg, tensors, dtype)
