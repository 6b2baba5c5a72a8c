"""Quantise-dequantise of the KV that DeepSeek-V4.1-Flash stores, with bit-level codecs written from
the format definitions.

Formats (OCP Microscaling / NVIDIA FP8 definitions):
  * E2M1 (FP4): s|e1 e0|m, bias 1; e = 0: (-1)^s * m/2 (0, 0.5); else (-1)^s * 2^(e-1) * (1 + m/2).
    Magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6. No inf, no NaN.
  * E4M3 ("fn"): s|eeee|mmm, bias 7; e = 0: (-1)^s * m/8 * 2^-6; else (-1)^s * 2^(e-7) * (1 + m/8);
    s.1111.111 is NaN (no inf); largest finite 448, smallest subnormal 2^-9.
  * UE8M0: an unsigned 8-bit exponent, 2^(b - 127); b = 255 is NaN.

What is stored where (../shared/spec/v41-released-notes.md §1.1, §1.3, §2.2 [C:REF, R41]):
  * compressed main KV entry (512, after RoPE): FP4 E2M1 with one E4M3 scale per 16 channels;
  * index keys (128, after RoPE) and index queries (per head, 128): MXFP4 = E2M1 with one UE8M0
    scale per 32;
  * sliding-window KV (512, after RoPE): FP8 E4M3 with one UE8M0 scale per 32.
The rounding rules, taken (facts, not code) from a public line-cited port of the released
inference/kernel.py (jayleaton/deepseek-v41-tensorfold-spark, deepseek_v41 reference port, act_quant
K:70-86, fp4_act_quant K:155-172, pow2 ceil K:22-33):
  * FP8 per 32: s = 2^ceil(log2(max(amax, 1e-4) * f32(1/448))); code = e4m3_rne(clamp(x / s, -448, 448));
  * FP4 per 16: s = e4m3_rne(max(amax, 6 * 2^-9) / 6) (so s >= 2^-9, the smallest E4M3 code, never 0);
    code = e2m1_rne(clamp(x / s, -6, 6));
  * FP4 per 32: s = 2^ceil(log2(max(amax, 6 * 2^-126) * f32(1/6))); code = e2m1_rne(clamp(x / s, -6, 6));
  * every cast rounds to nearest, ties to even (on the mantissa: the even code); values are clamped
    before the cast, so no code saturates or overflows in the cast itself;
  * the whole vector is quantised, the RoPE dims included (the port quantises rope(lat) whole).
Confirmed independently by two other public engines' notes on the released kernel.py: one tests its
compressed-KV quantiser (block 16, E4M3 scale, the 6 * 2^-9 amax floor, all-zero blocks) against
the reference fp4_act_quant(scale_dtype=e4m3); another's CPU stand-in for kernel.py describes
power-of-two scales 2^ceil(log2(amax / max)), E4M3-rounded latent scales, the amax floors and
round-to-nearest-even onto the E4M3 and E2M1 grids.
The released kernel computes the scale and x / s in float32: so does this file (the inputs are
cast to float32 first, exactly as an engine holding float32 activations would), so the codes are the
released ones; the dequantised values code * s are exact in float64 and returned in float64.
Two FP4 codes per byte, element 2i in the low nibble (pack_e2m1), as a public transcription of the
released Engram FP4 table reader unpacks them; [?] confirm for the I8 expert weights against the
released convert.py. The KV byte layout in the released cache is not needed by the reference.
"""
import math

import torch

E2M1_MAX = 6.0
E4M3_MAX = 448.0
E4M3_NAN = 0x7F


# ---- bit-level codecs (scalars, from the definitions) ----

def decode_e2m1(code):
    """float value of a 4-bit E2M1 code (0..15)."""
    if not 0 <= code <= 15:
        raise ValueError(f"E2M1 code: expected 0..15, found {code}")
    s, e, m = code >> 3, (code >> 1) & 3, code & 1
    mag = m / 2 if e == 0 else 2.0 ** (e - 1) * (1 + m / 2)
    return -mag if s else mag


def decode_e4m3(code):
    """float value of an 8-bit E4M3 (fn) code (0..255); NaN for s.1111.111."""
    if not 0 <= code <= 255:
        raise ValueError(f"E4M3 code: expected 0..255, found {code}")
    s, e, m = code >> 7, (code >> 3) & 15, code & 7
    if e == 15 and m == 7:
        return math.nan
    mag = m / 8 * 2.0 ** -6 if e == 0 else 2.0 ** (e - 7) * (1 + m / 8)
    return -mag if s else mag


def decode_ue8m0(code):
    """2^(code - 127) for code 0..254; NaN for 255."""
    if not 0 <= code <= 255:
        raise ValueError(f"UE8M0 code: expected 0..255, found {code}")
    return math.nan if code == 255 else 2.0 ** (code - 127)


def _rne_on_grid(mag, codes_by_value):
    """The code of the value nearest to mag >= 0 among (value, code) pairs sorted by value; at a tie
    the even code (mantissa LSB 0) wins; beyond the largest value the largest code (saturation)."""
    if mag >= codes_by_value[-1][0]:
        return codes_by_value[-1][1]
    for (lo, clo), (hi, chi) in zip(codes_by_value, codes_by_value[1:]):
        if lo <= mag <= hi:
            if mag - lo < hi - mag:
                return clo
            if hi - mag < mag - lo:
                return chi
            return clo if clo % 2 == 0 else chi
    raise AssertionError("unreachable")


_E2M1_POS = [(decode_e2m1(c), c) for c in range(8)]
_E4M3_POS = [(decode_e4m3(c), c) for c in range(127)]     # 0x00 .. 0x7E (448); 0x7F is NaN


def encode_e2m1(x):
    """E2M1 code of a float: round to nearest, ties to even, saturating at +-6; sign kept (-0 -> 8)."""
    x = float(x)
    if math.isnan(x):
        raise ValueError("E2M1 has no NaN code")
    return (8 if math.copysign(1.0, x) < 0 else 0) | _rne_on_grid(abs(x), _E2M1_POS)


def encode_e4m3(x):
    """E4M3 (fn) code of a float: round to nearest, ties to even, saturating at +-448; NaN -> 0x7F."""
    x = float(x)
    if math.isnan(x):
        return E4M3_NAN
    return (0x80 if math.copysign(1.0, x) < 0 else 0) | _rne_on_grid(abs(x), _E4M3_POS)


def encode_ue8m0(x):
    """UE8M0 code of a positive power of two 2^k, -127 <= k <= 127."""
    m, e = math.frexp(float(x))
    if x <= 0 or m != 0.5 or not -127 <= e - 1 <= 127:
        raise ValueError(f"UE8M0: expected a power of two 2^-127..2^127, found {x!r}")
    return e - 1 + 127


def pack_e2m1(codes):
    """Bytes from an even number of E2M1 codes: element 2i in the low nibble, 2i+1 in the high."""
    if len(codes) % 2:
        raise ValueError(f"pack_e2m1: expected an even number of codes, found {len(codes)}")
    return bytes(codes[i] | (codes[i + 1] << 4) for i in range(0, len(codes), 2))


def unpack_e2m1(data):
    """The E2M1 codes of packed bytes (inverse of pack_e2m1)."""
    out = []
    for b in data:
        out += [b & 15, b >> 4]
    return out


# ---- vectorised rounding (values), used by the quantise-dequantise functions ----

def _f32(x):
    return x.to(torch.float32)


def pow2_ceil_f32(t):
    """2^ceil(log2 t) for positive normal float32 t (the released exponent-plus-one-if-mantissa trick)."""
    m, e = torch.frexp(_f32(t))                     # t = m * 2^e, m in [0.5, 1)
    k = torch.where(m == 0.5, e - 1, e)
    return torch.ldexp(torch.ones_like(t, dtype=torch.float64), k.to(torch.float64))


def _rne_grid(a, step):
    """round(a / step) * step with ties to even (torch.round is half-to-even); a, step >= 0, exact."""
    return torch.round(a / step) * step


def round_e2m1(v):
    """Nearest E2M1 value (ties to even) of |v| <= 6, sign kept. The grid step is 0.5 below 2,
    1 below 4, 2 up to 6: within each binade the even code is the even multiple of the step."""
    a = v.abs()
    step = torch.where(a < 2, torch.full_like(a, 0.5), torch.where(a < 4, torch.ones_like(a), torch.full_like(a, 2.0)))
    return torch.copysign(_rne_grid(a, step), v)


def round_e4m3(v):
    """Nearest E4M3 value (ties to even) of |v| <= 448, sign kept: step 2^(floor(log2|v|) - 3) for
    normals (|v| >= 2^-6), 2^-9 for subnormals."""
    a = v.abs().to(torch.float64)
    _, e = torch.frexp(torch.where(a > 0, a, torch.ones_like(a)))   # a = m * 2^e, floor(log2 a) = e - 1
    k = torch.where(a >= 2.0 ** -6, (e - 1 - 3).to(torch.float64), torch.full_like(a, -9.0))
    step = torch.ldexp(torch.ones_like(a), k)
    return torch.copysign(_rne_grid(a, step), v.to(torch.float64))


def _blocks(x, block):
    if x.shape[-1] % block:
        raise ValueError(f"quantiser: last dim {x.shape[-1]} is not a multiple of the block {block}")
    return x.reshape(*x.shape[:-1], x.shape[-1] // block, block)


# ---- the three stored formats: quantise-dequantise, and their codes ----

def fp8_ue8m0_scales(x, block=32):
    """[..., n/block] float64 power-of-two scales of the FP8 per-32 format (SWA KV)."""
    amax = _blocks(_f32(x), block).abs().amax(-1)
    t = torch.clamp(amax, min=1e-4) * torch.tensor(1 / 448, dtype=torch.float32)
    return pow2_ceil_f32(t)


def qdq_fp8_ue8m0(x, block=32):
    """x [..., n] -> the values the released forward reads back (float64): FP8 E4M3 per 32, UE8M0 scale."""
    s = fp8_ue8m0_scales(x, block).unsqueeze(-1)
    g = _blocks(_f32(x), block).to(torch.float64)
    q = round_e4m3(torch.clamp(g / s, -E4M3_MAX, E4M3_MAX))   # g / s: exact (s a power of two)
    return (q * s).reshape(x.shape)


def fp4_e4m3_scales(x, block=16):
    """[..., n/block] float64 E4M3-representable scales of the FP4 per-16 format (main KV)."""
    amax = _blocks(_f32(x), block).abs().amax(-1)
    t = torch.clamp(amax, min=6 * 2.0 ** -9) / torch.tensor(6.0, dtype=torch.float32)   # float32 division
    if bool((t > E4M3_MAX).any()):
        # the released cast's behaviour past 448 (NaN in torch's cast, 448 under a saturating
        # hardware cast) is not established: refuse rather than guess
        raise ValueError(f"FP4 per-16 scale: expected amax <= {6 * E4M3_MAX} per block, found {float(amax.max())}")
    return round_e4m3(t)


def qdq_fp4_e4m3(x, block=16):
    """x [..., n] -> float64 values read back: E2M1 per 16 with an E4M3 scale (compressed main KV)."""
    s = fp4_e4m3_scales(x, block).unsqueeze(-1)
    g = _blocks(_f32(x), block)
    r = (g / s.to(torch.float32)).to(torch.float64)          # float32 division, as released
    return (round_e2m1(torch.clamp(r, -E2M1_MAX, E2M1_MAX)) * s).reshape(x.shape)


def mxfp4_scales(x, block=32):
    """[..., n/block] float64 power-of-two scales of MXFP4 (index keys and queries)."""
    amax = _blocks(_f32(x), block).abs().amax(-1)
    t = torch.clamp(amax, min=6 * 2.0 ** -126) * torch.tensor(1 / 6, dtype=torch.float32)
    return pow2_ceil_f32(t)


def qdq_mxfp4(x, block=32):
    """x [..., n] -> float64 values read back: E2M1 per 32 with a UE8M0 scale (index K and Q)."""
    s = mxfp4_scales(x, block).unsqueeze(-1)
    g = _blocks(_f32(x), block).to(torch.float64)
    return (round_e2m1(torch.clamp(g / s, -E2M1_MAX, E2M1_MAX)) * s).reshape(x.shape)


def codes_fp4_e4m3(x, block=16):
    """One row x [n] -> (E2M1 codes [n], E4M3 scale codes [n/16]): the stored form of a main-KV entry."""
    s = fp4_e4m3_scales(x, block)
    v = qdq_fp4_e4m3(x, block)
    codes = [encode_e2m1(float(v[i]) / float(s[i // block])) for i in range(x.shape[-1])]
    return codes, [encode_e4m3(float(t)) for t in s]


def codes_mxfp4(x, block=32):
    """One row x [n] -> (E2M1 codes [n], UE8M0 scale codes [n/32]): index keys / queries."""
    s = mxfp4_scales(x, block)
    v = qdq_mxfp4(x, block)
    return [encode_e2m1(float(v[i]) / float(s[i // block])) for i in range(x.shape[-1])], \
        [encode_ue8m0(float(t)) for t in s]


def codes_fp8_ue8m0(x, block=32):
    """One row x [n] -> (E4M3 codes [n], UE8M0 scale codes [n/32]): sliding-window KV."""
    s = fp8_ue8m0_scales(x, block)
    v = qdq_fp8_ue8m0(x, block)
    return [encode_e4m3(float(v[i]) / float(s[i // block])) for i in range(x.shape[-1])], \
        [encode_ue8m0(float(t)) for t in s]


def decode_row(codes, scale_codes, block, value_decoder, scale_decoder):
    """float64 [n] from stored codes: value_decoder(code) * scale_decoder(scale code of its block)."""
    return torch.tensor([value_decoder(c) * scale_decoder(scale_codes[i // block]) for i, c in enumerate(codes)],
                        dtype=torch.float64)
