"""CSA2 compressor and indexer of DeepSeek-V4.1-Flash as released, in float64.

From ../shared/spec/v41-released-notes.md §2.2 [C:REF Compressor, Indexer, select_candidate_blocks;
R41 §2.3]: a KV-source ("Full") layer compresses its attention input u into pool entries, groups of
m = ratio tokens without overlap and without positional bias; an index-source layer scores pool
entries with the lightning indexer; the candidate-source layer keeps the best candidate blocks that
later Reindex layers score inside. Facts the notes leave open, taken (facts, not code) from a public
line-cited port of the released inference/model.py (jayleaton/deepseek-v41-tensorfold-spark,
deepseek_v41 reference port, M:458-485, M:537-610):
  * the compressor's projections `compressor.wkv` (C) and `compressor.wgate` (Z, ratio 2 only) take
    u in full precision (no FP8 activation quantisation); the pooled latent is normalised by
    `compressor.norm`, then the index key is RMSNorm_k(indexer.wk · latent) (pre-RoPE latent);
  * both are rotated at the entry position j·m with the layer's (YaRN) table, then stored
    quantised: the main entry FP4 per 16 (E4M3 scales), the index key MXFP4 per 32;
  * index queries are rotated at p and MXFP4-quantised per head; the head weights
    weights_proj · u are scaled by index_head_dim^-1/2 · index_n_heads^-1/2;
  * ranking ties (top-k entries, candidate blocks) go to the lower index (a stable descending sort);
    the top-k list is then sorted by position; blocks whose best score is -inf are never kept;
  * the top-k list has min(index_topk, visible) entries: when fewer candidates than that exist,
    entries scored -inf (visible, outside the candidate blocks) fill it in position order and are
    attended. Our own model's reading keeps min(index_topk, candidates) instead; the two differ only
    when the candidate blocks hold fewer than index_topk entries (never at the released sizes:
    2048 blocks x 8 >= 512), so reduced configs must pick one: [?] confirm against model.py.

Shapes: C, Z [m, c] (one group's tokens), latent [c], W_k [c_I, c], q_idx [n_I, c_I],
keys [n_entries, c_I], w [n_I]. `quantise=False` gives F32-style (unquantised) entries.
"""
import torch

import quant
from mhc import rms_norm
from rope import rotate

NEG_INF = float("-inf")


def pool_group(C, Z, ratio):
    """The pooled (un-normalised) latent of one group [c]: ratio 2: sum_i softmax_i(Z)[i] * C[i] with
    the softmax over the group's tokens, per channel; ratio 1: C[0] (no Z, no gate)."""
    if ratio == 1:
        return C[0]
    if ratio != 2:
        raise ValueError(f"CSA2 compressor: expected ratio 1 or 2, found {ratio}")
    S = torch.softmax(Z, dim=0)
    return (S * C).sum(dim=0)


class CompressorState:
    """Decode-time compressor of one KV-source layer: tokens arrive one at a time; a ratio-2 group
    is held (its C and Z rows; the released state keeps kv_state and score_state, the scores
    initialised to -inf) until its second token, position p with (p + 1) % 2 == 0, completes it."""

    def __init__(self, ratio):
        if ratio not in (1, 2):
            raise ValueError(f"CSA2 compressor: expected ratio 1 or 2, found {ratio}")
        self.ratio, self.C, self.Z = ratio, [], []

    def push(self, p, C_t, Z_t=None):
        """Add token p; returns (j, pooled [c]) when the token completes entry j, else None."""
        self.C.append(C_t)
        self.Z.append(Z_t)
        if (p + 1) % self.ratio:
            return None
        C = torch.stack(self.C)
        Z = torch.stack(self.Z) if self.ratio == 2 else None
        self.C, self.Z = [], []
        return p // self.ratio, pool_group(C, Z, self.ratio)

    def pending(self):
        """Tokens of an incomplete group held (0 or 1): what a snapshot at an odd boundary must keep."""
        return len(self.C)


def compress_latent(C, Z, ratio, norm_weight, eps):
    """c_j = RMSNorm_c(pool_group(C, Z)) [c]."""
    return rms_norm(pool_group(C, Z, ratio), norm_weight, eps)


def index_key(latent, j, ratio, W_k, k_norm, eps, inv_freq, quantise=True):
    """k^I_j = Rot(j·m)[RMSNorm_k(W_k latent)] [c_I], MXFP4 when quantise."""
    k = rotate(rms_norm(W_k @ latent, k_norm, eps), j * ratio, inv_freq)
    return quant.qdq_mxfp4(k) if quantise else k


def main_entry(latent, j, ratio, inv_freq, quantise=True):
    """ĉ_j = Rot(j·m)[c_j] [c], FP4 with E4M3 scales per 16 when quantise."""
    e = rotate(latent, j * ratio, inv_freq)
    return quant.qdq_fp4_e4m3(e) if quantise else e


def visible_entries(p, ratio):
    """Entries visible to a query at position p: j < floor((p + 1) / m) (the group's last token <= p)."""
    return (p + 1) // ratio


def index_query(qr, p, W_iq, n_heads, head_dim, inv_freq, quantise=True):
    """q^I [n_I, c_I]: heads of W_iq · c^Q, each rotated at p (last rope dims), MXFP4 per head."""
    q = (W_iq @ qr).reshape(n_heads, head_dim)
    q = torch.stack([rotate(q[h], p, inv_freq) for h in range(n_heads)])
    return quant.qdq_mxfp4(q) if quantise else q


def index_weights(u, W_w, n_heads, head_dim):
    """w [n_I] = (W_w u) · head_dim^-1/2 · n_heads^-1/2."""
    return (W_w @ u) * (head_dim ** -0.5) * (n_heads ** -0.5)


def index_scores(q, w, keys, n_visible):
    """I_j = sum_h w_h ReLU(q_h · k_j) for j < n_visible, -inf beyond [n_entries]."""
    out = torch.full((keys.shape[0],), NEG_INF, dtype=keys.dtype)
    for j in range(min(n_visible, keys.shape[0])):
        out[j] = sum(w[h] * torch.relu(q[h] @ keys[j]) for h in range(q.shape[0]))
    return out


def _ranked(values):
    """Indices by value descending, ties to the lower index."""
    return sorted(range(len(values)), key=lambda i: (-float(values[i]), i))


def candidate_mask(scores, n_visible, topk_blocks, block):
    """Boolean [n_entries]: entries in the topk_blocks blocks of best max-score; the block of the
    newest visible entry (n_visible - 1) // block is pinned to +inf; -inf blocks are never kept."""
    n = scores.shape[0]
    n_blocks = (n + block - 1) // block
    best = [max([float(scores[i]) for i in range(b * block, min(n, (b + 1) * block))]) for b in range(n_blocks)]
    if n_visible > 0:
        best[(n_visible - 1) // block] = float("inf")
    keep = [b for b in _ranked(best)[:topk_blocks] if best[b] > NEG_INF]
    mask = torch.zeros(n, dtype=torch.bool)
    for b in keep:
        mask[b * block:min(n, (b + 1) * block)] = True
    return mask


def restrict_to_candidates(scores, mask):
    """A Reindex layer's scores: -inf wherever the candidate source did not keep the entry."""
    return torch.where(mask, scores, torch.full_like(scores, NEG_INF))


def top_k(scores, k, n_visible):
    """The min(k, n_visible) best visible entries (ties to the lower index), ascending by position.
    Entries at -inf still fill the list when fewer finite ones exist, as the released sort does."""
    order = [j for j in _ranked(scores[:n_visible])]
    return sorted(order[:min(k, n_visible)])
