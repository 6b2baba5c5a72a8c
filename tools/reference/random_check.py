"""Random-configuration cross-check of the C++ engine against the reference.

    /usr/bin/python3 tools/reference/random_check.py [-K 4] [--seed 0] [--cedar build/cedar]
                                                     [--keep DIR] [--skip-cedar] [--v41]

Makes K random valid CED configurations (random dims, compress ratios, pool layouts, odd/even
W, with/without candidate pool, dense FFN sometimes, BF16 weights sometimes, short prompts
sometimes), writes for each a
model folder with config.json, model.safetensors and golden.safetensors (same format as
tests/golden/), then runs `CEDAR check-golden --model DIR --golden DIR/golden.safetensors`.
Exits non-zero if any check fails, printing the failing configuration.

--v41 adds the released DeepSeek-V4.1 switches, drawn from a second generator after the base
configuration (so the cases without --v41 are exactly the ones before these switches existed):
hc_mult in {1, 2, 4} (Sinkhorn rounds 1, 3 or 20), YaRN on or off (factor 2..16, original length
16..64), score_func sqrtsoftplus / sigmoid / softmax, norm_topk_prob on or off, kv_dtype f32 or
released (head_dim and index_head_dim then 32), Engram before one or two encoder layers (orders
2..4, 1..3 heads of 32, identity class table), and sometimes (MoE configs) the released file
layout (v41/write_released.py: FP8/FP4/BF16 shards, dim and moe_inter_dim 32; only where the cut
E = n_layers / 2, see tools/reference/README.md).
"""
import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from config import Config  # noqa: E402
from golden import make_case  # noqa: E402


def released_switches(rng: random.Random, cfg: dict):
    """The V4.1 switches drawn onto a base configuration dict (in place)."""
    hc = rng.choice([1, 2, 4])
    cfg["hc_mult"] = hc
    if hc > 1:
        cfg["hc_sinkhorn_iters"] = rng.choice([1, 3, 20])
    if rng.random() < 0.5:
        cfg["rope_factor"] = rng.choice([2.0, 4.0, 16.0])
        cfg["rope_original_seq_len"] = rng.choice([16, 32, 64])
    cfg["score_func"] = rng.choice(["sqrtsoftplus", "sigmoid", "softmax"])
    cfg["norm_topk_prob"] = rng.random() < 0.6
    if rng.random() < 0.5:
        cfg["kv_dtype"] = "released"
        cfg["head_dim"], cfg["index_head_dim"] = 32, 32
    # the released layout has no n_encoder_layers key: the reference takes the last kv source as the
    # cut, `cedar info` prints num_hidden_layers / 2; draw it only where both readings agree
    if cfg["n_routed_experts"] > 0 and cfg["n_encoder_layers"] == cfg["n_layers"] // 2 and rng.random() < 0.3:
        cfg["weight_layout"] = "deepseek_v41"
        cfg["dim"], cfg["moe_inter_dim"] = 32, 32
        cfg["kv_dtype"] = "released"   # a released checkpoint always rounds its stored KV
        cfg["head_dim"], cfg["index_head_dim"] = 32, 32
    # Engram weights come in the released layout (FP8 tables read on demand); Cedar's own layout
    # has none, so Engram is drawn only onto released-layout cases.
    if cfg.get("weight_layout") == "deepseek_v41" and cfg["n_encoder_layers"] >= 1 and rng.random() < 0.6:
        sys.path.append(os.path.join(os.path.dirname(os.path.abspath(__file__)), "v41"))
        import engram as v41engram
        layers = sorted(rng.sample(range(cfg["n_encoder_layers"]), min(cfg["n_encoder_layers"], rng.choice([1, 2]))))
        N, heads, base = rng.randint(2, 4), rng.randint(1, 3), rng.randint(20, 300)
        primes = v41engram.engram_primes(len(layers), N, heads, base)
        cfg.update({"engram_layers": layers, "engram_table_rows": [sum(p) for p in primes], "engram_max_ngram": N,
                    "engram_n_heads": heads, "engram_head_dim": 32, "engram_vocab_size": base,
                    "engram_compressed_vocab": cfg["vocab_size"], "engram_pad_id": rng.randrange(cfg["vocab_size"])})
    return cfg


def random_config(rng: random.Random, v41_rng=None):
    L = rng.randint(3, 8)
    E = rng.randint(1, L - 1)
    ratios = [0] * L
    kv = []
    first = rng.randint(0, E)          # first == E: no encoder pool
    cur = 0
    for l in range(first, E):
        if l == first or rng.random() < 0.35:
            cur = rng.choice([1, 2])
            kv.append(l)
            ratios[l] = cur
        else:
            ratios[l] = cur if rng.random() < 0.8 else 0   # ratio-0 layer after a source (reading 3)
    ratios[E] = 1
    kv.append(E)
    for l in range(E + 1, L):
        ratios[l] = 1 if rng.random() < 0.85 else 0
    index = set(kv) | {l for l in range(L) if ratios[l] > 0 and rng.random() < 0.4}
    index = sorted(index)
    index_head_dim = rng.choice([8, 12, 16])
    head_dim = rng.choice([8, 12, 16, 24])
    rope_dim = rng.choice([r for r in range(2, min(head_dim - 1, index_head_dim) + 1, 2)])
    n_heads = rng.choice([1, 2, 3, 4, 6])
    o_groups = rng.choice([g for g in range(1, n_heads + 1) if n_heads % g == 0])
    topk = rng.randint(1, 8)
    cs = cb = bs = 0
    if rng.random() < 0.6:
        cs = rng.choice([s for s in index if s >= E])
        bs = rng.randint(1, 5)
        cb = -(-topk // bs) + 1 + rng.randint(0, 2)
    routed = 0 if rng.random() < 0.25 else rng.randint(2, 6)
    cfg = {
        "vocab_size": rng.randint(40, 200),
        "dim": rng.choice([16, 24, 32]),
        "n_layers": L,
        "n_encoder_layers": E,
        "n_heads": n_heads,
        "head_dim": head_dim,
        "rope_dim": rope_dim,
        "q_lora_rank": rng.choice([8, 16, 24]),
        "o_groups": o_groups,
        "o_group_rank": rng.choice([8, 16]),
        "window": rng.randint(2, 9),
        "compress_ratios": ratios,
        "kv_source_layers": kv,
        "index_source_layers": index,
        "index_heads": rng.randint(1, 3),
        "index_head_dim": index_head_dim,
        "index_topk": topk,
        "candidate_source_layer": cs,
        "candidate_blocks": cb,
        "candidate_block_size": bs,
        "n_routed_experts": routed,
        "n_shared_experts": 0 if routed == 0 else rng.randint(0, 1),
        "experts_per_token": 0 if routed == 0 else rng.randint(1, min(3, routed)),
        "moe_inter_dim": rng.choice([8, 16, 24]),
        "route_scale": rng.choice([1.0, 1.5, 2.5]),
        "swiglu_limit": rng.choice([0.0, 1.0, 10.0]),
        "rope_theta": rng.choice([10000.0, 500.0]),
        "compress_rope_theta": rng.choice([160000.0, 1000.0]),
        "norm_eps": 1e-6,
        "max_seq_len": 4096,
    }
    if v41_rng is not None:
        released_switches(v41_rng, cfg)
    return Config.from_dict(cfg)  # validates


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-K", type=int, default=4, help="number of random configurations")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cedar", default="build/cedar", help="path of the cedar binary")
    ap.add_argument("--skip-cedar", action="store_true", help="only generate (Python side end to end)")
    ap.add_argument("--keep", help="write the cases into this folder (kept) instead of a temp dir")
    ap.add_argument("--v41", action="store_true", help="also draw the released V4.1 switches (see above)")
    a = ap.parse_args()
    torch.set_num_threads(1)
    if not a.skip_cedar and not os.path.exists(a.cedar):
        print(f"random_check: {a.cedar} not found (build it, or pass --cedar PATH / --skip-cedar)")
        sys.exit(2)
    root = a.keep or tempfile.mkdtemp(prefix="cedar_random_check_")
    os.makedirs(root, exist_ok=True)
    failures = []
    for i in range(a.K):
        rng = random.Random(a.seed * 1000 + i)
        v41_rng = random.Random(a.seed * 1000 + i + 500000) if a.v41 else None
        for _ in range(20):  # (re)draw until a model seed with comfortable decision margins exists
            cfg = random_config(rng, v41_rng)
            released_layout = cfg.released["weight_layout"] == "deepseek_v41"
            # mostly prompts longer than W; sometimes short ones (N <= W + 2, bounded ~ full)
            N = rng.randint(2, cfg.W + 2) if rng.random() < 0.25 else rng.randint(cfg.W + 3, 70)
            P = rng.randrange(1, N, 2)
            d = os.path.join(root, f"case{i}")
            gen = f"tools/reference/random_check.py --seed {a.seed} (case {i})"
            try:
                meta = make_case(d, cfg, N, P, 100 + i * 997, 5 + i, gen, max_tries=10,
                                 log=lambda *_: None, bf16=(i % 3 == 2 and not released_layout))
                break
            except RuntimeError:
                continue
        else:
            print(f"case {i}: could not draw a configuration with safe margins")
            failures.append(i)
            continue
        desc = (f"case {i}: L={cfg.L} E={cfg.E} W={cfg.W} N={N} P={P} ratios={cfg.compress_ratios} "
                f"kv={cfg.kv_source_layers} index={cfg.index_source_layers} topk={cfg.index_topk} "
                f"cand=({cfg.candidate_source_layer},{cfg.candidate_blocks},{cfg.candidate_block_size}) "
                f"experts={cfg.n_routed_experts}/{cfg.experts_per_token}+{cfg.n_shared_experts} "
                f"weights={meta['weights_dtype']} margin={meta['min_decision_margin']}")
        if a.v41:
            r = cfg.released
            desc += (f" hc={r['hc_mult']}/{r['hc_sinkhorn_iters']} yarn={r['rope_factor']}/{r['rope_original_seq_len']} "
                     f"score={r['score_func']} norm={r['norm_topk_prob']} kv={r['kv_dtype']} layout={r['weight_layout']} "
                     f"engram={r['engram_layers']}/{r['engram_max_ngram']}x{r['engram_n_heads']}")
        if a.skip_cedar:
            print(f"gen   {desc}  -> {d}")
            continue
        cmd = [a.cedar, "check-golden", "--model", d, "--golden", os.path.join(d, "golden.safetensors")]
        try:
            r = subprocess.run(cmd, capture_output=True, text=True)
        except OSError as e:  # e.g. the binary is being relinked
            r = subprocess.CompletedProcess(cmd, 127, "", f"cannot run {a.cedar}: {e}")
        if r.returncode == 0:
            print(f"ok    {desc}")
        else:
            failures.append(i)
            print(f"FAIL  {desc}\n      command: {' '.join(cmd)}\n      config: {json.dumps(cfg.to_dict())}")
            print("      " + (r.stdout + r.stderr).strip().replace("\n", "\n      ")[-4000:])
    if not a.keep and not failures:
        shutil.rmtree(root, ignore_errors=True)
    elif failures:
        print(f"cases kept in {root}")
    print(f"{a.K - len(failures)}/{a.K} passed" if not a.skip_cedar else f"{a.K - len(failures)}/{a.K} generated")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
