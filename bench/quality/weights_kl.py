"""The price of a weight precision on a trained model, per execution mode (issue 20).

    /usr/bin/python3 bench/quality/weights_kl.py --model models/cedar-mini --seqs 4 --weights bf16,int8,int8-a8

The held-out windows of quality.py (T + 1 = 1025 tokens). For each precision W, build/bench/bench_quality
(W-a8, e.g. int8-a8 or fp8-fp4-a8: --weights W with --int8-activations; W-bf16a, e.g. fp8-fp4-bf16a: with
--bf16-activations; W-bf16a-a8 with both, where FP4 takes BF16 activations since session 27) runs every scenario (full, exact@n, bounded@n for n in quality.CUTS, then 128 teacher-forced
decode rows) at --weights W and, with --kl-ref f32, the same scenario at F32: per row the next
token's NLL at W and at F32 and KL(F32 || W) in nats. Per (W, mode): bits per byte at W, its
difference from F32 in the same mode (± standard error over rows), KL(F32 || W) per row, and,
to compare with, what the mode itself costs at F32 (bounded vs full: Δ bits per byte and
KL(full || bounded) per row on the same rows). cedar-mini's vocabulary is bytes: bits per token
= bits per byte. Prints a markdown table and, with --jsonl, one JSON line per row of it.
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import quality  # noqa: E402  (the windows and the cuts)

ROOT = quality.ROOT
LN2 = math.log(2)


def run(binary, model, path, weights, modes, threads):
    # "W-a8" (int8-a8, fp8-fp4-a8): --weights W with --int8-activations (INT8 and FP4 decode products on 8-bit activations);
    # "W-bf16a" (fp8-fp4-bf16a): --bf16-activations (FP8 and FP4 decode products on BF16 activations); "W-bf16a-a8" both.
    base, flags = weights, []
    if base.endswith("-a8"):
        base, flags = base[:-3], flags + ["--int8-activations"]
    if base.endswith("-bf16a"):
        base, flags = base[:-6], flags + ["--bf16-activations"]
    cmd = [binary, "--model", model, "--tokens", path, "--cuts", ",".join(map(str, quality.CUTS)),
           "--decode", str(quality.DECODE), "--modes", modes, "--threads", str(threads), "--weights", base] + flags
    if weights != "f32":
        cmd += ["--kl-ref", "f32"]
    res = subprocess.run(cmd, check=True, capture_output=True, text=True)
    return [json.loads(x) for x in res.stdout.splitlines() if x.strip()]


def pool(recs, scenario, keys):
    acc = {k: [] for k in keys}
    for r in recs:
        if r["scenario"] != scenario:
            continue
        for k in keys:
            acc[k].extend(r[k])
    return {k: np.array(v, dtype=np.float64) for k, v in acc.items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="models/cedar-mini")
    ap.add_argument("--seqs", type=int, default=4)
    ap.add_argument("--weights", default="bf16,int8")
    ap.add_argument("--modes", default="exact,bounded")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--cpp", default=os.path.join(ROOT, "build", "bench", "bench_quality"))
    ap.add_argument("--jsonl", help="also write the JSON lines here")
    a = ap.parse_args()
    model = a.model if os.path.isabs(a.model) else os.path.join(ROOT, a.model)
    seqs, idx = quality.pick_windows(a.seqs)
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        for s in seqs:
            f.write(",".join(str(int(t)) for t in s) + "\n")
        path = f.name
    try:
        f32 = run(a.cpp, model, path, "f32", a.modes, a.threads)
        per_w = {w: run(a.cpp, model, path, w, a.modes, a.threads) for w in a.weights.split(",") if w}
    finally:
        os.unlink(path)
    modes = ["full"] + [m for m in a.modes.split(",") if m]
    out = []
    # What each mode costs at F32 (vs full on the same rows): the yardstick for the precisions.
    for m in modes[1:]:
        p = pool(f32, m, ["nll", "nll_full", "kl"])
        d = p["nll"] - p["nll_full"]
        out.append({"weights": "f32", "mode": m, "vs": "full (f32)", "rows": int(len(d)), "bpb": float(p["nll"].mean() / LN2),
                    "delta_bpb": float(d.mean() / LN2), "se_delta_bpb": float(d.std() / math.sqrt(len(d)) / LN2),
                    "kl_nats": float(p["kl"].mean())})
    for w, recs in per_w.items():
        for m in modes:
            p = pool(recs, m, ["nll", "nll_ref", "kl_ref"])
            d = p["nll"] - p["nll_ref"]
            out.append({"weights": w, "mode": m, "vs": f"{m} (f32)", "rows": int(len(d)), "bpb": float(p["nll"].mean() / LN2),
                        "delta_bpb": float(d.mean() / LN2), "se_delta_bpb": float(d.std() / math.sqrt(len(d)) / LN2),
                        "kl_nats": float(p["kl_ref"].mean())})
    print(f"{os.path.basename(os.path.normpath(a.model))}: held-out windows {idx}, T = {quality.T}; "
          f"modes at cuts {quality.CUTS} + {quality.DECODE} decode rows")
    print("| --weights | mode | compared with | rows | bits per byte | Δ bpb ± s.e. | KL nats/row |")
    print("|---|---|---|---|---|---|---|")
    for r in out:
        print(f"| {r['weights']} | {r['mode']} | {r['vs']} | {r['rows']} | {r['bpb']:.5f} | {r['delta_bpb']:+.5f} ± {r['se_delta_bpb']:.5f} | "
              f"{r['kl_nats']:.2e} |")
    if a.jsonl:
        with open(a.jsonl, "w") as f:
            for r in out:
                f.write(json.dumps(r) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
