"""Seeded random-weight CED model for a config: writes config.json + model.safetensors (F32).

Scales keep activations sane across layers: linear weights ~ N(0, 1/fan_in), norm weights
~ 1 + N(0, 0.1^2), output projections (attn wo_b, FFN w2) further scaled by 1/sqrt(2L),
sinks ~ N(0, 0.1^2), gate bias ~ N(0, 0.1^2), embedding ~ N(0, 1).
mHC (hc_mult > 1; F32 `layers.N.hc_{attn,ffn}_{fn,base,scale}`, no `.weight`): fn ~ N(0, 1/fan_in)
(the mixes then have unit size: fn meets the RMS-normalised streams), base ~ N(0, 0.5^2) (pre and
post away from 0 and 1 but not saturated), scale ~ 0.5 + 0.1 N(0, 1) (each of pre, post, comb).
Engram: table rows ~ N(0, 1), q_weight / k_weight ~ 1 + 0.1 N(0, 1), wkv ~ N(0, 1/fan_in).
"""
import argparse
import json
import math
import os

import torch

import safetensors_io
from config import Config
from model import expected_shapes


def random_weights(cfg: Config, seed: int):
    g = torch.Generator().manual_seed(seed)
    out_scale = 1.0 / math.sqrt(2 * cfg.n_layers)
    tensors = {}
    for name, shape in expected_shapes(cfg).items():  # insertion order is deterministic
        leaf = name.rsplit(".", 2)
        if name == "embed.weight":
            t = torch.randn(shape, generator=g, dtype=torch.float64)
        elif "norm" in name and name.endswith("weight") and len(shape) == 1:
            t = 1.0 + 0.1 * torch.randn(shape, generator=g, dtype=torch.float64)
        elif name.endswith("attn.sink"):
            t = 0.1 * torch.randn(shape, generator=g, dtype=torch.float64)
        elif name.endswith("gate.bias"):
            t = 0.1 * torch.randn(shape, generator=g, dtype=torch.float64)
        elif name.endswith("engram.embed.weight"):
            t = torch.randn(shape, generator=g, dtype=torch.float64)
        elif name.endswith("engram.q_weight") or name.endswith("engram.k_weight"):
            t = 1.0 + 0.1 * torch.randn(shape, generator=g, dtype=torch.float64)
        elif name.endswith("_base") and ".hc_" in name:
            t = 0.5 * torch.randn(shape, generator=g, dtype=torch.float64)
        elif name.endswith("_scale") and ".hc_" in name:
            t = 0.5 + 0.1 * torch.randn(shape, generator=g, dtype=torch.float64)
        else:
            fan_in = shape[-1]
            t = torch.randn(shape, generator=g, dtype=torch.float64) / math.sqrt(fan_in)
            if name.endswith("attn.wo_b.weight") or name.endswith("w2.weight"):
                t = t * out_scale
        tensors[name] = t.to(torch.float32)
    return tensors


def write_model(cfg: Config, seed: int, out_dir: str, bf16=False):
    os.makedirs(out_dir, exist_ok=True)
    tensors = random_weights(cfg, seed)
    cfg.save(os.path.join(out_dir, "config.json"))
    safetensors_io.save(os.path.join(out_dir, "model.safetensors"), tensors,
                        {"format": "pt", "generator": f"tools/reference/init.py seed={seed}"},
                        bf16=set(tensors) if bf16 else ())
    return tensors


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--config", required=True, help="config.json to use")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", required=True, help="output folder")
    ap.add_argument("--bf16", action="store_true", help="store BF16 instead of F32")
    a = ap.parse_args()
    cfg = Config.load(a.config)
    write_model(cfg, a.seed, a.out, a.bf16)


if __name__ == "__main__":
    main()
