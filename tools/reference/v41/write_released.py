"""A reduced model written in exactly the released DeepSeek-V4.1-Flash file layout, and read back.

    /usr/bin/python3 tools/reference/v41/write_released.py --seed 3 --out DIR   # the v41_tiny shape

Layout (docs/v41-contract.md §1, §2, §4; ../shared/spec/v41-released-notes.md Appendix A):
  * config.json in the released HF spelling: tests/data/v41/config.json with `text_config` shrunk
    to the reduced shape (as tests/v41_checkpoint_test.cpp shrinks it);
  * sharded safetensors `model-0000K-of-0000N.safetensors` (shard 1: embed, head, norm; shard 2 + l:
    backbone layer l) and `model.safetensors.index.json` {"metadata": {"total_size"}, "weight_map"};
  * dtypes: dense projections FP8 = `<x>.weight` F8_E4M3 + `<x>.scale` F8_E8M0 per 32x32 block;
    routed experts FP4 = `<x>.weight` I8 [out, in/2] (two E2M1 codes per byte, element 2k in the
    low nibble) + `<x>.scale` F8_E8M0 [out, in/32]; norms, embeddings, head, router, compressor,
    indexer wk / k_norm / weights_proj BF16; hc_*, attn_sink, gate.bias / bias_vl F32.
Weights are seeded random float64 (init.random_weights of the equivalent our-layout config),
quantised with v41/quant.py's rules: FP8 block scale 2^ceil(log2(max(amax, 1e-4) / 448)), FP4 row
scale 2^ceil(log2(max(amax, 6 * 2^-126) / 6)), codes by round-to-nearest-even (the encoder floors
of contract §3); BF16 by round-to-nearest-even from float32.

Reading (`load_released`): v41/config.py reads the config, v41/checkpoint.py the shards
(dequantised to float64); the result is our `Config` + tensors under our names, so model.py runs it.
Mapping of the released config onto our ModelConfig keys (the reading the reference relies on):
n_encoder_layers = the last kv source (notes §3: the cut is layer 20, the last KV source);
candidate_source_layer_id -1 -> 0 (off); compress_ratios cut to num_hidden_layers (DSpark entries
dropped); kv_dtype "released" (the released forward stores its KV quantised); weight_layout
"deepseek_v41". Engram (contract §8.1): `layers.N.engram.embed.weight` F8_E4M3 rows with
`embed.scale` F8_E8M0 [rows, head_dim/32], `q_weight` / `k_weight` BF16 [hc, d], `wkv` FP8 blocks;
the class table is the identity (engram_compressed_vocab_size = vocab_size, no tokenizer). Not
written: DSpark blocks (num_nextn_predict_layers 0).
"""
import argparse
import copy
import importlib.util
import json
import os
import struct
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
# tools/reference first (its config.py is `config`), v41/ after it; v41/config.py is loaded by file
sys.path.insert(0, os.path.dirname(HERE))
if HERE not in sys.path:
    sys.path.append(HERE)

import checkpoint  # noqa: E402
import quant  # noqa: E402
from config import Config  # noqa: E402

_spec = importlib.util.spec_from_file_location("v41config", os.path.join(HERE, "config.py"))
v41config = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(v41config)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
RELEASED_CONFIG = os.path.join(REPO, "tests", "data", "v41", "config.json")

# our tensor-name suffix -> (released suffix, dtype kind); kinds: fp8, fp4, bf16, f32
_LAYER = [
    ("attn_norm.weight", "attn_norm.weight", "bf16"),
    ("ffn_norm.weight", "ffn_norm.weight", "bf16"),
    ("hc_attn_fn", "hc_attn_fn", "f32"), ("hc_attn_base", "hc_attn_base", "f32"),
    ("hc_attn_scale", "hc_attn_scale", "f32"), ("hc_ffn_fn", "hc_ffn_fn", "f32"),
    ("hc_ffn_base", "hc_ffn_base", "f32"), ("hc_ffn_scale", "hc_ffn_scale", "f32"),
    ("attn.wq_a.weight", "attn.wq_a.weight", "fp8"),
    ("attn.q_norm.weight", "attn.q_norm.weight", "bf16"),
    ("attn.wq_b.weight", "attn.wq_b.weight", "fp8"),
    ("attn.wkv.weight", "attn.wkv.weight", "fp8"),
    ("attn.kv_norm.weight", "attn.kv_norm.weight", "bf16"),
    ("attn.sink", "attn.attn_sink", "f32"),
    ("attn.wo_a.weight", "attn.wo_a.weight", "fp8"),     # ours [G, rank, hpg*c], released [G*rank, hpg*c]
    ("attn.wo_b.weight", "attn.wo_b.weight", "fp8"),
    ("attn.compressor.wkv.weight", "attn.compressor.wkv.weight", "bf16"),
    ("attn.compressor.wz.weight", "attn.compressor.wgate.weight", "bf16"),
    ("attn.compressor.norm.weight", "attn.compressor.norm.weight", "bf16"),
    ("attn.indexer.wk.weight", "attn.indexer.wk.weight", "bf16"),
    ("attn.indexer.k_norm.weight", "attn.indexer.k_norm.weight", "bf16"),
    ("attn.indexer.wq_b.weight", "attn.indexer.wq_b.weight", "fp8"),
    ("attn.indexer.weights_proj.weight", "attn.indexer.weights_proj.weight", "bf16"),
    ("ffn.gate.weight", "ffn.gate.weight", "bf16"),
    ("ffn.gate.bias", "ffn.gate.bias", "f32"),
]
_GLOBAL = [("embed.weight", "embed.weight", "bf16"), ("head.weight", "head.weight", "bf16"),
           ("norm.weight", "norm.weight", "bf16")]


def name_map(cfg):
    """[(our name, released name, kind, shard index)] for every tensor of cfg (our Config)."""
    out = [(a, b, k, 0) for a, b, k in _GLOBAL]
    for l in range(cfg.n_layers):
        p = f"layers.{l}."
        for a, b, k in _LAYER:
            out.append((p + a, p + b, k, l + 1))
        for e in range(cfg.n_routed_experts):
            for w in ("w1", "w2", "w3"):
                out.append((p + f"ffn.experts.{e}.{w}.weight", p + f"ffn.experts.{e}.{w}.weight", "fp4", l + 1))
        if cfg.n_shared_experts:
            for w in ("w1", "w2", "w3"):
                out.append((p + f"ffn.shared.{w}.weight", p + f"ffn.shared_experts.{w}.weight", "fp8", l + 1))
        if l in cfg.released["engram_layers"]:  # contract §8.1: the table FP8 with one UE8M0 per 32 of a row
            out += [(p + "engram.embed.weight", p + "engram.embed.weight", "fp8row", l + 1),
                    (p + "engram.q_weight", p + "engram.q_weight", "bf16", l + 1),
                    (p + "engram.k_weight", p + "engram.k_weight", "bf16", l + 1),
                    (p + "engram.wkv.weight", p + "engram.wkv.weight", "fp8", l + 1)]
    return out


# ---------------------------------------------------------------- config, both directions

def released_config(cfg):
    """The released config.json (dict) for our Config cfg: tests/data/v41/config.json, text_config shrunk."""
    with open(RELEASED_CONFIG, encoding="utf-8") as f:
        j = json.load(f)
    r = cfg.released
    if cfg.n_routed_experts == 0:
        raise ValueError("released layout: expected a MoE config (n_routed_experts > 0), found a dense FFN")
    if cfg.E != max(cfg.kv_source_layers):
        raise ValueError(f"released layout: the cut is the last kv source; expected n_encoder_layers "
                         f"{max(cfg.kv_source_layers)}, found {cfg.E}")
    if r["n_mtp_layers"]:
        raise ValueError("released layout: DSpark blocks are not written by this reference")
    t = j["text_config"]
    t.update({
        "vocab_size": cfg.vocab_size, "hidden_size": cfg.dim, "moe_intermediate_size": cfg.moe_inter_dim,
        "num_hidden_layers": cfg.n_layers, "num_attention_heads": cfg.n_heads, "head_dim": cfg.head_dim,
        "qk_rope_head_dim": cfg.rope_dim, "q_lora_rank": cfg.q_lora_rank, "o_lora_rank": cfg.o_group_rank,
        "o_groups": cfg.o_groups, "swiglu_limit": cfg.swiglu_limit, "rms_norm_eps": cfg.norm_eps,
        "max_position_embeddings": int(cfg.extra.get("max_seq_len", 4096)),
        "rope_theta": cfg.rope_theta, "compress_rope_theta": cfg.compress_rope_theta,
        "n_routed_experts": cfg.n_routed_experts, "n_shared_experts": cfg.n_shared_experts,
        "num_experts_per_tok": cfg.experts_per_token, "scoring_func": r["score_func"],
        "norm_topk_prob": r["norm_topk_prob"], "routed_scaling_factor": cfg.route_scale,
        "sliding_window": cfg.window, "compress_ratios": list(cfg.compress_ratios),
        "kv_source_layer_ids": list(cfg.kv_source_layers), "index_source_layer_ids": list(cfg.index_source_layers),
        "index_n_heads": cfg.index_heads, "index_head_dim": cfg.index_head_dim, "index_topk": cfg.index_topk,
        "candidate_source_layer_id": cfg.candidate_source_layer if cfg.candidate_source_layer else -1,
        "candidate_topk_blocks": cfg.candidate_blocks, "candidate_block_size": cfg.candidate_block_size,
        "hc_mult": r["hc_mult"], "hc_sinkhorn_iters": r["hc_sinkhorn_iters"], "hc_eps": r["hc_eps"],
        "engram_layer_ids": list(r["engram_layers"]), "engram_num_embeddings": list(r["engram_table_rows"]),
        "num_nextn_predict_layers": 0, "dspark_target_layer_ids": [],
    })
    if r["engram_layers"]:
        t.update({"engram_max_ngram_size": r["engram_max_ngram"], "engram_vocab_size": r["engram_vocab_size"],
                  "engram_n_heads": r["engram_n_heads"], "engram_head_dim": r["engram_head_dim"],
                  "engram_pad_token_id": r["engram_pad_id"], "engram_compressed_vocab_size": r["engram_compressed_vocab"]})
    # without YaRN (factor 1) the original length is any positive value (YaRN with factor 1 is plain RoPE);
    # the released parser wants one >= 1: max_position_embeddings
    original = r["rope_original_seq_len"] if r["rope_factor"] > 1 else t["max_position_embeddings"]
    t["rope_scaling"] = {"rope_type": "yarn", "factor": r["rope_factor"], "beta_fast": r["rope_beta_fast"],
                         "beta_slow": r["rope_beta_slow"], "original_max_position_embeddings": original}
    return j


def config_from_released(j, with_dspark=False):
    """Our Config for a released config.json dict (the mapping in the module docstring). The
    backbone's only: DSpark stages (num_nextn_predict_layers > 0) are refused unless with_dspark
    (v41/dspark.py reads them itself)."""
    t, roles = v41config.from_dict(j)
    L = int(t["num_hidden_layers"])
    if int(t["num_nextn_predict_layers"]) and not with_dspark:
        raise NotImplementedError("released config: DSpark blocks are not modelled by the reference")
    kv = [int(x) for x in t["kv_source_layer_ids"]]
    if not kv:
        raise ValueError("released config: expected kv_source_layer_ids, found none (no cut layer)")
    rs = t["rope_scaling"]
    cs = int(t["candidate_source_layer_id"])
    d = {
        "vocab_size": t["vocab_size"], "dim": t["hidden_size"], "n_layers": L, "n_encoder_layers": max(kv),
        "n_heads": t["num_attention_heads"], "head_dim": t["head_dim"], "rope_dim": t["qk_rope_head_dim"],
        "q_lora_rank": t["q_lora_rank"], "o_groups": t["o_groups"], "o_group_rank": t["o_lora_rank"],
        "window": t["sliding_window"], "compress_ratios": [int(x) for x in t["compress_ratios"][:L]],
        "kv_source_layers": kv, "index_source_layers": [int(x) for x in t["index_source_layer_ids"]],
        "index_heads": t["index_n_heads"], "index_head_dim": t["index_head_dim"], "index_topk": t["index_topk"],
        "candidate_source_layer": cs if cs > 0 else 0, "candidate_blocks": t["candidate_topk_blocks"] if cs > 0 else 0,
        "candidate_block_size": t["candidate_block_size"] if cs > 0 else 0,
        "n_routed_experts": t["n_routed_experts"], "n_shared_experts": t["n_shared_experts"],
        "experts_per_token": t["num_experts_per_tok"], "moe_inter_dim": t["moe_intermediate_size"],
        "route_scale": t["routed_scaling_factor"], "swiglu_limit": t["swiglu_limit"], "rope_theta": t["rope_theta"],
        "compress_rope_theta": t["compress_rope_theta"], "norm_eps": t["rms_norm_eps"],
        "max_seq_len": t.get("max_position_embeddings", 4096),
        "weight_layout": "deepseek_v41", "hc_mult": t["hc_mult"], "hc_sinkhorn_iters": t["hc_sinkhorn_iters"],
        "hc_eps": t["hc_eps"], "rope_factor": rs["factor"], "rope_original_seq_len": rs["original_max_position_embeddings"],
        "rope_beta_fast": rs["beta_fast"], "rope_beta_slow": rs["beta_slow"], "score_func": t["scoring_func"],
        "norm_topk_prob": t["norm_topk_prob"], "kv_dtype": "released",
    }
    if t["engram_layer_ids"]:
        d.update({"engram_layers": [int(x) for x in t["engram_layer_ids"]],
                  "engram_table_rows": [int(x) for x in t["engram_num_embeddings"]],
                  "engram_max_ngram": t["engram_max_ngram_size"], "engram_n_heads": t["engram_n_heads"],
                  "engram_head_dim": t["engram_head_dim"], "engram_vocab_size": t["engram_vocab_size"],
                  "engram_compressed_vocab": t["engram_compressed_vocab_size"], "engram_pad_id": t["engram_pad_token_id"]})
    if float(rs["factor"]) <= 1:
        d["rope_factor"], d["rope_original_seq_len"] = 1.0, 0
    return Config.from_dict(d)


# ---------------------------------------------------------------- quantisation of weights

_E4M3_POS = np.array([quant.decode_e4m3(c) for c in range(127)], dtype=np.float64)   # 0 .. 448
_E2M1_POS = np.array([quant.decode_e2m1(c) for c in range(8)], dtype=np.float64)     # 0 .. 6


def _codes(values, table, sign_bit):
    """Codes of values that lie exactly on a grid (table of the non-negative values by code)."""
    v = np.asarray(values, dtype=np.float64)
    a = np.abs(v)
    idx = np.searchsorted(table, a)
    if not np.array_equal(table[np.minimum(idx, len(table) - 1)], a):
        raise AssertionError("a rounded value is not on the grid")
    return (idx | np.where(np.signbit(v), sign_bit, 0)).astype(np.uint8)


def quantise_fp8_block(w, block=32):
    """w [out, in] float64 -> (E4M3 codes uint8 [out, in], UE8M0 codes uint8 [ceil(out/32), ceil(in/32)],
    dequantised float64 [out, in])."""
    o, i = w.shape
    bo, bi = -(-o // block), -(-i // block)
    pad = torch.zeros(bo * block, bi * block, dtype=torch.float64)
    pad[:o, :i] = w
    blocks = pad.reshape(bo, block, bi, block).to(torch.float32)
    amax = blocks.abs().amax(dim=(1, 3))
    s = quant.pow2_ceil_f32(torch.clamp(amax, min=1e-4) * torch.tensor(1 / 448, dtype=torch.float32))  # [bo, bi]
    sfull = s.repeat_interleave(block, 0).repeat_interleave(block, 1)[:o, :i]
    r = quant.round_e4m3(torch.clamp(w.to(torch.float32).to(torch.float64) / sfull, -448, 448))
    codes = _codes(r.numpy(), _E4M3_POS, 0x80)
    scodes = np.array([[quant.encode_ue8m0(float(x)) for x in row] for row in s], dtype=np.uint8)
    return codes, scodes, r * sfull


def quantise_fp8_rows(w, block=32):
    """Engram table w [rows, n] -> (E4M3 codes [rows, n], UE8M0 codes [rows, n/32], dequantised): one
    power-of-two scale per 32 channels of a row, 2^ceil(log2(max(amax, 1e-4) / 448))."""
    s = quant.fp8_ue8m0_scales(w, block)                                   # [rows, n/32]
    sfull = s.repeat_interleave(block, 1)
    r = quant.round_e4m3(torch.clamp(w.to(torch.float32).to(torch.float64) / sfull, -448, 448))
    codes = _codes(r.numpy(), _E4M3_POS, 0x80)
    scodes = np.array([[quant.encode_ue8m0(float(x)) for x in row] for row in s], dtype=np.uint8)
    return codes, scodes, r * sfull


def quantise_fp4_rows(w, block=32):
    """w [out, in] float64 -> (packed bytes uint8 [out, in/2], UE8M0 codes [out, in/32], dequantised)."""
    o, i = w.shape
    if i % block:
        raise ValueError(f"FP4 expert weight: expected in-features a multiple of {block}, found {i}")
    s = quant.mxfp4_scales(w, block)                                        # [out, in/32]
    sfull = s.repeat_interleave(block, 1)
    r = quant.round_e2m1(torch.clamp(w.to(torch.float32).to(torch.float64) / sfull, -6, 6))
    codes = _codes(r.numpy(), _E2M1_POS, 8)
    packed = (codes[:, 0::2] | (codes[:, 1::2] << 4)).astype(np.uint8)
    scodes = np.array([[quant.encode_ue8m0(float(x)) for x in row] for row in s], dtype=np.uint8)
    return packed, scodes, r * sfull


def _bf16(w):
    """(raw uint16 bits, dequantised float64): round to nearest even from float32."""
    b = w.to(torch.float32).to(torch.bfloat16)
    return b.view(torch.int16).numpy().view(np.uint16), b.to(torch.float64)


def encode(cfg, tensors):
    """Our-named float tensors -> (files: {shard index: [(released name, dtype, shape, bytes)]},
    dequantised: {our name: float64 tensor}, what the released files hold)."""
    files, deq = {}, {}
    for ours, rel, kind, shard in name_map(cfg):
        if ours not in tensors:
            continue
        w = tensors[ours].to(torch.float64)
        if ours.endswith("attn.wo_a.weight"):
            w = w.reshape(-1, w.shape[-1])
        items = []
        if kind in ("fp8", "fp8row"):
            codes, sc, v = quantise_fp8_block(w) if kind == "fp8" else quantise_fp8_rows(w)
            items += [(rel, "F8_E4M3", list(codes.shape), codes.tobytes()),
                      (rel[:-len(".weight")] + ".scale", "F8_E8M0", list(sc.shape), sc.tobytes())]
        elif kind == "fp4":
            packed, sc, v = quantise_fp4_rows(w)
            items += [(rel, "I8", list(packed.shape), packed.tobytes()),
                      (rel[:-len(".weight")] + ".scale", "F8_E8M0", list(sc.shape), sc.tobytes())]
        elif kind == "bf16":
            bits, v = _bf16(w)
            items.append((rel, "BF16", list(w.shape), bits.astype("<u2").tobytes()))
        else:
            v = w.to(torch.float32).to(torch.float64)
            items.append((rel, "F32", list(w.shape), w.to(torch.float32).numpy().astype("<f4").tobytes()))
        if rel.endswith("ffn.gate.bias"):  # image-token selection bias: unused for text, kept distinct
            bv = (-w).to(torch.float32)
            items.append((rel + "_vl", "F32", list(w.shape), bv.numpy().astype("<f4").tobytes()))
        files.setdefault(shard, []).extend(items)
        deq[ours] = v.reshape(tensors[ours].shape)
    return files, deq


def _write_shard(path, items, metadata):
    header, offset = {}, 0
    for name, dt, shape, raw in items:
        header[name] = {"dtype": dt, "shape": shape, "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
    header["__metadata__"] = metadata
    h = json.dumps(header, separators=(",", ":")).encode("utf-8")
    h += b" " * ((-(8 + len(h))) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for _, _, _, raw in items:
            f.write(raw)
    return offset


def write_released(out_dir, cfg, tensors, generator="tools/reference/v41/write_released.py"):
    """Write config.json + shards + index for our Config cfg and our-named tensors; returns the
    dequantised tensors (our names, float64) that the files hold."""
    os.makedirs(out_dir, exist_ok=True)
    files, deq = encode(cfg, tensors)
    n = len(files)
    weight_map, total = {}, 0
    for k in sorted(files):
        shard = f"model-{k + 1:05d}-of-{n:05d}.safetensors"
        total += _write_shard(os.path.join(out_dir, shard), files[k], {"format": "pt", "generator": generator})
        for name, _, _, _ in files[k]:
            weight_map[name] = shard
    with open(os.path.join(out_dir, "model.safetensors.index.json"), "w", encoding="utf-8") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=1)
        f.write("\n")
    with open(os.path.join(out_dir, "config.json"), "w", encoding="utf-8") as f:
        json.dump(released_config(cfg), f, indent=1)
        f.write("\n")
    return deq


def load_released(folder, with_dspark=False):
    """(our Config, {our name: float64 tensor}) of a folder in the released layout, through
    v41/config.py and v41/checkpoint.py (dequantised); the backbone's tensors only."""
    with open(os.path.join(folder, "config.json"), encoding="utf-8") as f:
        cfg = config_from_released(json.load(f), with_dspark)
    ck = checkpoint.Checkpoint(folder)
    out = {}
    for ours, rel, kind, _ in name_map(cfg):
        if rel not in ck.weight_map:
            continue  # e.g. wgate on ratio-1 sources: model.py names what it needs
        t = ck.tensor(rel)
        if ours.endswith("attn.wo_a.weight"):
            t = t.reshape(cfg.o_groups, cfg.o_group_rank, -1)
        out[ours] = t
    return cfg, out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    from golden import V41_TINY  # noqa: E402
    from init import random_weights  # noqa: E402
    cfg = Config.from_dict(copy.deepcopy(V41_TINY))
    write_released(a.out, cfg, random_weights(cfg, a.seed), f"write_released.py --seed {a.seed}")
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
