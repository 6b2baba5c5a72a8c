"""Golden-file generator for Cedar's engine tests.

    /usr/bin/python3 tools/reference/golden.py --out tests/golden [--case tiny --case pool ...]

For each case writes <out>/<case>/{config.json, model.safetensors, golden.safetensors}; a case in
the released layout (`v41_tiny`) writes config.json, model-*-of-*.safetensors and
model.safetensors.index.json instead of model.safetensors.
Everything is computed in float64 from the F32 weights as stored; results are stored as F32.
See tools/reference/README.md for the content of golden.safetensors.
"""
import argparse
import json
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import safetensors_io  # noqa: E402
from config import Config, RELEASED  # noqa: E402
from init import random_weights  # noqa: E402
from model import Model, SeqState, PassCtx  # noqa: E402
import write_released  # noqa: E402  (v41/, on the path through model.py)

N_DECODE = 16
MIN_GAP = 1e-5  # reject a model seed whose closest discrete decision is nearer than this (relative)

TINY = {"vocab_size": 512, "dim": 64, "n_layers": 8, "n_encoder_layers": 4, "n_heads": 4, "head_dim": 32,
        "rope_dim": 8, "q_lora_rank": 32, "o_groups": 2, "o_group_rank": 32, "window": 8,
        "compress_ratios": [0, 2, 2, 2, 1, 1, 1, 1], "kv_source_layers": [1, 3, 4],
        "index_source_layers": [1, 3, 4, 6], "index_heads": 2, "index_head_dim": 16, "index_topk": 8,
        "candidate_source_layer": 4, "candidate_blocks": 12, "candidate_block_size": 8,
        "n_routed_experts": 4, "n_shared_experts": 1, "experts_per_token": 2, "moe_inter_dim": 64,
        "route_scale": 1.5, "swiglu_limit": 10.0, "rope_theta": 10000.0, "compress_rope_theta": 160000.0,
        "norm_eps": 1e-6, "max_seq_len": 4096}

# `pool`: the hierarchical candidate pool is active (61 decoder-pool entries = 16 blocks of 4 > 4 kept),
# top-k is sparse in every pooled layer (30 / 61 / 61 visible > 8), the prompt is odd (half group
# pending in layer 1's m=2 pool), longer than the staircase 7 + 3*6 = 25, W is odd, an encoder
# ratio-0 layer follows a kv source (reading 3), the encoder has an m=1 pool of its own, one routed
# expert per token without a shared expert, and the SwiGLU clamp is active (limit 1.5).
POOL = {"vocab_size": 256, "dim": 32, "n_layers": 8, "n_encoder_layers": 4, "n_heads": 4, "head_dim": 16,
        "rope_dim": 8, "q_lora_rank": 16, "o_groups": 2, "o_group_rank": 16, "window": 7,
        "compress_ratios": [0, 2, 0, 1, 1, 1, 1, 1], "kv_source_layers": [1, 3, 4],
        "index_source_layers": [1, 3, 4, 6], "index_heads": 2, "index_head_dim": 16, "index_topk": 8,
        "candidate_source_layer": 4, "candidate_blocks": 4, "candidate_block_size": 4,
        "n_routed_experts": 6, "n_shared_experts": 0, "experts_per_token": 1, "moe_inter_dim": 16,
        "route_scale": 2.0, "swiglu_limit": 1.5, "rope_theta": 10000.0, "compress_rope_theta": 160000.0,
        "norm_eps": 1e-6, "max_seq_len": 4096}

# The released DeepSeek-V4.1 switches on the tiny shape (config keys of engine/config.h).
# `tiny_hc`: 4 mHC streams, YaRN (factor 4 over 64 original positions: pair 0 keeps its frequency,
# pairs 1..3 are divided by 4) on the compressed layers, sigmoid router scores, F32 KV.
TINY_HC = dict(TINY, hc_mult=4, rope_factor=4.0, rope_original_seq_len=64, score_func="sigmoid")
# `tiny_hc_kv`: the same with the KV stored as released (index_head_dim 32: MXFP4 blocks of 32),
# softmax router scores without normalising the chosen weights.
TINY_HC_KV = dict(TINY, index_head_dim=32, hc_mult=4, rope_factor=4.0, rope_original_seq_len=64,
                  score_func="softmax", norm_topk_prob=False, kv_dtype="released")
# `v41_tiny`: written in the RELEASED file layout (v41/write_released.py: released config.json,
# FP8/FP4/BF16/F32 shards + index); the reference reads it back through v41/checkpoint.py. The
# released defaults otherwise: sqrtsoftplus, norm_topk_prob, rms_norm_eps 1e-20, KV as released;
# candidate blocks small enough to be active (3 blocks of 4 over 45 decoder-pool entries); Engram
# before layer 1 (orders 2..3 x 2 heads of 32, primes above 99: 101 + 103 + 107 + 109 = 420 rows,
# the identity class table: engram_compressed_vocab = vocab_size 512, pad id 2).
V41_TINY = dict(TINY, index_head_dim=32, candidate_blocks=3, candidate_block_size=4, hc_mult=4,
                rope_factor=4.0, rope_original_seq_len=64, norm_eps=1e-20, weight_layout="deepseek_v41",
                kv_dtype="released", engram_layers=[1], engram_table_rows=[420], engram_max_ngram=3,
                engram_n_heads=2, engram_head_dim=32, engram_vocab_size=100, engram_compressed_vocab=512,
                engram_pad_id=2)

CASES = {
    # name: (config, prompt length N, replay prefix P, model seed, data seed)
    "tiny": (TINY, 45, 41, 1000, 1),
    "pool": (POOL, 61, 45, 2000, 2),
    "tiny_hc": (TINY_HC, 45, 41, 3000, 3),
    "tiny_hc_kv": (TINY_HC_KV, 45, 41, 4000, 4),
    "v41_tiny": (V41_TINY, 45, 41, 5000, 5),
}


def f32(t):
    return t.detach().to(torch.float32).contiguous()


def compute_golden(model: Model, prompt, decode_tokens, P):
    """All golden tensors for one model/prompt. Returns (tensors, info dict)."""
    cfg = model.cfg
    N = len(prompt)
    out, info = {}, {"min_gap": math.inf}

    def decode_all(st):
        ctx = PassCtx()
        rows = [model.decode(st, t, ctx) for t in decode_tokens]
        info["min_gap"] = min(info["min_gap"], ctx.min_gap)
        return torch.stack(rows)

    for mode in ("full", "bounded"):
        st = SeqState(cfg)
        ctx = PassCtx(trace_row=N - 1)
        if mode == "full":
            logits = model.prefill_full(st, prompt, ctx)
        else:
            logits = model.prefill_bounded(st, prompt, ctx=ctx)
        info[f"{mode}.units"] = ctx.units
        info["min_gap"] = min(info["min_gap"], ctx.min_gap)
        out[f"{mode}.prefill_logits"] = f32(logits)
        for l, (scores, sel) in sorted(ctx.trace.items()):
            out[f"{mode}.topk.{l}"] = torch.tensor(sel, dtype=torch.int32)
            out[f"{mode}.scores.{l}"] = f32(scores)
        out[f"{mode}.decode_logits"] = f32(decode_all(st))
        if mode == "full":
            full_prefill = logits

    # sanity: the staircase (`exact`) reproduces `full` exactly
    st = SeqState(cfg)
    ex = model.prefill_exact(st, prompt)
    info["exact_vs_full"] = float((ex - full_prefill).abs().max())

    # replay scenario
    st = SeqState(cfg)
    ctx = PassCtx()
    model.prefill_full(st, prompt[:P], ctx)
    st.drop_windows_and_HE()
    ctx = PassCtx()
    model.encoder_replay(st, ctx)
    info["replay.encoder_units"] = ctx.units
    ctx2 = PassCtx()
    logits = model.prefill_bounded(st, prompt[P:], ctx=ctx2)
    info["replay.suffix_units"] = ctx2.units
    info["min_gap"] = min(info["min_gap"], ctx.min_gap, ctx2.min_gap)
    out["replay.prefill_logits"] = f32(logits)
    out["replay.decode_logits"] = f32(decode_all(st))
    return out, info


def make_case(out_dir, cfg: Config, N, P, model_seed, data_seed, generator, min_gap=MIN_GAP,
              max_tries=50, log=print, bf16=False):
    """Write config.json, model.safetensors and golden.safetensors into out_dir. The model seed is
    advanced until every discrete decision (top-k, candidate blocks, experts) has a relative margin
    of at least min_gap, so that float32 engines agree on them."""
    g = torch.Generator().manual_seed(data_seed)
    prompt = torch.randint(0, cfg.vocab_size, (N,), generator=g).tolist()
    decode_tokens = torch.randint(0, cfg.vocab_size, (N_DECODE,), generator=g).tolist()
    released = cfg.released["weight_layout"] == "deepseek_v41"
    for attempt in range(max_tries):
        seed = model_seed + attempt
        tensors = random_weights(cfg, seed)
        if bf16:  # the golden is computed from the weights exactly as stored
            tensors = {k: v.to(torch.bfloat16).to(torch.float32) for k, v in tensors.items()}
        if released:  # the values the released files will hold (FP8 / FP4 / BF16 / F32)
            raw = tensors
            tensors = write_released.encode(cfg, raw)[1]
        model = Model(cfg, tensors, torch.float64)
        gold, info = compute_golden(model, prompt, decode_tokens, P)
        info["kv_margins"] = model.kv_margins
        if info["min_gap"] >= min_gap:
            break
        log(f"  model seed {seed}: closest decision margin {info['min_gap']:.2e} < {min_gap:.0e}, next seed")
    else:
        raise RuntimeError("no model seed with comfortable decision margins")
    assert info["exact_vs_full"] == 0.0, f"exact != full: {info['exact_vs_full']}"
    os.makedirs(out_dir, exist_ok=True)
    if released:
        write_released.write_released(out_dir, cfg, raw, f"tools/reference/v41/write_released.py seed={seed}")
        # the golden must be what the files hold, read back through v41/checkpoint.py
        cfg_back, back = write_released.load_released(out_dir)
        assert cfg_back.to_dict() == cfg.to_dict(), "released config round trip"
        assert sorted(back) == sorted(tensors) and all(torch.equal(back[k], tensors[k]) for k in back), \
            "released weights round trip"
    else:
        cfg.save(os.path.join(out_dir, "config.json"))
        safetensors_io.save(os.path.join(out_dir, "model.safetensors"), tensors,
                            {"format": "pt", "generator": f"tools/reference/init.py seed={seed}"},
                            bf16=set(tensors) if bf16 else ())
    gold["prompt"] = torch.tensor(prompt, dtype=torch.int32)
    gold["decode_tokens"] = torch.tensor(decode_tokens, dtype=torch.int32)
    W, E, L = cfg.W, cfg.E, cfg.L
    meta = {
        "modes": "full,bounded",
        "N": N,
        "replay_P": P,
        "n_decode": N_DECODE,
        "generator": generator,
        "model_seed": seed,
        "data_seed": data_seed,
        "compute_dtype": "float64",
        "weights_dtype": "released (FP8/FP4/BF16/F32)" if released else "BF16" if bf16 else "F32",
        "window": W,
        "bounded_R": min(W, N),
        "replay_R": min(W, P),
        "staircase": cfg.staircase(),
        "index_layers": ",".join(str(l) for l in cfg.index_source_layers),
        "min_decision_margin": f"{info['min_gap']:.3e}",
        "exact_vs_full_max_abs": f"{info['exact_vs_full']:.3e}",
        "full.layer_units": info["full.units"],
        "bounded.layer_units": info["bounded.units"],
        "replay.encoder_layer_units": info["replay.encoder_units"],
        "replay.suffix_layer_units": info["replay.suffix_units"],
        "bounded_vs_full_prefill_max_abs": f"{float((gold['bounded.prefill_logits'] - gold['full.prefill_logits']).abs().max()):.3e}",
    }
    switches = {k: v for k, v in cfg.to_dict().items() if k in RELEASED}
    if switches:  # only cases with released switches carry these (older goldens stay byte-identical)
        meta["released_switches"] = json.dumps(switches, sort_keys=True)
        meta["residual_width"] = cfg.residual_width()
    if cfg.kv_released:
        km = info["kv_margins"]
        meta["kv_rounding_min_margin"] = f"{km.min:.3e}"
        meta["kv_rounding_near_ties"] = f"{km.near} of {km.count} (margin < {km.NEAR:.0e})"
    safetensors_io.save(os.path.join(out_dir, "golden.safetensors"), gold, meta)
    return meta


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="output folder (e.g. tests/golden)")
    ap.add_argument("--case", action="append", choices=sorted(CASES), help="case(s) to write (default: all)")
    a = ap.parse_args()
    torch.set_num_threads(1)
    generator = "/usr/bin/python3 tools/reference/golden.py --out tests/golden"
    for name in a.case or list(CASES):
        cfgd, N, P, mseed, dseed = CASES[name]
        cfg = Config.from_dict(cfgd)
        d = os.path.join(a.out, name)
        meta = make_case(d, cfg, N, P, mseed, dseed, generator)
        print(f"{name}: N={N} P={P} model_seed={meta['model_seed']} margin={meta['min_decision_margin']} "
              f"bounded-full={meta['bounded_vs_full_prefill_max_abs']} -> {d}")


if __name__ == "__main__":
    main()
