"""RoPE of DeepSeek-V4.1-Flash: plain on ratio-0 layers (theta = rope_theta), YaRN over
compress_rope_theta on compressed layers (ratio > 0); interleaved pairs (2i, 2i+1) on the last
qk_rope_head_dim dims. Float64.

From ../shared/spec/v41-released-notes.md §1.1 (dims 448..511, theta 10000 / 160000, YaRN factor
16, original 65536, beta_fast 32, beta_slow 1) and §2.2 (query and SWA entry at p, compressed entry j
at j*m, output de-rotated at -p). Facts the notes leave open, taken (facts, not code) from a public
line-cited port of the released inference/model.py (jayleaton/deepseek-v41-tensorfold-spark,
deepseek_v41 reference port, precompute_freqs_cis M:368-389, config.py yarn_bounds), which match
DeepSeek-V3's published precompute_freqs_cis:
  * inv_freq_i = base^(-2i/r), i = 0 .. r/2 - 1;
  * correction dim(rot) = r * ln(original / (rot * 2 pi)) / (2 ln base);
    low = max(floor(dim(beta_fast)), 0), high = min(ceil(dim(beta_slow)), r - 1);
  * ramp_i = clamp((i - low) / max(high - low, 1e-3), 0, 1); f_i = f_i / factor * ramp_i +
    f_i * (1 - ramp_i) (the fast, low-i pairs keep their frequency, the slow ones are divided);
  * in V4.1 YaRN applies on compressed layers whenever original_max_position_embeddings > 0
    (V3 applied it only when max_seq_len > original);
  * the released tables are float32 (torch.polar); this reference computes angles in float64.
Open [?] mscale: V3 multiplied the softmax scale by (0.1 * mscale * ln(factor) + 1)^2 when
max_seq_len > original; the V4.1 port uses head_dim^-0.5 with no mscale. `yarn_mscale` is given
for the V3 formula; whether V4.1 applies it must be checked against the released model.py.
"""
import math

import torch


def plain_inv_freq(r, base):
    """[r/2] inverse frequencies base^(-2i/r)."""
    i = torch.arange(r // 2, dtype=torch.float64)
    return torch.pow(torch.tensor(float(base), dtype=torch.float64), -2.0 * i / r)


def yarn_correction_dim(r, base, original, rotations):
    """The (fractional) pair index whose wavelength makes `rotations` turns over `original` tokens."""
    return r * math.log(original / (rotations * 2 * math.pi)) / (2 * math.log(base))


def yarn_bounds(r, base, original, beta_fast, beta_slow):
    """(low, high) pair indices of the YaRN ramp."""
    low = math.floor(yarn_correction_dim(r, base, original, beta_fast))
    high = math.ceil(yarn_correction_dim(r, base, original, beta_slow))
    return max(low, 0), min(high, r - 1)


def yarn_ramp(r, low, high):
    """[r/2] ramp_i = clamp((i - low) / max(high - low, 1e-3), 0, 1)."""
    i = torch.arange(r // 2, dtype=torch.float64)
    return torch.clamp((i - low) / max(high - low, 1e-3), 0.0, 1.0)


def yarn_inv_freq(r, base, factor, original, beta_fast, beta_slow):
    """[r/2] YaRN inverse frequencies: f / factor where ramp = 1, f where ramp = 0, blended between."""
    f = plain_inv_freq(r, base)
    if original <= 0:
        return f
    low, high = yarn_bounds(r, base, original, beta_fast, beta_slow)
    ramp = yarn_ramp(r, low, high)
    return f / factor * ramp + f * (1.0 - ramp)


def yarn_mscale(factor, mscale):
    """V3's attention-temperature factor 0.1 * mscale * ln(factor) + 1 (1 when factor <= 1). [?] for V4.1."""
    if factor <= 1:
        return 1.0
    return 0.1 * mscale * math.log(factor) + 1.0


def layer_inv_freq(ratio, r, rope_theta, compress_rope_theta, rope_scaling):
    """The frequency table of a layer: plain over rope_theta when ratio == 0, else YaRN over
    compress_rope_theta. rope_scaling: dict with factor, original_max_position_embeddings,
    beta_fast, beta_slow (the released config's keys)."""
    if ratio == 0:
        return plain_inv_freq(r, rope_theta)
    s = rope_scaling
    return yarn_inv_freq(r, compress_rope_theta, float(s["factor"]), int(s["original_max_position_embeddings"]),
                         float(s["beta_fast"]), float(s["beta_slow"]))


def rotate(x, pos, inv_freq):
    """Rot(pos) on the last r = 2 * len(inv_freq) dims of x (any leading shape), interleaved pairs:
    (x0, x1) -> (x0 cos - x1 sin, x0 sin + x1 cos), angle pos * inv_freq_i. Rot(-p) undoes Rot(p)."""
    r = 2 * inv_freq.shape[0]
    ang = float(pos) * inv_freq.to(torch.float64)
    cos, sin = torch.cos(ang).to(x.dtype), torch.sin(ang).to(x.dtype)
    head, tail = x[..., :-r], x[..., -r:]
    x0, x1 = tail[..., 0::2], tail[..., 1::2]
    out = torch.stack([x0 * cos - x1 * sin, x0 * sin + x1 * cos], dim=-1).reshape(tail.shape)
    return torch.cat([head, out], dim=-1)
