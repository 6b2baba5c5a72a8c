"""MoE of DeepSeek-V4.1-Flash as released, in float64: routing scores, selection bias,
norm_topk_prob, routed_scaling_factor, shared experts, clamped SwiGLU.

From ../shared/spec/v41-released-notes.md §2.3 [C:REF Gate/Expert/MoE] and §1.1 (scoring_func
sqrtsoftplus, bias used only for selection, scale 1.5, 1 shared expert, swiglu_limit 10).
Facts the notes leave open, taken (facts, not code) from a public line-cited port of the released
inference/model.py (jayleaton/deepseek-v41-tensorfold-spark, deepseek_v41 reference port, M:809-851,
M:886-904):
  * the gate logits are divided by `gate_temp` (config, 1.0 when absent) before scoring;
  * top-k ranks score + bias (ties to the lower expert id), the weights are the UNBIASED scores of
    the chosen experts; with norm_topk_prob (and k > 1) they are divided by (their sum + 1e-20);
    then multiplied by routed_scaling_factor;
  * the clamp: gate branch W1 x clamped from ABOVE only (min(W1 x, limit)), up branch W3 x
    clamped on BOTH sides (clamp(W3 x, -limit, limit)); limit <= 0 means no clamp; the shared
    experts use the same clamped SwiGLU (M:845-848, M:886-887);
  * the routing weight multiplies the SwiGLU output BEFORE W2 (M:849-851); in exact arithmetic
    this equals weighting the expert's output.
Open [?], two readings of the normalisation: V4's released model.py (quoted by several public
ports, e.g. "Port of inference/model.py:587-606") normalises whenever score_func != "softmax", by the
plain sum, whatever k; the V4.1 port above reads norm_topk_prob and skips k = 1, adding 1e-20. For
the released model (sqrtsoftplus, norm_topk_prob true, k 6 and 3) both give the same weights up to
the 1e-20; they differ for k = 1 (V4: omega = routed_scaling_factor; V4.1 port: omega =
routed_scaling_factor * s_e) and for softmax with norm_topk_prob. This file follows the V4.1 port
(`expert_weights`); a reduced config with one expert per token must say which it means.

Shapes: one token. u [d], gate_w [n_routed, d], bias [n_routed], w1/w3 [inter, d], w2 [d, inter].
"""
import torch

SCORING = ("sqrtsoftplus", "sigmoid", "softmax")


def softplus(z):
    """log(1 + exp(z)), computed stably (exact formula, no threshold cut-off)."""
    return torch.clamp(z, min=0) + torch.log1p(torch.exp(-z.abs()))


def routing_scores(logits, scoring_func):
    """s [n_routed] from the gate logits: sqrt(softplus(z)), sigmoid(z) or softmax(z)."""
    if scoring_func == "sqrtsoftplus":
        return torch.sqrt(softplus(logits))
    if scoring_func == "sigmoid":
        return torch.sigmoid(logits)
    if scoring_func == "softmax":
        return torch.softmax(logits, dim=-1)
    raise ValueError(f"scoring_func: expected one of {SCORING}, found {scoring_func!r}")


def select_experts(scores, bias, k):
    """Indices [k] of the k largest scores + bias (bias may be None), ties to the lower id.
    The bias decides selection only (notes §2.3)."""
    ranked = scores if bias is None else scores + bias
    ids = sorted(range(len(ranked)), key=lambda e: (-float(ranked[e]), e))
    return ids[:k]


def expert_weights(scores, ids, norm_topk_prob, routed_scaling_factor):
    """omega [k]: the chosen experts' unbiased scores, normalised by (sum + 1e-20) when
    norm_topk_prob and k > 1, times routed_scaling_factor."""
    w = scores[ids]
    if norm_topk_prob and len(ids) > 1:
        w = w / (w.sum() + 1e-20)
    return w * routed_scaling_factor


def route(u, gate_w, bias, k, scoring_func, norm_topk_prob, routed_scaling_factor, gate_temp=1.0):
    """(ids [k], omega [k]) for one token's normalised input u [d]."""
    scores = routing_scores((gate_w @ u) / gate_temp, scoring_func)
    ids = select_experts(scores, bias, k)
    return ids, expert_weights(scores, ids, norm_topk_prob, routed_scaling_factor)


def clamped_swiglu(g, v, limit):
    """SiLU(min(g, limit)) * clamp(v, -limit, limit); no clamp when limit <= 0.
    g = W1 x (gate branch), v = W3 x (up branch)."""
    if limit > 0:
        g = torch.clamp(g, max=limit)
        v = torch.clamp(v, min=-limit, max=limit)
    return torch.nn.functional.silu(g) * v


def expert_ffn(u, w1, w2, w3, limit, weight=1.0):
    """W2 (weight * SwiGLU_clamped(W1 u, W3 u))  [d]; weight is the routing weight (1 for shared)."""
    return w2 @ (weight * clamped_swiglu(w1 @ u, w3 @ u, limit))


def moe(u, gate_w, bias, experts, shared, k, scoring_func, norm_topk_prob, routed_scaling_factor,
        swiglu_limit, gate_temp=1.0):
    """y = sum_{e in top-k} omega_e FFN_e(u) + sum_shared FFN_s(u)  [d].
    experts: list of (w1, w2, w3) per routed expert; shared: list of (w1, w2, w3) (n_shared_experts)."""
    ids, omega = route(u, gate_w, bias, k, scoring_func, norm_topk_prob, routed_scaling_factor, gate_temp)
    y = torch.zeros_like(u)
    for slot, e in enumerate(ids):
        w1, w2, w3 = experts[e]
        y = y + expert_ffn(u, w1, w2, w3, swiglu_limit, omega[slot])
    for w1, w2, w3 in shared:
        y = y + expert_ffn(u, w1, w2, w3, swiglu_limit)
    return y
