"""Component golden vectors of the V4.1 reference for the C++ engine's unit tests:
    /usr/bin/python3 tools/reference/v41/golden_components.py --out tests/golden/v41_components.json

One JSON file (floats written with Python's repr, which round-trips exactly through strtod):
  engram      the released hash layout (layers 1 and 14): primes, offsets, NumPy PCG64 multipliers,
              and the row ids of a 12-token run (class map t -> t % 97, an image token at 5)
  quant       for seeded rows: input (float32 values), codes and scale codes and the dequantised
              values of FP4/E4M3-16 (512), MXFP4 (128) and FP8/UE8M0-32 (512)
  sinkhorn    4x4 logits and the released 20-iteration output (hc_eps 1e-6)
  yarn        the compressed layers' inverse frequencies (r 64, 160000, factor 16, 65536, 32, 1)
              and the ratio-0 ones (10000)
  routing     a sqrtsoftplus case: logits, bias, k 6 of 16, ids and weights (scale 1.5)
"""
import argparse
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import engram  # noqa: E402
import mhc  # noqa: E402
import moe  # noqa: E402
import quant  # noqa: E402
import rope  # noqa: E402

F64 = torch.float64


def _floats(t):
    return [float(v) for v in t.reshape(-1)]


def build():
    # inputs from NumPy's legacy RandomState, whose stream NumPy keeps stable across versions
    g = np.random.RandomState(4101)

    def randn(*shape):
        return torch.from_numpy(g.standard_normal(shape).astype(np.float64))

    out = {"generator": "tools/reference/v41/golden_components.py", "numpy_randomstate_seed": 4101}
    layers, N, heads = [1, 14], 4, 8
    primes = engram.engram_primes(2, N, heads, 16000000)
    tokens = [0, 17, 3, 99, 250, 7, 7, 129000, 1, 2, 64, 300]
    image = [i == 5 for i in range(len(tokens))]
    token_map = [t % 97 for t in range(129280)]
    e = {"layers": layers, "max_ngram": N, "heads": heads, "engram_vocab_size": 16000000,
         "compressed_vocab": 99092, "pad_id": 2, "primes": primes,
         "offsets": [engram.engram_offsets(p) for p in primes],
         "multipliers": [engram.engram_multipliers(l, N, 99092) for l in layers],
         "tokens": tokens, "image": image, "class_map": "t % 97"}
    e["row_ids"] = [engram.engram_row_ids(tokens, image, token_map, 2, N, heads, e["multipliers"][i], primes[i],
                                          e["offsets"][i]) for i in range(2)]
    out["engram"] = e
    q = []
    for scale, n in ((1.0, 512), (0.01, 512), (37.0, 512)):
        x = (scale * randn(n)).to(torch.float32).to(F64)
        c16, s16 = quant.codes_fp4_e4m3(x)
        c8, s8 = quant.codes_fp8_ue8m0(x)
        xi = x[:128]
        c32, s32 = quant.codes_mxfp4(xi)
        q.append({"input": _floats(x),
                  "fp4_e4m3_16": {"codes": c16, "scales": s16, "values": _floats(quant.qdq_fp4_e4m3(x))},
                  "fp8_ue8m0_32": {"codes": c8, "scales": s8, "values": _floats(quant.qdq_fp8_ue8m0(x))},
                  "mxfp4_32_first128": {"codes": c32, "scales": s32, "values": _floats(quant.qdq_mxfp4(xi))}})
    out["quant"] = q
    sk = []
    for scale in (1.0, 3.0):
        L = scale * randn(4, 4)
        sk.append({"logits": _floats(L), "comb": _floats(mhc.sinkhorn(L, 20, 1e-6))})
    out["sinkhorn"] = {"iters": 20, "hc_eps": 1e-6, "cases": sk}
    out["yarn"] = {"compressed": _floats(rope.yarn_inv_freq(64, 160000.0, 16.0, 65536, 32.0, 1.0)),
                   "ratio0": _floats(rope.plain_inv_freq(64, 10000.0))}
    logits = randn(16)
    bias = 0.3 * randn(16)
    scores = moe.routing_scores(logits, "sqrtsoftplus")
    ids = moe.select_experts(scores, bias, 6)
    out["routing"] = {"scoring_func": "sqrtsoftplus", "logits": _floats(logits), "bias": _floats(bias), "k": 6,
                      "norm_topk_prob": True, "routed_scaling_factor": 1.5, "ids": ids,
                      "weights": _floats(moe.expert_weights(scores, ids, True, 1.5))}
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="JSON file to write")
    a = ap.parse_args()
    with open(a.out, "w", encoding="utf-8") as f:
        json.dump(build(), f, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {a.out} ({os.path.getsize(a.out)} bytes)")


if __name__ == "__main__":
    main()
