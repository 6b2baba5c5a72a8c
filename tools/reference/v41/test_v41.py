"""Self-tests of the V4.1 reference components (no C++):  /usr/bin/python3 tools/reference/v41/test_v41.py
Each expected value is computed here independently (math module, literal tables, closed forms),
never by the function under test. Exit 0 when all pass, 1 on a failure, 77 without torch or numpy."""
import json
import math
import os
import struct
import sys
import tempfile

try:
    import numpy as np
    import torch
except ImportError:
    print("skipped: python3-torch or numpy is not installed")
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import attention  # noqa: E402
import checkpoint  # noqa: E402
import config as v41config  # noqa: E402
import csa  # noqa: E402
import engram  # noqa: E402
import golden_components  # noqa: E402
import mhc  # noqa: E402
import moe  # noqa: E402
import quant  # noqa: E402
import rope  # noqa: E402

F64 = torch.float64
FAILS = []


def check(name, ok, detail=""):
    print(("ok   " if ok else "FAIL ") + name + (f"  ({detail})" if detail else ""))
    if not ok:
        FAILS.append(name)


# ---------------------------------------------------------------- mHC

def _sinkhorn_worst(logit_scale, iters, seed=11, n=50):
    g = torch.Generator().manual_seed(seed)
    worst_row = worst_col = 0.0
    positive = True
    for _ in range(n):
        M = mhc.sinkhorn(logit_scale * torch.randn(4, 4, generator=g, dtype=F64), iters, 1e-6)
        worst_col = max(worst_col, float((M.sum(0) - 1).abs().max()))
        worst_row = max(worst_row, float((M.sum(1) - 1).abs().max()))
        positive &= bool((M > 0).all())
    return worst_row, worst_col, positive


def test_sinkhorn_doubly_stochastic():
    # columns are normalised last, so they sum to 1 up to ~hc_eps after any number of rounds; rows
    # converge geometrically: with unit-scale logits 20 iterations (as released) reach ~hc_eps
    row, col, pos = _sinkhorn_worst(1.0, 20)
    check("sinkhorn 4x4, unit logits, 20 iters, eps 1e-6: doubly stochastic within 1e-5", pos and row < 1e-5 and
          col < 1e-5, f"max |row-1| {row:.2e}, |col-1| {col:.2e}")
    # sharp logits (scale 3) converge slowly: 20 rounds leave rows off (a property of the released
    # iteration count, printed, not a bug); 1000 rounds of the same function reach ~hc_eps
    row20, col20, _ = _sinkhorn_worst(3.0, 20)
    row, col, pos = _sinkhorn_worst(3.0, 1000)
    check("sinkhorn 4x4, logits x3, 1000 iters: doubly stochastic within 1e-5", pos and row < 1e-5 and col < 1e-5,
          f"max |row-1| {row:.2e}, |col-1| {col:.2e}; after the released 20 iters rows are off by up to "
          f"{row20:.2e}, columns {col20:.2e}")


def _hand_sublayer(X, a_prev, w, F, fn, scale, base, hc, iters, hc_eps, eps):
    """One mHC sub-layer with Python floats and lists, from notes §2.1 (independent of mhc.py)."""
    d = len(X[0])
    xbar = [v for row in X for v in row]
    r = 1.0 / math.sqrt(sum(v * v for v in xbar) / len(xbar) + eps)
    mu = [sum(fn[k][i] * xbar[i] for i in range(len(xbar))) * r for k in range(len(fn))]
    sig = lambda z: 1.0 / (1.0 + math.exp(-z))  # noqa: E731
    pre = [sig(mu[i] * scale[0] + base[i]) + hc_eps for i in range(hc)]
    post = [2 * sig(mu[hc + i] * scale[1] + base[hc + i]) for i in range(hc)]
    L = [[mu[2 * hc + i * hc + j] * scale[2] + base[2 * hc + i * hc + j] for j in range(hc)] for i in range(hc)]
    C = []
    for i in range(hc):
        m = max(L[i])
        ex = [math.exp(v - m) for v in L[i]]
        C.append([v / sum(ex) + hc_eps for v in ex])

    def norm_cols(C):
        cs = [sum(C[i][j] for i in range(hc)) + hc_eps for j in range(hc)]
        return [[C[i][j] / cs[j] for j in range(hc)] for i in range(hc)]

    C = norm_cols(C)
    for _ in range(iters - 1):
        C = [[C[i][j] / (sum(C[i]) + hc_eps) for j in range(hc)] for i in range(hc)]
        C = norm_cols(C)
    mixed = [sum(a_prev[i] * X[i][k] for i in range(hc)) for k in range(d)]
    rr = 1.0 / math.sqrt(sum(v * v for v in mixed) / d + eps)
    u = [mixed[k] * rr * w[k] for k in range(d)]
    y = F(u)
    Xn = [[post[j] * y[k] + sum(C[i][j] * X[i][k] for i in range(hc)) for k in range(d)] for j in range(hc)]
    return Xn, pre


def test_sublayer_against_hand_computation():
    g = torch.Generator().manual_seed(5)
    hc, d, iters, hc_eps, eps = 2, 3, 4, 1e-6, 1e-20
    X = torch.randn(hc, d, generator=g, dtype=F64)
    a_prev = torch.tensor([0.7, 0.4], dtype=F64)
    w = torch.rand(d, generator=g, dtype=F64) + 0.5
    fn = 0.3 * torch.randn((2 + hc) * hc, hc * d, generator=g, dtype=F64)
    scale = torch.tensor([0.9, 1.3, 2.0], dtype=F64)
    base = 0.5 * torch.randn((2 + hc) * hc, generator=g, dtype=F64)
    Xt, pre_t = mhc.sublayer(X, a_prev, w, torch.tanh, (fn, scale, base), hc, iters, hc_eps, eps)
    Xh, pre_h = _hand_sublayer(X.tolist(), a_prev.tolist(), w.tolist(), lambda u: [math.tanh(v) for v in u],
                               fn.tolist(), scale.tolist(), base.tolist(), hc, iters, hc_eps, eps)
    dx = float((Xt - torch.tensor(Xh, dtype=F64)).abs().max())
    dp = float((pre_t - torch.tensor(pre_h, dtype=F64)).abs().max())
    check("mHC sub-layer (hc 2, 4 Sinkhorn iters) = hand computation", dx < 1e-12 and dp < 1e-12,
          f"max diff X {dx:.1e}, pre {dp:.1e}")


def _random_block(g, d):
    A = torch.randn(d, d, generator=g, dtype=F64) / math.sqrt(d)
    B = torch.randn(d, d, generator=g, dtype=F64) / math.sqrt(d)
    return (lambda u, A=A: torch.tanh(A @ u)), (lambda u, B=B: torch.sin(B @ u)), \
        torch.rand(d, generator=g, dtype=F64) + 0.5, torch.rand(d, generator=g, dtype=F64) + 0.5


def test_hc1_is_plain_prenorm_stack():
    """The generalisation claim: hc_mult 1, hc_eps 0, coefficients that reduce to identity
    (pre = sigmoid(40) + 0 = 1.0 exactly in float64, post = 2 sigmoid(0) = 1, comb = [[1]]) give
    exactly the plain pre-norm residual stack x <- x + F(RMSNorm(x)), h = RMSNorm_final(x)."""
    g = torch.Generator().manual_seed(9)
    d, n_blocks, eps = 8, 5, 1e-20
    blocks, plain = [], []
    for _ in range(n_blocks):
        attn, ffn, wa, wf = _random_block(g, d)
        scale = torch.randn(3, generator=g, dtype=F64)        # irrelevant: fn = 0 makes mu = 0
        hcp = (torch.zeros(3, d, dtype=F64), scale, torch.tensor([40.0, 0.0, 1.7], dtype=F64))
        blocks.append(dict(attn=attn, ffn=ffn, attn_norm=wa, ffn_norm=wf, hc_attn=hcp, hc_ffn=hcp))
        plain.append((attn, ffn, wa, wf))
    wfinal = torch.rand(d, generator=g, dtype=F64) + 0.5
    worst = 0.0
    for _ in range(4):
        e = torch.randn(d, generator=g, dtype=F64)
        h = mhc.run_stack(e, blocks, wfinal, 1, 20, 0.0, eps)
        x = e.clone()
        for attn, ffn, wa, wf in plain:
            x = x + attn(mhc.rms_norm(x, wa, eps))
            x = x + ffn(mhc.rms_norm(x, wf, eps))
        worst = max(worst, float((h - mhc.rms_norm(x, wfinal, eps)).abs().max()))
    check("hc_mult 1 with identity coefficients = plain pre-norm residual stack (bit-exact)", worst == 0.0,
          f"max diff {worst:.1e}")


def test_single_pass_uses_previous_pre():
    """hc 4: sub-layer inputs are collapsed with the PREVIOUS sub-layer's pre: the first attention
    sees RMSNorm(e) (pre-mix (1,0,0,0) on identical copies) whatever hc_attn holds, and each later
    input equals RMSNorm(collapse(X, pre of the sub-layer before)) recomputed from the trace."""
    g = torch.Generator().manual_seed(21)
    hc, d, eps = 4, 6, 1e-20
    seen, blocks = [], []
    for _ in range(2):
        attn, ffn, wa, wf = _random_block(g, d)
        mk = lambda: (0.2 * torch.randn((2 + hc) * hc, hc * d, generator=g, dtype=F64),  # noqa: E731
                      torch.rand(3, generator=g, dtype=F64) + 0.5, torch.randn((2 + hc) * hc, generator=g, dtype=F64))
        blocks.append(dict(attn=lambda u, f=attn: (seen.append(u), f(u))[1],
                           ffn=lambda u, f=ffn: (seen.append(u), f(u))[1],
                           attn_norm=wa, ffn_norm=wf, hc_attn=mk(), hc_ffn=mk()))
    e = torch.randn(d, generator=g, dtype=F64)
    mhc.run_stack(e, blocks, torch.ones(d, dtype=F64), hc, 20, 1e-6, eps)
    d0 = float((seen[0] - mhc.rms_norm(e, blocks[0]["attn_norm"], eps)).abs().max())
    # replay by hand with explicit bookkeeping of which pre feeds which input
    X, a = mhc.embed_streams(e, hc)
    worst = 0.0
    k = 0
    for b in blocks:
        for norm, F, hp in ((b["attn_norm"], b["attn"], b["hc_attn"]), (b["ffn_norm"], b["ffn"], b["hc_ffn"])):
            pre, post, comb = mhc.hc_coeffs(X, *hp, hc, 20, 1e-6, eps)
            u = mhc.rms_norm(sum(a[i] * X[i] for i in range(hc)), norm, eps)   # a: previous sub-layer's pre
            worst = max(worst, float((u - seen[k]).abs().max()))
            y = F(u)
            seen.pop()
            X = torch.stack([post[j] * y + sum(comb[i, j] * X[i] for i in range(hc)) for j in range(hc)])
            a, k = pre, k + 1
    check("single-pass mHC: first input RMSNorm(e); each input mixed with the previous pre",
          d0 < 1e-15 and worst < 1e-13, f"first {d0:.1e}, later {worst:.1e}")


# ---------------------------------------------------------------- MoE

def test_sqrtsoftplus_routing():
    z = [0.0, 1.0, -1.0, 2.0, 0.5]
    bias = [0.0, 0.0, 1.5, -1.0, 0.0]
    # hand: s_e = sqrt(ln(1 + e^z)); ranked by s + bias: expert 2 (0.5597 + 1.5), then expert 1 (1.1460)
    s = [math.sqrt(math.log1p(math.exp(v))) for v in z]
    want_ids = [2, 1]
    tot = s[2] + s[1] + 1e-20
    want_w = [1.5 * s[2] / tot, 1.5 * s[1] / tot]
    ids, w = moe.route(torch.tensor(z, dtype=F64), torch.eye(5, dtype=F64), torch.tensor(bias, dtype=F64), 2,
                       "sqrtsoftplus", True, 1.5)
    dw = max(abs(float(w[i]) - want_w[i]) for i in range(2))
    check("sqrtsoftplus routing: bias selects, unbiased scores weigh, norm_topk_prob, scale 1.5",
          ids == want_ids and dw < 1e-15, f"ids {ids}, weights {[round(float(v), 6) for v in w]}, diff {dw:.1e}")
    ids_nb, _ = moe.route(torch.tensor(z, dtype=F64), torch.eye(5, dtype=F64), None, 2, "sqrtsoftplus", True, 1.5)
    check("routing without bias picks the top raw scores", ids_nb == [3, 1], f"ids {ids_nb}")
    ids2, w2 = moe.route(torch.tensor(z, dtype=F64), torch.eye(5, dtype=F64), None, 2, "sigmoid", False, 2.0)
    want2 = [2.0 / (1 + math.exp(-2.0)), 2.0 / (1 + math.exp(-1.0))]
    check("sigmoid routing without normalisation", ids2 == [3, 1] and
          max(abs(float(w2[i]) - want2[i]) for i in range(2)) < 1e-15)
    ids3, w3 = moe.route(torch.tensor(z, dtype=F64), torch.eye(5, dtype=F64), None, 1, "softmax", True, 1.0)
    want3 = math.exp(2.0) / sum(math.exp(v) for v in z)
    check("softmax routing, k 1 (no normalisation with one expert)", ids3 == [3] and abs(float(w3[0]) - want3) < 1e-15)
    try:
        moe.routing_scores(torch.zeros(2, dtype=F64), "relu")
        check("unknown scoring_func is refused", False)
    except ValueError as ex:
        check("unknown scoring_func is refused with a message naming it", "relu" in str(ex))


def test_clamped_swiglu():
    g = torch.tensor([20.0, -20.0, 5.0, 12.0], dtype=F64)
    v = torch.tensor([20.0, -20.0, 5.0, -30.0], dtype=F64)
    silu = lambda t: t / (1 + math.exp(-t))  # noqa: E731
    # gate clamped from above only (-20 stays -20), up clamped on both sides
    want = [silu(10.0) * 10.0, silu(-20.0) * -10.0, silu(5.0) * 5.0, silu(10.0) * -10.0]
    got = moe.clamped_swiglu(g, v, 10.0)
    check("clamped SwiGLU: min(gate, 10), clamp(up, -10, 10)",
          max(abs(float(got[i]) - want[i]) for i in range(4)) < 1e-12)
    got0 = moe.clamped_swiglu(g, v, 0.0)
    check("swiglu_limit 0: no clamp", abs(float(got0[0]) - silu(20.0) * 20.0) < 1e-9)


def test_moe_sum():
    gen = torch.Generator().manual_seed(3)
    d, inter, n = 4, 6, 5
    experts = [tuple(torch.randn(*s, generator=gen, dtype=F64) for s in ((inter, d), (d, inter), (inter, d)))
               for _ in range(n)]
    shared = [tuple(torch.randn(*s, generator=gen, dtype=F64) for s in ((inter, d), (d, inter), (inter, d)))]
    gate_w = torch.randn(n, d, generator=gen, dtype=F64)
    bias = torch.randn(n, generator=gen, dtype=F64)
    u = torch.randn(d, generator=gen, dtype=F64)
    y = moe.moe(u, gate_w, bias, experts, shared, 2, "sqrtsoftplus", True, 1.5, 1.0)
    ids, w = moe.route(u, gate_w, bias, 2, "sqrtsoftplus", True, 1.5)
    want = sum(float(w[i]) * (experts[e][1] @ moe.clamped_swiglu(experts[e][0] @ u, experts[e][2] @ u, 1.0))
               for i, e in enumerate(ids))
    want = want + shared[0][1] @ moe.clamped_swiglu(shared[0][0] @ u, shared[0][2] @ u, 1.0)
    check("MoE = weighted routed experts + shared expert", float((y - want).abs().max()) < 1e-12)


# ---------------------------------------------------------------- RoPE / YaRN

def test_yarn_small_case():
    # r 16, base 1e4, original 4096, beta 32 / 1, factor 4. Closed form of the correction dims:
    # 16 ln(4096 / (32 * 2 pi)) / (2 ln 1e4) = 2.618 -> low 2; 16 ln(4096 / (2 pi)) / (2 ln 1e4) = 5.628 -> high 6
    r, base, orig, factor = 16, 10000.0, 4096, 4.0
    low, high = 2, 6
    check("YaRN bounds (r 16, base 1e4, original 4096)", rope.yarn_bounds(r, base, orig, 32, 1) == (low, high),
          str(rope.yarn_bounds(r, base, orig, 32, 1)))
    want = []
    for i in range(r // 2):
        f = base ** (-2.0 * i / r)
        ramp = min(max((i - low) / (high - low), 0.0), 1.0)   # 0, 0, 0, .25, .5, .75, 1, 1
        want.append(f * (1 - ramp) + f / factor * ramp)
    got = rope.yarn_inv_freq(r, base, factor, orig, 32, 1)
    rel = max(abs(float(got[i]) - want[i]) / want[i] for i in range(r // 2))
    check("YaRN frequencies = closed form (pairs 0-2 unchanged, 6-7 divided by the factor)", rel < 1e-14,
          f"max rel diff {rel:.1e}")
    # the released numbers: r 64, theta 160000, original 65536, beta 32 / 1 -> ramp over pairs 15..25
    check("YaRN bounds as released (r 64, 160000, 65536, 32, 1) = (15, 25)",
          rope.yarn_bounds(64, 160000.0, 65536, 32, 1) == (15, 25))
    scaling = dict(factor=16, original_max_position_embeddings=65536, beta_fast=32, beta_slow=1)
    plain = rope.layer_inv_freq(0, 64, 10000.0, 160000.0, scaling)
    want0 = [10000.0 ** (-2.0 * i / 64) for i in range(32)]
    check("ratio-0 layer: plain RoPE over rope_theta",
          max(abs(float(plain[i]) - want0[i]) / want0[i] for i in range(32)) < 1e-14)
    comp = rope.layer_inv_freq(2, 64, 10000.0, 160000.0, scaling)
    check("compressed layer: YaRN over compress_rope_theta (pair 0 = 1, pair 31 = theta^-62/64 / 16)",
          abs(float(comp[0]) - 1.0) < 1e-15 and abs(float(comp[31]) / (160000.0 ** (-62 / 64) / 16) - 1) < 1e-13)
    check("mscale formula (V3 convention): 0.1 ln 16 + 1", abs(rope.yarn_mscale(16, 1.0) - (0.1 * math.log(16) + 1)) < 1e-15)


def test_rotation():
    g = torch.Generator().manual_seed(2)
    f = rope.yarn_inv_freq(8, 160000.0, 16, 65536, 32, 1)
    x = torch.randn(3, 12, generator=g, dtype=F64)
    y = torch.randn(12, generator=g, dtype=F64)
    back = rope.rotate(rope.rotate(x, 37, f), -37, f)
    ok_inv = float((back - x).abs().max()) < 1e-13
    # relative position: <Rot(p) x, Rot(q) y> depends on p - q only; the first 4 dims untouched
    a = rope.rotate(x[0], 50, f) @ rope.rotate(y, 45, f)
    b = rope.rotate(x[0], 5, f) @ rope.rotate(y, 0, f)
    # interleaved pairs: dims (4, 5) form pair 0 with angle p * f_0
    z = torch.zeros(12, dtype=F64)
    z[4] = 1.0
    rz = rope.rotate(z, 3, f)
    ok_pair = abs(float(rz[4]) - math.cos(3 * float(f[0]))) < 1e-15 and abs(float(rz[5]) - math.sin(3 * float(f[0]))) < 1e-15
    check("RoPE: Rot(-p) Rot(p) = id, relative position, interleaved pairs on the last dims",
          ok_inv and abs(float(a - b)) < 1e-12 and ok_pair and bool((rope.rotate(x, 9, f)[:, :4] == x[:, :4]).all()))


# ---------------------------------------------------------------- quantisation

E2M1_TABLE = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]   # codes 0..7; 8..15 the negatives (8 = -0)


def test_e2m1_codes():
    ok = all(quant.decode_e2m1(c) == E2M1_TABLE[c] for c in range(8)) and \
        all(quant.decode_e2m1(8 + c) == -E2M1_TABLE[c] and math.copysign(1, quant.decode_e2m1(8 + c)) < 0
            for c in range(8))
    ok = ok and all(quant.encode_e2m1(quant.decode_e2m1(c)) == c for c in range(16))
    # ties to even code: 0.25 -> 0, 0.75 -> 1.0, 1.25 -> 1.0, 1.75 -> 2.0, 2.5 -> 2, 3.5 -> 4, 5 -> 4
    ties = {0.25: 0.0, 0.75: 1.0, 1.25: 1.0, 1.75: 2.0, 2.5: 2.0, 3.5: 4.0, 5.0: 4.0, 7.0: 6.0, 100.0: 6.0}
    ok_t = all(quant.decode_e2m1(quant.encode_e2m1(v)) == w for v, w in ties.items()) and \
        all(quant.decode_e2m1(quant.encode_e2m1(-v)) == -w for v, w in ties.items())
    vals = torch.tensor([v * sgn for v in list(ties)[:-2] + [0.3, 2.2, 4.9, 5.1] for sgn in (1, -1)], dtype=F64)
    ok_v = all(float(quant.round_e2m1(vals)[i]) == quant.decode_e2m1(quant.encode_e2m1(float(vals[i])))
               for i in range(len(vals)))
    check("E2M1: all 16 codes = hand table, round trip, ties to even, saturation, vector = scalar", ok and ok_t and ok_v)


def _e4m3_by_hand(code):
    """From the E4M3 definition, written out differently: integer mantissa arithmetic."""
    s, e, m = code >> 7, (code >> 3) & 15, code & 7
    if e == 15 and m == 7:
        return math.nan
    v = math.ldexp(m, -9) if e == 0 else math.ldexp(8 + m, e - 10)
    return -v if s else v


def test_e4m3_codes():
    ok = all((math.isnan(quant.decode_e4m3(c)) and math.isnan(_e4m3_by_hand(c))) or
             quant.decode_e4m3(c) == _e4m3_by_hand(c) for c in range(256))
    spots = {0x00: 0.0, 0x01: 2.0 ** -9, 0x07: 7 * 2.0 ** -9, 0x08: 2.0 ** -6, 0x38: 1.0, 0x39: 1.125,
             0x7E: 448.0, 0xB8: -1.0, 0xFE: -448.0}
    ok_s = all(quant.decode_e4m3(c) == v for c, v in spots.items()) and math.isnan(quant.decode_e4m3(0x7F)) \
        and math.isnan(quant.decode_e4m3(0xFF))
    pos = [quant.decode_e4m3(c) for c in range(127)]
    ok_m = all(a < b for a, b in zip(pos, pos[1:]))
    ok_rt = all(quant.encode_e4m3(quant.decode_e4m3(c)) == c for c in range(256) if c not in (0x7F, 0xFF))
    # every midpoint between neighbours goes to the even code; just off the midpoint goes to the nearer one
    ok_tie = True
    mids = []
    for c in range(126):
        lo, hi = pos[c], pos[c + 1]
        mid = (lo + hi) / 2
        mids.append(mid)
        even = c if c % 2 == 0 else c + 1
        ok_tie &= quant.encode_e4m3(mid) == even and quant.encode_e4m3(-mid) == 0x80 | even
        ok_tie &= quant.encode_e4m3(mid - (hi - lo) / 8) == c and quant.encode_e4m3(mid + (hi - lo) / 8) == c + 1
    ok_sat = quant.encode_e4m3(1000.0) == 0x7E and quant.encode_e4m3(-460.0) == 0xFE
    g = torch.Generator().manual_seed(4)
    vals = torch.cat([torch.tensor(mids, dtype=F64), -torch.tensor(mids, dtype=F64),
                      torch.exp(torch.empty(400, dtype=F64).uniform_(-9 * math.log(2), math.log(440), generator=g))])
    rv = quant.round_e4m3(vals)
    ok_v = all(float(rv[i]) == quant.decode_e4m3(quant.encode_e4m3(float(vals[i]))) for i in range(len(vals)))
    check("E4M3: all 256 codes = integer-mantissa hand decode, spot values, monotone, round trip",
          ok and ok_s and ok_m and ok_rt)
    check("E4M3: midpoints to even code, saturation at 448, vector rounding = scalar encoder",
          ok_tie and ok_sat and ok_v, f"{len(vals)} values")
    if hasattr(torch, "float8_e4m3fn"):
        tv = vals.to(torch.float32).to(torch.float8_e4m3fn).to(F64)
        check("E4M3 rounding = torch.float8_e4m3fn cast", bool((tv == rv).all()))
    else:
        print(f"skip E4M3 vs torch.float8_e4m3fn: torch {torch.__version__} has no float8 dtype")


def test_ue8m0_and_packing():
    ok = all(quant.decode_ue8m0(b) == 2.0 ** (b - 127) and quant.encode_ue8m0(2.0 ** (b - 127)) == b
             for b in range(255)) and math.isnan(quant.decode_ue8m0(255))
    try:
        quant.encode_ue8m0(3.0)
        ok = False
    except ValueError:
        pass
    codes = list(range(16)) * 2
    packed = quant.pack_e2m1(codes)
    ok_p = quant.unpack_e2m1(packed) == codes and packed[0] == 0x10 and len(packed) == 16
    check("UE8M0: 255 codes = 2^(b-127), NaN at 255, non-powers refused; E2M1 packing round trip", ok and ok_p)


def test_qdq_hand_cases():
    # FP8 per 32, amax 1: s = 2^ceil(log2(1/448)) = 2^-8; 0.3 / s = 76.8, E4M3 step 8 in [64, 128) -> 80 -> 0.3125
    x = torch.zeros(32, dtype=F64)
    x[0], x[1], x[2] = 1.0, 0.3, -0.01
    q = quant.qdq_fp8_ue8m0(x)
    # -0.01 / 2^-8 = -2.56: step 0.25 in [2, 4) -> -2.5 -> -2.5 / 256
    ok8 = float(q[0]) == 1.0 and float(q[1]) == 0.3125 and float(q[2]) == -2.5 / 256 and \
        float(quant.fp8_ue8m0_scales(x)[0]) == 2.0 ** -8
    # MXFP4 per 32, amax 1: s = 2^ceil(log2(1/6)) = 1/4; 0.3 -> 1.2 -> 1 -> 0.25; 0.55 -> 2.2 -> 2 -> 0.5;
    # 0.9 -> 3.6 -> 4 -> 1.0; -1 -> -4 -> -1
    y = torch.zeros(32, dtype=F64)
    y[0], y[1], y[2], y[3] = -1.0, 0.3, 0.55, 0.9
    qy = quant.qdq_mxfp4(y)
    ok4 = [float(v) for v in qy[:4]] == [-1.0, 0.25, 0.5, 1.0]
    # FP4 per 16 with E4M3 scale, amax 3: s = e4m3(0.5) = 0.5; 1.3 -> 2.6 -> 3 -> 1.5; 0.2 -> 0.4 -> 0.5 -> 0.25
    z = torch.zeros(16, dtype=F64)
    z[0], z[1], z[2] = 3.0, 1.3, 0.2
    qz = quant.qdq_fp4_e4m3(z)
    # amax 1.1: 1.1 / 6 = 0.18333 -> E4M3 step 2^-6 / 8... in [0.125, 0.25) step 2^-6: 11.73 steps -> 12 -> 0.1875
    w = torch.zeros(16, dtype=F64)
    w[0] = 1.1
    okf = [float(v) for v in qz[:3]] == [3.0, 1.5, 0.25] and float(quant.fp4_e4m3_scales(w)[0]) == 0.1875
    check("quantise-dequantise hand cases: FP8/UE8M0 per 32, MXFP4 per 32, FP4/E4M3 per 16", ok8 and ok4 and okf,
          f"fp8 {[float(v) for v in q[:3]]}, mxfp4 {[float(v) for v in qy[:4]]}, fp4 {[float(v) for v in qz[:3]]}")
    # exact powers of two: amax 3.5 = 448 * 2^-7 and amax 1.5 = 6 * 2^-2 (both products exact in
    # float32) keep the power (2^ceil(log2 t) = t), so the largest value lands on the top code
    p8, p4 = torch.zeros(32, dtype=F64), torch.zeros(32, dtype=F64)
    p8[0], p4[0] = 3.5, 1.5
    okp = float(quant.fp8_ue8m0_scales(p8)[0]) == 2.0 ** -7 and float(quant.qdq_fp8_ue8m0(p8)[0]) == 3.5 and \
        float(quant.mxfp4_scales(p4)[0]) == 0.25 and float(quant.qdq_mxfp4(p4)[0]) == 1.5
    check("power-of-two scales: amax at an exact power keeps it (448 * 2^-7 -> 2^-7, 6 * 2^-2 -> 2^-2)", okp)
    # a zero block gets the floor scale and stays zero
    zero = torch.zeros(1, 64, dtype=F64)
    check("zero blocks: floor scales, zero values", bool((quant.qdq_fp4_e4m3(zero) == 0).all()) and
          float(quant.fp4_e4m3_scales(zero)[0, 0]) == 2.0 ** -9 and bool((quant.qdq_mxfp4(zero) == 0).all()) and
          bool((quant.qdq_fp8_ue8m0(zero) == 0).all()))
    try:
        quant.qdq_fp4_e4m3(torch.full((16,), 3000.0, dtype=F64))
        check("FP4 per-16 scale past 448 is refused", False)
    except ValueError as ex:
        check("FP4 per-16 scale past 448 is refused with a message", "amax" in str(ex))


def test_stored_rows():
    g = torch.Generator().manual_seed(8)
    main = torch.randn(512, generator=g, dtype=F64)
    codes, scodes = quant.codes_fp4_e4m3(main)
    back = quant.decode_row(codes, scodes, 16, quant.decode_e2m1, quant.decode_e4m3)
    nbytes = len(quant.pack_e2m1(codes)) + len(scodes)
    ok_main = bool((back == quant.qdq_fp4_e4m3(main)).all()) and nbytes == 288
    idx = torch.randn(128, generator=g, dtype=F64)
    c2, s2 = quant.codes_mxfp4(idx)
    ok_idx = bool((quant.decode_row(c2, s2, 32, quant.decode_e2m1, quant.decode_ue8m0) == quant.qdq_mxfp4(idx)).all()) \
        and len(quant.pack_e2m1(c2)) + len(s2) == 68
    swa = torch.randn(512, generator=g, dtype=F64)
    c3, s3 = quant.codes_fp8_ue8m0(swa)
    ok_swa = bool((quant.decode_row(c3, s3, 32, quant.decode_e4m3, quant.decode_ue8m0) == quant.qdq_fp8_ue8m0(swa)).all()) \
        and len(c3) + len(s3) == 528
    err = float((quant.qdq_fp4_e4m3(main) - main).abs().max() / main.abs().max())
    check("stored rows decode to the quantise-dequantise values; 288 B main, 68 B index, 528 B SWA",
          ok_main and ok_idx and ok_swa, f"FP4 main-KV max error {err:.3f} of amax")


# ---------------------------------------------------------------- CSA2 compressor and indexer

def test_compressor_ratio2_hand():
    g = torch.Generator().manual_seed(13)
    c, eps = 4, 1e-20
    C = torch.randn(2, c, generator=g, dtype=F64)
    Z = torch.randn(2, c, generator=g, dtype=F64)
    wn = torch.rand(c, generator=g, dtype=F64) + 0.5
    pooled = []
    for ch in range(c):   # per channel: softmax over the group's 2 tokens
        a, b = math.exp(float(Z[0, ch])), math.exp(float(Z[1, ch]))
        pooled.append(a / (a + b) * float(C[0, ch]) + b / (a + b) * float(C[1, ch]))
    r = 1 / math.sqrt(sum(v * v for v in pooled) / c + eps)
    want = [pooled[ch] * r * float(wn[ch]) for ch in range(c)]
    got = csa.compress_latent(C, Z, 2, wn, eps)
    d2 = max(abs(float(got[ch]) - want[ch]) for ch in range(c))
    got1 = csa.compress_latent(C[1:], None, 1, wn, eps)
    r1 = 1 / math.sqrt(sum(float(v) ** 2 for v in C[1]) / c + eps)
    d1 = max(abs(float(got1[ch]) - float(C[1, ch]) * r1 * float(wn[ch])) for ch in range(c))
    check("CSA2 compressor: ratio 2 = per-channel softmax over the 2 tokens, normed; ratio 1 = RMSNorm(C)",
          d2 < 1e-15 and d1 < 1e-15, f"diff {d2:.1e} / {d1:.1e}")


def test_entries_rotated_at_group_start():
    g = torch.Generator().manual_seed(14)
    f = rope.yarn_inv_freq(8, 160000.0, 16, 65536, 32, 1)
    lat = torch.randn(16, generator=g, dtype=F64)
    e = csa.main_entry(lat, 5, 2, f, quantise=False)
    back = rope.rotate(e, -10, f)
    eq = csa.main_entry(lat, 5, 2, f)
    ok_q = bool((eq == quant.qdq_fp4_e4m3(rope.rotate(lat, 10, f))).all())
    Wk = torch.randn(32, 16, generator=g, dtype=F64)       # c_I 32: one MXFP4 block
    kn = torch.rand(32, generator=g, dtype=F64) + 0.5
    k = csa.index_key(lat, 5, 2, Wk, kn, 1e-20, f, quantise=False)
    ok_k = float((rope.rotate(k, -10, f) - mhc.rms_norm(Wk @ lat, kn, 1e-20)).abs().max()) < 1e-14
    check("pool entry j = 5 at ratio 2 rotated at position 10 (main entry and index key), FP4 / MXFP4 stored",
          float((back - lat).abs().max()) < 1e-14 and ok_q and ok_k and
          bool((csa.index_key(lat, 5, 2, Wk, kn, 1e-20, f) == quant.qdq_mxfp4(k)).all()))
    check("visibility: entry j visible at p iff j < (p + 1) // m",
          [csa.visible_entries(p, 2) for p in range(6)] == [0, 1, 1, 2, 2, 3] and
          [csa.visible_entries(p, 1) for p in range(3)] == [1, 2, 3])


def test_index_scores_hand():
    g = torch.Generator().manual_seed(15)
    nh, hd, n = 3, 4, 6
    q = torch.randn(nh, hd, generator=g, dtype=F64)
    keys = torch.randn(n, hd, generator=g, dtype=F64)
    u = torch.randn(5, generator=g, dtype=F64)
    Ww = torch.randn(nh, 5, generator=g, dtype=F64)
    w = csa.index_weights(u, Ww, nh, hd)
    want_w = [sum(float(Ww[h, i]) * float(u[i]) for i in range(5)) / math.sqrt(hd) / math.sqrt(nh) for h in range(nh)]
    got = csa.index_scores(q, w, keys, 4)
    want = [sum(want_w[h] * max(0.0, sum(float(q[h, i]) * float(keys[j, i]) for i in range(hd))) for h in range(nh))
            for j in range(4)]
    ok = max(abs(float(got[j]) - want[j]) for j in range(4)) < 1e-14 and all(float(got[j]) == -math.inf for j in (4, 5))
    check("index scores = sum_h w_h ReLU(q_h . k_j), w scaled by c_I^-1/2 n_I^-1/2, -inf past the visible entries", ok)


def test_candidate_blocks_and_topk():
    # 12 entries in blocks of 4, 10 visible: block maxima 5 (block 0), 2 (block 1), and block 2
    # (newest visible entry 9) pinned; keep 2 blocks -> blocks 2 (pinned) and 0
    inf = math.inf
    s = torch.tensor([1, 5, 0, 0, 2, 2, 1, 1, 0.5, 0.1, -inf, -inf], dtype=F64)
    m = csa.candidate_mask(s, 10, 2, 4)
    ok_m = m.tolist() == [True] * 4 + [False] * 4 + [True] * 4
    r = csa.restrict_to_candidates(s, m)
    # top-3 of the restricted visible scores: 5 (1), 1 (0), 0.5 (8); ties to the lower index
    t = csa.top_k(r, 3, 10)
    t_ties = csa.top_k(torch.tensor([1.0, 2.0, 2.0, 2.0], dtype=F64), 2, 4)
    # fewer finite candidates than k: -inf entries fill in position order (released sort)
    t_fill = csa.top_k(r, 8, 10)
    check("candidate blocks (newest pinned, best max kept), Reindex restriction, top-k ascending with ties to lower",
          ok_m and t == [0, 1, 8] and t_ties == [1, 2] and t_fill == [0, 1, 2, 3, 4, 5, 8, 9],
          f"mask {m.int().tolist()}, top3 {t}, fill {t_fill}")


# ---------------------------------------------------------------- Engram

def test_engram_primes_match_released_tables():
    # the released config: layers [1, 14], orders 2..4, 8 heads, engram_vocab_size 16,000,000 ->
    # the tables' row counts engram_num_embeddings [384006168, 384016682] (notes Appendix A)
    sums = [sum(p) for p in engram.engram_primes(2, 4, 8, 16000000)]
    small = engram.engram_primes(2, 4, 2, 5)
    ok_small = small == [[5, 7, 11, 13, 17, 19], [23, 29, 31, 37, 41, 43]]
    check("Engram prime ranges: released config gives the released table sizes; small case by hand",
          sums == [384006168, 384016682] and ok_small and engram.engram_offsets(small[0]) == [0, 5, 12, 23, 36, 53],
          f"sums {sums}")
    m = engram.engram_multipliers(14, 4, 99092)
    bound = ((1 << 63) - 1) // 99092 // 2
    check("Engram multipliers: 4 odd int64 values below 2B + 1, reproducible from the seed 10007 * layer",
          len(m) == 4 and all(v % 2 == 1 and 0 < v <= 2 * bound + 1 for v in m) and
          m == engram.engram_multipliers(14, 4, 99092) and m != engram.engram_multipliers(1, 4, 99092))


def test_engram_hash_hand():
    token_map = [t % 8 for t in range(16)]   # classes
    ids = [3, 9, 12, 5, 6]
    image = [False, False, True, False, False]
    pad, N, heads = 2, 3, 2
    mult = [7, 11, 13]
    primes = [5, 7, 11, 13]
    offs = engram.engram_offsets(primes)
    got = engram.engram_row_ids(ids, image, token_map, pad, N, heads, mult, primes, offs)
    # classes: 3, 1, (image -> pad 2), 5, 6; pad class 2. Look-back rows (shift 0, 1, 2):
    # t0: 3, pad, pad | t1: 1, 3, pad | t2: 2 (image as pad), then blocked: pad, pad
    # t3: 5, then token 2 is an image: blocked -> pad, pad | t4: 6, 5, then blocked: pad
    look = [[3, 2, 2], [1, 3, 2], [2, 2, 2], [5, 2, 2], [6, 5, 2]]
    want = []
    for c in look:
        h2 = (c[0] * 7) ^ (c[1] * 11)
        h3 = h2 ^ (c[2] * 13)
        want.append([h2 % 5, h2 % 7 + 5, h3 % 11 + 12, h3 % 13 + 23])
    check("Engram hashes: latching look-back, image tokens as pad, XOR of products mod prime + offset",
          engram.lookback_classes(ids, image, token_map, pad, N) == look and got == want, f"{got[4]}")


def test_engram_class_map():
    decoded = [" The", "the", "THE", "caf\u00e9", "cafe", " ", "  ", "\n", "\ufffd", "\ufffd", "\u0301", "\uff21",
               "a\u00a0", "\x1f"]
    raw = ["\u0120The", "the", "THE", "caf\u00c3\u00a9", "cafe", "\u0120", "\u0120\u0120", "\u010a", "\u00e2",
           "\u00e3", "\u00cc\u0081", "\u00ef\u00bc\u00a1", "a\u00c2\u00a0", "\u001f"]
    # the/The/THE one class; cafe with and without accent one; " ", "  ", "\n" all the single space;
    # the two U+FFFD tokens by their raw strings (two classes); a lone combining mark normalises to ""
    # and keeps its text; fullwidth A -> "a" (NFKC, lowercase); "a" + NBSP -> "a " (NFKC) -> "a" (strip);
    # U+001F is not White_Space: kept
    want = [0, 0, 0, 1, 1, 2, 2, 2, 3, 4, 5, 6, 6, 7]
    got = engram.class_map(decoded, raw)
    check("Engram token classes: case, accents, whitespace runs, the single space, U+FFFD by raw token",
          got == want, f"{got}")


def test_engram_gate_hand():
    g = torch.Generator().manual_seed(17)
    hc, d, heads_rows, hd, eps = 2, 3, 2, 4, 1e-20
    X = torch.randn(hc, d, generator=g, dtype=F64)
    rows = torch.randn(heads_rows, hd, generator=g, dtype=F64)
    wkv = torch.randn((hc + 1) * d, heads_rows * hd, generator=g, dtype=F64)
    qw = torch.rand(hc, d, generator=g, dtype=F64) + 0.5
    kw = torch.rand(hc, d, generator=g, dtype=F64) + 0.5
    got = engram.engram_apply(X, rows, wkv, qw, kw, eps)
    flat = rows.reshape(-1).tolist()
    kv = [sum(float(wkv[o, i]) * flat[i] for i in range(len(flat))) for o in range((hc + 1) * d)]
    want = []
    for i in range(hc):
        key = kv[i * d:(i + 1) * d]
        x = [float(v) for v in X[i]]
        rs = 1 / math.sqrt(sum(v * v for v in x) / d + eps) / math.sqrt(sum(v * v for v in key) / d + eps)
        dot = sum(x[k] * float(qw[i, k]) * float(kw[i, k]) * key[k] for k in range(d)) * rs / math.sqrt(d)
        gate = 1 / (1 + math.exp(-math.copysign(math.sqrt(max(abs(dot), 1e-6)), dot)))
        want.append([x[k] + gate * kv[hc * d + k] for k in range(d)])
    diff = float((got - torch.tensor(want, dtype=F64)).abs().max())
    check("Engram gate and value into the streams = hand computation; image token leaves X unchanged",
          diff < 1e-13 and bool((engram.engram_apply(X, rows, wkv, qw, kw, eps, live=False) == X).all()),
          f"diff {diff:.1e}")


# ---------------------------------------------------------------- checkpoint reading

def _write_shard(path, tensors):
    """A safetensors file from (name -> (dtype string, raw bytes, shape)), written here by hand."""
    header, off, blobs = {}, 0, []
    for name, (dt, raw, shape) in tensors.items():
        header[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(raw)]}
        off += len(raw)
        blobs.append(raw)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def test_checkpoint_reading():
    rng = np.random.default_rng(5)
    with tempfile.TemporaryDirectory() as d:
        # dense FP8 [40, 70] with 32x32 block scales [2, 3]; codes avoid NaN (0x7F, 0xFF)
        wc = rng.integers(0, 127, size=(40, 70), dtype=np.uint8) | (rng.integers(0, 2, size=(40, 70), dtype=np.uint8) << 7)
        sc = np.array([[120, 127, 130], [125, 128, 131]], dtype=np.uint8)
        # FP4 expert [3, 64]: packed [3, 32], scales [3, 2]
        codes = rng.integers(0, 16, size=(3, 64), dtype=np.uint8)
        packed = (codes[:, 0::2] | (codes[:, 1::2] << 4)).astype(np.uint8)
        esc = np.array([[126, 127], [128, 129], [100, 140]], dtype=np.uint8)
        # Engram-style table [5, 64] with per-row scales [5, 2]; a BF16 vector
        tc = rng.integers(0, 127, size=(5, 64), dtype=np.uint8)
        tsc = rng.integers(110, 140, size=(5, 2), dtype=np.uint8)
        bf = np.array([0x3F80, 0xC000, 0x3E20], dtype="<u2")     # 1.0, -2.0, 0.15625
        _write_shard(os.path.join(d, "a.safetensors"), {
            "layers.0.attn.wq_a.weight": ("F8_E4M3", wc.tobytes(), [40, 70]),
            "layers.0.attn.wq_a.scale": ("F8_E8M0", sc.tobytes(), [2, 3]),
            "layers.0.attn.attn_sink": ("BF16", bf.tobytes(), [3])})
        _write_shard(os.path.join(d, "b.safetensors"), {
            "layers.0.ffn.experts.1.w1.weight": ("I8", packed.tobytes(), [3, 32]),
            "layers.0.ffn.experts.1.w1.scale": ("F8_E8M0", esc.tobytes(), [3, 2]),
            "layers.1.engram.embed.weight": ("F8_E4M3", tc.tobytes(), [5, 64]),
            "layers.1.engram.embed.scale": ("F8_E8M0", tsc.tobytes(), [5, 2])})
        wm = {n: "a.safetensors" for n in ("layers.0.attn.wq_a.weight", "layers.0.attn.wq_a.scale",
                                           "layers.0.attn.attn_sink")}
        wm.update({n: "b.safetensors" for n in ("layers.0.ffn.experts.1.w1.weight", "layers.0.ffn.experts.1.w1.scale",
                                                "layers.1.engram.embed.weight", "layers.1.engram.embed.scale")})
        with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {}, "weight_map": wm}, f)
        ck = checkpoint.Checkpoint(d)
        w = ck.tensor("layers.0.attn.wq_a.weight")
        ok_w = all(float(w[i, j]) == quant.decode_e4m3(int(wc[i, j])) * 2.0 ** (int(sc[i // 32, j // 32]) - 127)
                   for i in range(40) for j in range(70))
        e = ck.tensor("layers.0.ffn.experts.1.w1.weight")
        ok_e = all(float(e[i, j]) == E2M1_TABLE[codes[i, j] & 7] * (-1 if codes[i, j] & 8 else 1) *
                   2.0 ** (int(esc[i, j // 32]) - 127) for i in range(3) for j in range(64))
        r = ck.rows("layers.1.engram.embed.weight", [4, 0, 4])
        ok_r = all(float(r[k, j]) == quant.decode_e4m3(int(tc[i, j])) * 2.0 ** (int(tsc[i, j // 32]) - 127)
                   for k, i in enumerate([4, 0, 4]) for j in range(64))
        ok_t = bool((ck.tensor("layers.1.engram.embed.weight")[[4, 0, 4]] == r).all())
        ok_b = ck.tensor("layers.0.attn.attn_sink").tolist() == [1.0, -2.0, 0.15625]
        try:
            ck.rows("layers.1.engram.embed.weight", [5])
            ok_err = False
        except ValueError as ex:
            ok_err = "[0, 5)" in str(ex)
    check("checkpoint: sharded index, FP8 32x32 block scales, packed FP4 experts (low nibble first) with "
          "E8M0 per 32, Engram rows with per-row scales, BF16; out-of-range rows refused",
          ok_w and ok_e and ok_r and ok_t and ok_b and ok_err, f"{ok_w} {ok_e} {ok_r} {ok_t} {ok_b} {ok_err}")


# ---------------------------------------------------------------- config and roles

RELEASED_TEXT = {   # values of notes §1.1 (released text_config)
    "vocab_size": 129280, "hidden_size": 5120, "moe_intermediate_size": 2304, "num_hidden_layers": 40,
    "num_attention_heads": 64, "head_dim": 512, "qk_rope_head_dim": 64, "q_lora_rank": 1280, "o_groups": 8,
    "o_lora_rank": 1024, "sliding_window": 128, "rms_norm_eps": 1e-20, "rope_theta": 10000,
    "compress_rope_theta": 160000, "rope_scaling": {"rope_type": "yarn", "factor": 16,
                                                    "original_max_position_embeddings": 65536},
    "compress_ratios": [0, 0] + [2] * 18 + [1] * 20 + [0, 0, 0], "n_routed_experts": 384, "n_shared_experts": 1,
    "num_experts_per_tok": 6, "routed_scaling_factor": 1.5, "swiglu_limit": 10.0, "norm_topk_prob": True,
    "scoring_func": "sqrtsoftplus", "hc_mult": 4, "hc_sinkhorn_iters": 20, "hc_eps": 1e-6,
    "kv_source_layer_ids": [2, 8, 14, 20], "index_source_layer_ids": [2, 8, 14, 20, 24, 28, 32, 36],
    "candidate_source_layer_id": 20, "candidate_topk_blocks": 2048, "candidate_block_size": 8,
    "index_n_heads": 32, "index_head_dim": 128, "index_topk": 512, "num_nextn_predict_layers": 3,
    "engram_layer_ids": [1, 14], "engram_num_embeddings": [384006168, 384016682], "engram_max_ngram_size": 4,
    "engram_vocab_size": 16000000, "engram_n_heads": 8, "engram_head_dim": 256, "engram_pad_token_id": 2,
    "engram_compressed_vocab_size": 99092}


def test_config_roles():
    t, r = v41config.from_dict({"text_config": RELEASED_TEXT, "vision_config": {}, "quantization_config": {}})
    # notes §1.2: 0-1 SWA (Engram at 1); 2 Full A; 3-7 Reuse A; 8 Full B; 14 Full C (Engram); 20 Full D +
    # candidate source; 21-23 Reuse D; 24 Reindex (candidates); 29 Reuse D with top-k of 28; 40-42 DSpark
    want = {0: ("swa", -1, -1), 1: ("swa", -1, -1), 2: ("full", 2, 2), 7: ("reuse", 2, 2), 8: ("full", 8, 8),
            14: ("full", 14, 14), 19: ("reuse", 14, 14), 20: ("full", 20, 20), 23: ("reuse", 20, 20),
            24: ("reindex", 20, 24), 29: ("reuse", 20, 28), 39: ("reuse", 20, 36), 40: ("dspark", -1, -1)}
    ok = all((r[l].mode, r[l].kv_source, r[l].index_source) == v for l, v in want.items())
    ok &= r[1].engram and r[14].engram and not r[2].engram and r[20].candidate_source and r[24].uses_candidates \
        and not r[23].uses_candidates and r[2].yarn and not r[0].yarn and len(r) == 43
    ok &= t["rope_scaling"]["beta_fast"] == 32.0 and t["rope_scaling"]["beta_slow"] == 1.0
    flat, _ = v41config.from_dict(RELEASED_TEXT)
    errs = []
    for bad, key in ((dict(RELEASED_TEXT, compress_ratios=[0] * 40), "compress_ratios"),
                     (dict(RELEASED_TEXT, kv_source_layer_ids=[0, 2]), "kv_source_layer_ids"),
                     (dict(RELEASED_TEXT, scoring_func="relu"), "scoring_func"),
                     ({k: v for k, v in RELEASED_TEXT.items() if k != "hc_mult"}, "hc_mult")):
        try:
            v41config.from_dict({"text_config": bad})
            errs.append(f"{key}: accepted")
        except v41config.ConfigError as ex:
            if key not in str(ex):
                errs.append(f"{key}: {ex}")
    check("released config: roles of notes §1.2 (Full/Reuse/Reindex/SWA/DSpark, Engram, candidates), "
          "flat spelling, errors name the key", ok and flat["hc_mult"] == 4 and not errs, "; ".join(errs))
    # a second public fixture of the prime rule: vocab 31, 2 heads, orders 2..3 -> [152, 220]
    check("Engram prime rule on a second public fixture (vocab 31, 2 heads, max order 3) gives [152, 220]",
          [sum(p) for p in engram.engram_primes(2, 3, 2, 31)] == [152, 220])


# ---------------------------------------------------------------- committed component goldens

def test_component_golden_current():
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "tests", "golden",
                        "v41_components.json")
    if not os.path.isfile(path):
        print(f"skip component golden: {path} not present")
        return
    with open(path, encoding="utf-8") as f:
        committed = json.load(f)
    fresh = json.loads(json.dumps(golden_components.build()))

    def same(a, b):
        # integers (codes, ids, hashes) exactly; floats to 1e-13 relative: exp/log/pow may differ in
        # the last bit between libm builds, which must not fail the check on another machine
        if isinstance(a, float) or isinstance(b, float):
            return isinstance(a, (int, float)) and isinstance(b, (int, float)) and \
                abs(a - b) <= 1e-13 * max(abs(a), abs(b))
        if isinstance(a, list):
            return isinstance(b, list) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
        if isinstance(a, dict):
            return isinstance(b, dict) and set(a) == set(b) and all(same(a[k], b[k]) for k in a)
        return a == b

    diff = [k for k in fresh if not same(fresh[k], committed.get(k))]
    check("tests/golden/v41_components.json equals a fresh build (regenerate with golden_components.py)",
          not diff and set(committed) == set(fresh), f"differs: {diff}")


# ---------------------------------------------------------------- attention, compressor state

def test_compressor_streaming():
    g = torch.Generator().manual_seed(19)
    C = torch.randn(7, 4, generator=g, dtype=F64)
    Z = torch.randn(7, 4, generator=g, dtype=F64)
    st = csa.CompressorState(2)
    emitted = [st.push(p, C[p], Z[p]) for p in range(7)]
    ok = [e is not None for e in emitted] == [False, True, False, True, False, True, False] and st.pending() == 1
    ok &= all(emitted[2 * j + 1][0] == j and
              bool((emitted[2 * j + 1][1] == csa.pool_group(C[2 * j:2 * j + 2], Z[2 * j:2 * j + 2], 2)).all())
              for j in range(3))
    st1 = csa.CompressorState(1)
    ok &= all(st1.push(p, C[p])[0] == p for p in range(3))
    check("compressor decode state: entry j emitted at p = 2j + 1, equal to the batch group; half group held", ok)


def test_attention_pieces():
    g = torch.Generator().manual_seed(23)
    n_h, c, ne = 2, 4, 3
    q = torch.randn(n_h, c, generator=g, dtype=F64)
    E = torch.randn(ne, c, generator=g, dtype=F64)
    sink = torch.tensor([0.3, -1.2], dtype=F64)
    got = attention.sink_attention(q, E, sink)
    want = []
    for h in range(n_h):
        z = [sum(float(q[h, i]) * float(E[e, i]) for i in range(c)) / 2.0 for e in range(ne)]
        den = sum(math.exp(v) for v in z) + math.exp(float(sink[h]))
        want.append([sum(math.exp(z[e]) * float(E[e, i]) for e in range(ne)) / den for i in range(c)])
    d1 = float((got - torch.tensor(want, dtype=F64)).abs().max())
    # grouped output: 4 heads of c 4 in 2 groups, d_g 3, d 5, rope dims 2 (one pair)
    f = rope.plain_inv_freq(2, 10000.0)
    o = torch.randn(4, 4, generator=g, dtype=F64)
    wo_a = torch.randn(6, 8, generator=g, dtype=F64)
    wo_b = torch.randn(5, 6, generator=g, dtype=F64)
    y = attention.grouped_output(o, 7, f, wo_a, wo_b, 2)
    ang = -7 * float(f[0])
    od = o.clone()
    od[:, 2] = o[:, 2] * math.cos(ang) - o[:, 3] * math.sin(ang)
    od[:, 3] = o[:, 2] * math.sin(ang) + o[:, 3] * math.cos(ang)
    block = torch.zeros(6, 16, dtype=F64)       # W^Oa as the explicit block-diagonal matrix
    block[0:3, 0:8], block[3:6, 8:16] = wo_a[0:3], wo_a[3:6]
    d2 = float((y - wo_b @ (block @ od.reshape(-1))).abs().max())
    ok_w = attention.window_positions(10, 4) == [7, 8, 9, 10] and attention.window_positions(2, 4) == [0, 1, 2] \
        and attention.window_positions(10, 4, floor=9) == [9, 10]
    u = torch.randn(6, generator=g, dtype=F64)
    wkv = torch.randn(32, 6, generator=g, dtype=F64)
    kvn = torch.rand(32, generator=g, dtype=F64) + 0.5
    f8 = rope.plain_inv_freq(8, 10000.0)
    e = attention.swa_entry(u, wkv, kvn, 5, f8, 1e-20)
    ok_e = bool((e == quant.qdq_fp8_ue8m0(rope.rotate(mhc.rms_norm(wkv @ u, kvn, 1e-20), 5, f8))).all())
    check("attention: sink softmax = hand sum, grouped W^Oa = block-diagonal product after Rot(-p), "
          "window positions with floor, SWA entry FP8 after rotation", d1 < 1e-15 and d2 < 1e-12 and ok_w and ok_e,
          f"diff {d1:.1e} / {d2:.1e}")


def main():
    for name, fn in sorted(globals().items()):
        if name.startswith("test_") and callable(fn):
            fn()
    print(f"{len(FAILS)} failed" if FAILS else "all passed")
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
