"""Self-tests of the released DeepSeek-V4.1 switches in the reference model (no C++):

    /usr/bin/python3 tools/reference/test_reference_v41.py

1. With hc_mult 1 and every switch at its default, the reference reproduces the committed `tiny`
   and `pool` goldens bit for bit (from their committed weights), and their config.json.
2. With the switches on (4 mHC streams, YaRN, sigmoid / softmax scores with and without
   norm_topk_prob, KV as released, Engram before layer 1), on a small config: `full` prefill is chunk-independent (logits
   and all state, H_E rows hc*d + hc wide), the staircase (`exact`) equals `full` and decoding
   continues identically, `bounded` is chunk-independent and keeps the pools of `full`, Encoder SWA
   Bounded Replay with P <= W regenerates exactly.
3. The released-layout writer and v41/checkpoint.py round-trip exactly (config and every weight),
   FP4 packing and FP8 / FP4 scales against values worked out by hand here.
4. Validation of the new keys names the key.
Exit 0 when all pass, 1 on a failure, 77 without torch or numpy.
"""
import json
import math
import os
import sys
import tempfile
import time

try:
    import numpy as np
    import torch
except ImportError:
    print("skipped: python3-torch or numpy is not installed")
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import safetensors_io  # noqa: E402
from config import Config, ConfigError  # noqa: E402
from golden import compute_golden, f32  # noqa: E402
from init import random_weights  # noqa: E402
from model import Model, SeqState, PassCtx, load_model  # noqa: E402
import write_released  # noqa: E402  (v41/, on the path through model.py)
import checkpoint  # noqa: E402

REPO = os.path.dirname(os.path.dirname(HERE))
TOL = 1e-9

# a small config with every role (ratio-2 encoder pool, ratio-1 decoder pool, a Reindex layer after
# the candidate source, candidate blocks that bind) and dims the released KV formats accept
MINI = {"vocab_size": 64, "dim": 32, "n_layers": 6, "n_encoder_layers": 3, "n_heads": 2, "head_dim": 32,
        "rope_dim": 8, "q_lora_rank": 16, "o_groups": 1, "o_group_rank": 16, "window": 4,
        "compress_ratios": [0, 2, 2, 1, 1, 1], "kv_source_layers": [1, 3], "index_source_layers": [1, 3, 5],
        "index_heads": 2, "index_head_dim": 32, "index_topk": 4, "candidate_source_layer": 3,
        "candidate_blocks": 3, "candidate_block_size": 2, "n_routed_experts": 4, "n_shared_experts": 1,
        "experts_per_token": 2, "moe_inter_dim": 32, "route_scale": 1.5, "swiglu_limit": 10.0,
        "rope_theta": 10000.0, "compress_rope_theta": 160000.0, "norm_eps": 1e-6, "max_seq_len": 4096}
ENGRAM = {"engram_layers": [1], "engram_table_rows": [420], "engram_max_ngram": 3, "engram_n_heads": 2,
          "engram_head_dim": 32, "engram_vocab_size": 100, "engram_compressed_vocab": 64, "engram_pad_id": 2}
SWITCHED = [
    ("hc4+yarn+sigmoid+released KV+Engram", dict(MINI, hc_mult=4, rope_factor=4.0, rope_original_seq_len=16,
                                                 score_func="sigmoid", kv_dtype="released", **ENGRAM)),
    ("hc2+softmax unnormalised, f32 KV", dict(MINI, hc_mult=2, score_func="softmax", norm_topk_prob=False)),
]

FAILS = []


def check(name, ok, detail=""):
    print(("ok   " if ok else "FAIL ") + name + (f"  ({detail})" if detail else ""))
    if not ok:
        FAILS.append(name)


def maxdiff(a, b):
    return float((a - b).abs().max()) if a.numel() else 0.0


def setup(cfgd, n, seed=7, data_seed=3):
    cfg = Config.from_dict(cfgd)
    model = Model(cfg, random_weights(cfg, seed), torch.float64)
    g = torch.Generator().manual_seed(data_seed)
    return cfg, model, torch.randint(0, cfg.vocab_size, (n,), generator=g).tolist()


def state_diff(a, b, layers, rows):
    """Largest difference over pools (entries, keys, pending), window entries of `layers` x `rows`,
    and H_E of `rows` that both hold."""
    d = 0.0
    for l in a.pools:
        pa, pb = a.pools[l], b.pools[l]
        if len(pa.entries) != len(pb.entries) or (pa.pending is None) != (pb.pending is None):
            return math.inf
        for x, y in zip(pa.entries + pa.keys, pb.entries + pb.keys):
            d = max(d, maxdiff(x, y))
        if pa.pending is not None:
            d = max(d, maxdiff(pa.pending[0], pb.pending[0]), maxdiff(pa.pending[1], pb.pending[1]))
    for l in layers:
        for p in rows:
            if (p in a.window[l]) != (p in b.window[l]):
                return math.inf
            if p in a.window[l]:
                d = max(d, maxdiff(a.window[l][p], b.window[l][p]))
    for p in rows:
        if p in a.H_E and p in b.H_E:
            d = max(d, maxdiff(a.H_E[p], b.H_E[p]))
    return d


# ---------------------------------------------------------------- 1. our family unchanged

def test_committed_goldens():
    for case in ("tiny", "pool"):
        d = os.path.join(REPO, "tests", "golden", case)
        gold, meta = safetensors_io.load(os.path.join(d, "golden.safetensors"))
        model = load_model(d)
        P, n_dec = int(meta["replay_P"]), int(meta["n_decode"])
        prompt, dec = gold["prompt"].tolist(), gold["decode_tokens"].tolist()
        ours, _ = compute_golden(model, prompt, dec[:n_dec], P)
        same = all(torch.equal(f32(ours[k]) if ours[k].is_floating_point() else ours[k], gold[k]) for k in ours)
        check(f"defaults reproduce the committed {case} golden bit for bit ({len(ours)} tensors)",
              same and set(ours) | {"prompt", "decode_tokens"} == set(gold))
        with open(os.path.join(d, "config.json")) as f:
            text = f.read()
        check(f"{case} config.json written back byte for byte",
              json.dumps(model.cfg.to_dict(), indent=1) + "\n" == text)


def test_committed_v41_tiny():
    """The committed released-layout case loads through load_model (index.json -> checkpoint.py) and
    its full prefill logits are the committed ones, bit for bit (the golden is current)."""
    d = os.path.join(REPO, "tests", "golden", "v41_tiny")
    if not os.path.isdir(d):
        check("committed v41_tiny golden present", False, d)
        return
    gold, _ = safetensors_io.load(os.path.join(d, "golden.safetensors"))
    model = load_model(d)
    got = f32(model.prefill_full(SeqState(model.cfg), gold["prompt"].tolist()))
    check("committed v41_tiny: released files load; full prefill logits bit for bit",
          model.cfg.released["weight_layout"] == "deepseek_v41" and torch.equal(got, gold["full.prefill_logits"]))


# ---------------------------------------------------------------- 2. the modes with switches on

def test_modes(name, cfgd):
    cfg, model, toks = setup(cfgd, n=14)
    n = len(toks)
    sf = SeqState(cfg)
    whole = model.prefill_full(sf, toks)
    width = {len(h) for h in sf.H_E.values()}
    check(f"[{name}] H_E rows hold X then a: width {cfg.residual_width()}", width == {cfg.residual_width()})
    worst = 0.0
    for split in (n - 1, n // 2, 1):
        st = SeqState(cfg)
        model.prefill_full(st, toks[:split])
        last = model.prefill_full(st, toks[split:split + 3])
        for t in toks[split + 3:]:
            last = model.decode(st, t)
        worst = max(worst, maxdiff(whole, last), state_diff(sf, st, range(cfg.L), range(n)))
    check(f"[{name}] full prefill chunked (+ decodes) = whole, logits and all state", worst <= TOL, f"{worst:.1e}")
    se, ce = SeqState(cfg), PassCtx()
    exact = model.prefill_exact(se, toks, ce)
    units = n * cfg.E + sum(cfg.exact_rows(l, n) for l in range(cfg.E, cfg.L))
    d = max(maxdiff(whole, exact), state_diff(sf, se, range(cfg.L), range(n - cfg.W, n)))
    for t in toks[:3]:
        d = max(d, maxdiff(model.decode(sf.clone(), t), model.decode(se.clone(), t)))
    check(f"[{name}] exact (staircase {cfg.staircase()} < N {n}) = full; decoding continues identically",
          d <= TOL and ce.units == units and n > cfg.staircase(), f"{d:.1e}, units {ce.units}")
    sb = SeqState(cfg)
    b = model.prefill_bounded(sb, toks)
    st = SeqState(cfg)
    model.prefill_bounded(st, toks[:n - 5])
    b2 = model.prefill_bounded(st, toks[n - 5:])
    d = max(maxdiff(b, b2), state_diff(sf, sb, range(cfg.E + 1), range(n)))
    check(f"[{name}] bounded chunked = whole; pools, encoder windows and H_E = full", d <= TOL
          and maxdiff(b, whole) > 1e-6, f"{d:.1e}; bounded-full {maxdiff(b, whole):.1e}")
    P = cfg.W - 1
    a = SeqState(cfg)
    model.prefill_full(a, toks[:P])
    r = a.clone()
    r.drop_windows_and_HE()
    model.encoder_replay(r)
    d = max(state_diff(a, r, range(cfg.E + 1), range(P)), maxdiff(model.prefill_bounded(a, toks[P:]),
                                                                 model.prefill_bounded(r, toks[P:])))
    check(f"[{name}] encoder replay with P <= W regenerates exactly", d <= TOL, f"{d:.1e}")


def test_mhc_wiring_against_run_stack():
    """model.py's stream bookkeeping (which pre collapses which input, what the head reads) against
    v41/mhc.run_stack (checked there against a hand computation), on a one-token prompt where each
    layer's attention is a plain function of its own input: ratio-2 pools show no entry at p = 0,
    the ratio-1 cut layer E reads its own entry 0, the decoder layer after it has ratio 0."""
    import mhc
    cfgd = dict(MINI, n_layers=4, n_encoder_layers=2, compress_ratios=[0, 2, 1, 0], kv_source_layers=[1, 2],
                index_source_layers=[1, 2], candidate_source_layer=0, candidate_blocks=0, candidate_block_size=0,
                hc_mult=4, rope_factor=4.0, rope_original_seq_len=16, kv_dtype="released")
    cfg, model, toks = setup(cfgd, n=1)

    def attn(l):
        def f(u):
            e = model.window_entry(l, u, 0)
            _, q = model.query(l, u, 0)
            entries = [e] + ([model.main_entry(model.compress_m1(l, u), 0, 1)] if l == cfg.E else [])
            o = model.unrotate(l, model.sink_attention(q, entries, model.lw(l, "attn.sink")), 0)
            return model.grouped_output(l, o)
        return f

    blocks = [{"attn": attn(l), "ffn": (lambda l: lambda u: model.ffn(l, u, PassCtx()))(l),
               "attn_norm": model.lw(l, "attn_norm.weight"), "ffn_norm": model.lw(l, "ffn_norm.weight"),
               "hc_attn": tuple(model.lw(l, f"hc_attn_{k}") for k in ("fn", "scale", "base")),
               "hc_ffn": tuple(model.lw(l, f"hc_ffn_{k}") for k in ("fn", "scale", "base"))} for l in range(cfg.L)]
    r = cfg.released
    h = mhc.run_stack(model.w["embed.weight"][toks[0]], blocks, model.w["norm.weight"], cfg.hc,
                      r["hc_sinkhorn_iters"], r["hc_eps"], cfg.norm_eps)
    want = model.w["head.weight"] @ h
    got = model.prefill_full(SeqState(cfg), toks)
    check("mHC wiring of model.py = v41/mhc.run_stack (one token, 4 layers, hc 4)", maxdiff(got, want) <= 1e-12,
          f"{maxdiff(got, want):.1e}")


def test_switches_change_the_model():
    """Each switch is live: turning it on changes the logits (a switch that does nothing is a bug)."""
    base = dict(MINI, hc_mult=2)
    _, m0, toks = setup(base, n=10)
    ref = m0.prefill_full(SeqState(m0.cfg), toks)
    for key, val in (("rope_factor", 4.0), ("score_func", "sigmoid"), ("norm_topk_prob", False),
                     ("kv_dtype", "released")):
        d = dict(base, **{key: val})
        if key == "rope_factor":
            d["rope_original_seq_len"] = 16
        cfg = Config.from_dict(d)
        m = Model(cfg, random_weights(Config.from_dict(base), 7), torch.float64)
        check(f"switch {key}={val!r} changes the logits", maxdiff(m.prefill_full(SeqState(cfg), toks), ref) > 1e-6)
    cfg = Config.from_dict(dict(base, **ENGRAM))
    w = random_weights(cfg, 7)
    with_e = Model(cfg, w).prefill_full(SeqState(cfg), toks)
    w["layers.1.engram.wkv.weight"] = w["layers.1.engram.wkv.weight"] * 0   # value 0: Engram adds nothing
    zero = Model(cfg, w).prefill_full(SeqState(cfg), toks)
    bcfg = Config.from_dict(base)
    without = Model(bcfg, w).prefill_full(SeqState(bcfg), toks)   # the same weights, no Engram layer
    check("Engram changes the logits; with a zero value projection it adds nothing",
          maxdiff(with_e, zero) > 1e-6 and maxdiff(zero, without) == 0.0)


# ---------------------------------------------------------------- 3. released layout round trip

def test_released_round_trip():
    cfgd = dict(MINI, hc_mult=4, rope_factor=4.0, rope_original_seq_len=16, norm_eps=1e-20,
                weight_layout="deepseek_v41", kv_dtype="released")
    cfg = Config.from_dict(cfgd)
    raw = random_weights(cfg, 11)
    with tempfile.TemporaryDirectory() as tmp:
        deq = write_released.write_released(tmp, cfg, raw)
        cfg2, back = write_released.load_released(tmp)
        check("released config.json reads back as the same config", cfg2.to_dict() == cfg.to_dict())
        same = sorted(back) == sorted(deq) and all(torch.equal(back[k], deq[k]) for k in deq)
        check(f"released weights read back exactly through checkpoint.py ({len(deq)} tensors)", same)
        with open(os.path.join(tmp, "model.safetensors.index.json")) as f:
            wm = json.load(f)["weight_map"]
        ck = checkpoint.Checkpoint(tmp)
        dts = {n: ck.raw(n)[0] for n in wm}
        want = {"layers.0.attn.wq_a.weight": "F8_E4M3", "layers.0.attn.wq_a.scale": "F8_E8M0",
                "layers.2.ffn.experts.3.w2.weight": "I8", "layers.2.ffn.experts.3.w2.scale": "F8_E8M0",
                "layers.1.attn.compressor.wgate.weight": "BF16", "layers.0.hc_attn_fn": "F32",
                "layers.0.attn.attn_sink": "F32", "layers.0.ffn.gate.bias_vl": "F32", "embed.weight": "BF16",
                "layers.5.ffn.shared_experts.w1.weight": "F8_E4M3"}
        check("released names and dtypes", all(dts.get(k) == v for k, v in want.items()),
              str({k: dts.get(k) for k in want if dts.get(k) != want[k]}))
        check("no wgate on the ratio-1 source, no indexer wk on a Reindex layer",
              "layers.3.attn.compressor.wgate.weight" not in wm and "layers.5.attn.indexer.wk.weight" not in wm)
        # quantisation error within half a grid step of each block's scale
        w, v = raw["layers.0.attn.wq_b.weight"].double(), deq["layers.0.attn.wq_b.weight"]
        rel = float(((w - v).abs() / w.abs().clamp(min=1e-3)).max())
        check("FP8 weights within E4M3 precision (2^-4 relative) of the float64 values", rel <= 2 ** -4, f"{rel:.3f}")
        e, ev = raw["layers.2.ffn.experts.0.w1.weight"].double(), deq["layers.2.ffn.experts.0.w1.weight"]
        err = float((e - ev).abs().max() / e.abs().max())
        check("FP4 expert weights within half an E2M1 step (<= block amax / 3)", err <= 1 / 3, f"{err:.3f}")
    # hand-worked FP4 row: scale 2^ceil(log2(6/6)) = 1; codes 6 -> 7, -3 -> 8|5 = 13, 0.5 -> 1, 0 -> 0;
    # bytes low nibble first: (7 | 13 << 4) = 0xD7, (1 | 0 << 4) = 0x01
    row = torch.tensor([[6.0, -3.0, 0.5, 0.0] + [0.0] * 28], dtype=torch.float64)
    packed, sc, v = write_released.quantise_fp4_rows(row)
    check("FP4 packing by hand (0xD7 0x01, scale code 127)",
          list(packed[0, :2]) == [0xD7, 0x01] and list(sc[0]) == [127] and torch.equal(v, row))
    # hand-worked FP8 block: amax 3 -> s = 2^ceil(log2(3/448)) = 2^-7; 3 / 2^-7 = 384 (code 0x7C), 1.0 -> 128 (0x70)
    blk = torch.zeros(32, 32, dtype=torch.float64)
    blk[0, 0], blk[0, 1] = 3.0, -1.0
    codes, sc, v = write_released.quantise_fp8_block(blk)
    check("FP8 block by hand (codes 0x7C, 0xF0, scale code 120)",
          int(codes[0, 0]) == 0x7C and int(codes[0, 1]) == 0xF0 and int(sc[0, 0]) == 120 and torch.equal(v, blk))


# ---------------------------------------------------------------- 4. validation

def test_validation():
    bad = [({"kv_dtype": "released"}, "index_head_dim"),          # MINI's index_head_dim 32 ok, head_dim 16 below
           ({"score_func": "relu"}, "score_func"), ({"rope_factor": 4.0}, "rope_original_seq_len"),
           ({"hc_mult": 0}, "hc_mult"), ({"kv_dtype": "fp8"}, "kv_dtype"),
           ({"engram_layers": [1], "engram_table_rows": [7]}, "engram_max_ngram"),
           ({"engram_layers": [1], "engram_table_rows": [7], "engram_max_ngram": 3, "engram_n_heads": 2,
             "engram_head_dim": 32, "engram_vocab_size": 100, "engram_compressed_vocab": 64}, None)]
    ok = True
    for upd, key in bad:
        d = dict(MINI, **upd)
        if key == "index_head_dim":
            d["index_head_dim"] = 16
        try:
            cfg = Config.from_dict(d)
            if key is None:  # a valid config whose table height is not the sum of its primes (420)
                try:
                    Model(cfg, random_weights(cfg, 1))
                    ok = False
                except ValueError as e:
                    ok &= "engram_table_rows" in str(e) and "420" in str(e)
            else:
                ok = False
        except ConfigError as e:
            ok &= key is not None and key in str(e)
    check("new keys validated, errors name the key; a wrong Engram table height refused by the model", ok)


def main():
    torch.set_num_threads(1)
    t0 = time.time()
    test_validation()
    test_released_round_trip()
    test_mhc_wiring_against_run_stack()
    test_switches_change_the_model()
    for name, cfgd in SWITCHED:
        test_modes(name, cfgd)
    test_committed_goldens()
    test_committed_v41_tiny()
    print(f"{'all passed' if not FAILS else f'{len(FAILS)} failed'} in {time.time() - t0:.1f} s")
    sys.exit(1 if FAILS else 0)


if __name__ == "__main__":
    main()
