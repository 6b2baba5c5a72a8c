"""Self-tests of the V4.1 reference components (no C++):  /usr/bin/python3 tools/reference/v41/test_v41.py
Each expected value is computed here independently (math module, literal tables, closed forms),
never by the function under test. This file holds the mHC, MoE and RoPE checks and runs those of
test_v41_formats.py and test_v41_layers.py. Exit 0 when all pass, 1 on a failure, 77 without torch
or numpy."""
import math
import os
import sys

try:
    import numpy  # noqa: F401
    import torch
except ImportError:
    print("skipped: python3-torch or numpy is not installed")
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import mhc  # noqa: E402
import moe  # noqa: E402
import rope  # noqa: E402
import test_v41_formats  # noqa: E402
import test_v41_layers  # noqa: E402
from selfcheck import F64, FAILS, check  # noqa: E402


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


def main():
    for module in (sys.modules[__name__], test_v41_formats, test_v41_layers):
        for name, fn in sorted(vars(module).items()):
            if name.startswith("test_") and callable(fn):
                fn()
    print(f"{len(FAILS)} failed" if FAILS else "all passed")
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
