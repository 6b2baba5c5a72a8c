"""V4.1 self-tests: CSA2 compressor and indexer, attention pieces, Engram, config roles and the committed
component goldens. Run by test_v41.py."""
import json
import math
import os

import torch

from selfcheck import F64, check

import attention  # noqa: E402
import config as v41config  # noqa: E402
import csa  # noqa: E402
import engram  # noqa: E402
import golden_components  # noqa: E402
import mhc  # noqa: E402
import quant  # noqa: E402
import rope  # noqa: E402

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
