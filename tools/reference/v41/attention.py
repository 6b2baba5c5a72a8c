"""The attention sub-layer of DeepSeek-V4.1-Flash as released, in float64, over stored (quantised)
entries: query, sliding-window entry, one softmax over window and selected pool entries with the
sink, de-rotation, grouped output.

From ../shared/spec/v41-released-notes.md §2.2 [C:REF Attention.forward, kernel.py sparse_attn; R4
§2.3.3]: c^Q = RMSNorm_q(W^DQ u); q_h = Rot(p)[(W^UQ c^Q)_h] with no per-head renorm in V4.1 [C:REF;
?: a vLLM kernel name suggests one]; e_t = Rot(p)[RMSNorm_kv(W^KV u)] is key and value, stored FP8
(E4M3 with UE8M0 per 32); window of a query at p: positions max(floor, p - W + 1) .. p; z = q_h . e /
sqrt(c); o_h = sum exp(z) e / (sum exp(z) + exp(sink_h)) over window entries and the top-k pool
entries together (duplicates not removed); o_h's rope dims de-rotated by Rot(-p); W^Oa block-diagonal
per group of n_h / g heads (weight [g * d_g, (n_h / g) * c], as the port views it), then W^Ob.
Facts not in the notes, from the line-cited port (jayleaton/deepseek-v41-tensorfold-spark, M:700-789,
K:355-387): the softmax's running max includes the sink only through the denominator (an exact
rewriting, no numerical difference in float64); the window entry is quantised after the rotation.

Shapes: u [d], q [n_h, c], entries [n_e, c], sink [n_h], wo_a [g * d_g, (n_h / g) * c], wo_b [d, g * d_g].
"""
import math

import torch

import quant
from mhc import rms_norm
from rope import rotate


def query(u, wq_a, q_norm, wq_b, n_heads, p, inv_freq, eps):
    """(c^Q [d_c], q [n_h, c]): the low-rank query, normalised, expanded per head and rotated at p."""
    cq = rms_norm(wq_a @ u, q_norm, eps)
    q = (wq_b @ cq).reshape(n_heads, -1)
    return cq, torch.stack([rotate(q[h], p, inv_freq) for h in range(n_heads)])


def swa_entry(u, wkv, kv_norm, p, inv_freq, eps, quantise=True):
    """e_t [c] = Rot(p)[RMSNorm_kv(W^KV u)], FP8 E4M3 with UE8M0 per 32 when quantise."""
    e = rotate(rms_norm(wkv @ u, kv_norm, eps), p, inv_freq)
    return quant.qdq_fp8_ue8m0(e) if quantise else e


def window_positions(p, window, floor=0):
    """Positions a query at p sees in its layer's window: max(floor, p - window + 1) .. p."""
    return list(range(max(floor, p - window + 1), p + 1))


def sink_attention(q, entries, sink):
    """o [n_h, c]: per head, sum_e exp(z_e) e / (sum_e exp(z_e) + exp(sink_h)), z_e = q_h . e / sqrt(c).
    Computed with the max subtracted (max over z and the sink) for range, an exact rewriting."""
    c = q.shape[-1]
    out = []
    for h in range(q.shape[0]):
        z = (entries @ q[h]) / math.sqrt(c)
        m = torch.max(torch.cat([z, sink[h:h + 1]]))
        w = torch.exp(z - m)
        out.append((w.unsqueeze(-1) * entries).sum(0) / (w.sum() + torch.exp(sink[h] - m)))
    return torch.stack(out)


def grouped_output(o, p, inv_freq, wo_a, wo_b, o_groups):
    """y [d]: de-rotate every head's rope dims at -p, W^Oa per group of heads, then W^Ob."""
    n_h = o.shape[0]
    o = torch.stack([rotate(o[h], -p, inv_freq) for h in range(n_h)])
    per = n_h // o_groups
    d_g = wo_a.shape[0] // o_groups
    parts = []
    for g in range(o_groups):
        parts.append(wo_a[g * d_g:(g + 1) * d_g] @ o[g * per:(g + 1) * per].reshape(-1))
    return wo_b @ torch.cat(parts)
