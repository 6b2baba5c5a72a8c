"""Single-pass mHC (manifold-constrained hyper-connections) of DeepSeek-V4.1-Flash, in float64.

Written from ../shared/spec/v41-released-notes.md §2.1 [C:REF Block.forward, R41 §2.4.1]. Facts the
notes leave open were taken (facts, not code) from a public line-cited port of the released
inference/model.py and kernel.py (jayleaton/deepseek-v41-tensorfold-spark,
tensorfold/families/deepseek_v41 reference port; cites model.py M:948-994, kernel.py K:426-458):
  * the mixes are fn · flatten(X), times rsqrt(mean(flatten(X)^2) + rms_norm_eps) (M:952-954);
    the eps is the model's rms_norm_eps, not hc_eps;
  * Sinkhorn: softmax over each row, + hc_eps; divide every column by (its sum + hc_eps) once; then
    hc_sinkhorn_iters - 1 rounds of (rows by (sum + hc_eps), then columns by (sum + hc_eps)) (K:426-458);
  * comb[i, j] maps source stream i to destination stream j: X'_j = post_j y + sum_i comb[i, j] X_i
    (M:962-966);
  * the attention sub-layer's input collapses X with the previous block's FFN pre (a one-hot
    (1, 0, ..., 0) before block 0); the FFN's input collapses with the attention's own pre; the
    final norm collapses with the last FFN pre (M:968-994, M:1241-1272).

Shapes: one token at a time. X [hc, d] (hc = hc_mult streams), fn [(2 + hc) * hc, hc * d],
scale [3], base [(2 + hc) * hc]. Readable rather than fast.
"""
import torch


def rms_norm(x, weight, eps):
    """RMSNorm with a learned weight: x * rsqrt(mean(x^2) + eps) * weight (x [..., d])."""
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def embed_streams(e, hc):
    """The embedding row e [d] copied into every stream: X [hc, d]; and the initial pre-mix
    a = (1, 0, ..., 0) [hc] that the first sub-layer's input uses (notes §2.1)."""
    X = e.unsqueeze(0).repeat(hc, 1)
    a = torch.zeros(hc, dtype=e.dtype)
    a[0] = 1.0
    return X, a


def hc_mixes(X, fn, norm_eps):
    """mu = (fn · x̄) * rsqrt(mean(x̄²) + eps), x̄ = flatten(X) [hc*d]; mu [(2 + hc) * hc]."""
    xbar = X.reshape(-1)
    return (fn @ xbar) * torch.rsqrt(xbar.pow(2).mean() + norm_eps)


def hc_pre_coeffs(mu, scale, base, hc, hc_eps):
    """pre = sigmoid(mu[0:hc] * scale[0] + base[0:hc]) + hc_eps  [hc]."""
    return torch.sigmoid(mu[:hc] * scale[0] + base[:hc]) + hc_eps


def hc_post_coeffs(mu, scale, base, hc):
    """post = 2 * sigmoid(mu[hc:2hc] * scale[1] + base[hc:2hc])  [hc] (no eps)."""
    return 2.0 * torch.sigmoid(mu[hc:2 * hc] * scale[1] + base[hc:2 * hc])


def hc_comb_logits(mu, scale, base, hc):
    """The comb logits reshaped row-major to [hc, hc]: mu[2hc:] * scale[2] + base[2hc:]."""
    return (mu[2 * hc:] * scale[2] + base[2 * hc:]).reshape(hc, hc)


def sinkhorn(logits, iters, hc_eps):
    """comb = Sinkhorn(softmax_row(logits) + eps) [hc, hc], as released (K:426-458):
    columns once, then iters - 1 rounds of rows then columns, every division by (sum + eps).
    The last operation normalises columns, so column sums are 1 up to hc_eps; rows converge."""
    M = torch.softmax(logits, dim=-1) + hc_eps
    M = M / (M.sum(dim=0, keepdim=True) + hc_eps)       # columns: sum over rows i
    for _ in range(iters - 1):
        M = M / (M.sum(dim=1, keepdim=True) + hc_eps)   # rows: sum over columns j
        M = M / (M.sum(dim=0, keepdim=True) + hc_eps)
    return M


def hc_coeffs(X, fn, scale, base, hc, iters, hc_eps, norm_eps):
    """One sub-layer's (pre [hc], post [hc], comb [hc, hc]) from the current stream X [hc, d]."""
    mu = hc_mixes(X, fn, norm_eps)
    pre = hc_pre_coeffs(mu, scale, base, hc, hc_eps)
    post = hc_post_coeffs(mu, scale, base, hc)
    comb = sinkhorn(hc_comb_logits(mu, scale, base, hc), iters, hc_eps)
    return pre, post, comb


def collapse(X, a):
    """sum_i a[i] * X[i]  [d]: the streams mixed with pre coefficients a [hc]."""
    out = torch.zeros_like(X[0])
    for i in range(X.shape[0]):
        out = out + a[i] * X[i]
    return out


def stream_update(X, y, post, comb):
    """X'_j = post[j] * y + sum_i comb[i, j] * X_i for every stream j; X [hc, d], y [d]."""
    hc = X.shape[0]
    rows = []
    for j in range(hc):
        acc = post[j] * y
        for i in range(hc):
            acc = acc + comb[i, j] * X[i]
        rows.append(acc)
    return torch.stack(rows)


def sublayer(X, a_prev, norm_weight, F, hc_params, hc, iters, hc_eps, norm_eps):
    """One single-pass mHC sub-layer (notes §2.1 steps 1-5). hc_params = (fn, scale, base).
    The coefficients come from X as it enters; the input u is X collapsed with the PREVIOUS
    sub-layer's pre. Returns (X', pre) where pre becomes the next sub-layer's a_prev."""
    fn, scale, base = hc_params
    pre, post, comb = hc_coeffs(X, fn, scale, base, hc, iters, hc_eps, norm_eps)
    u = rms_norm(collapse(X, a_prev), norm_weight, norm_eps)
    y = F(u)
    return stream_update(X, y, post, comb), pre


def run_stack(e, blocks, final_norm_weight, hc, iters, hc_eps, norm_eps):
    """A whole block stack for one token with embedding row e [d].

    blocks: list of dicts with keys 'attn', 'ffn' (callables u [d] -> y [d]), 'attn_norm',
    'ffn_norm' ([d] weights), 'hc_attn' and 'hc_ffn' (each a tuple (fn, scale, base)), and
    optionally 'pre_block' (a callable X -> X applied before the block: Engram's place, §2.1).
    Returns h = RMSNorm_final(collapse(X, last pre)) [d], the input of the head.
    """
    X, a = embed_streams(e, hc)
    for b in blocks:
        if b.get("pre_block") is not None:
            X = b["pre_block"](X)
        X, a = sublayer(X, a, b["attn_norm"], b["attn"], b["hc_attn"], hc, iters, hc_eps, norm_eps)
        X, a = sublayer(X, a, b["ffn_norm"], b["ffn"], b["hc_ffn"], hc, iters, hc_eps, norm_eps)
    return rms_norm(collapse(X, a), final_norm_weight, norm_eps)
