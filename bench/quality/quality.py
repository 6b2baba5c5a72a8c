"""What the CED approximations cost a trained model, on held-out text.

    /usr/bin/python3 bench/quality/quality.py                       # committed models + a random one
    /usr/bin/python3 bench/quality/quality.py --seqs 4 --md /tmp/q.md --jsonl /tmp/q.jsonl

Held-out text: the held-out files of tools/train/corpus.py (never trained on), windows of
T+1 = 1025 tokens (a fresh sequence each), `--seqs` windows spread evenly over them.

Scenarios, each compared row by row with `full` (the ground truth) on the same rows:
  exact          : the staircase prefill (C++ engine only; the Python side is `full` itself).
  bounded        : Decoder SWA Bounded Replay prefill of n tokens (n = 128, 320, 512, 704, 896),
                   then 128 teacher-forced decode rows: rows n-1 .. n+127.
  bounded-paper  : the same with layer E's window truncated too (the paper's variant).
  encoder-replay : prefix P cached (P = 128, 384, 640, 896) with its windows and H_E evicted,
                   Encoder SWA Bounded Replay, a 16-token suffix prefilled with `bounded`
                   (n = P + 16), then decode: rows n-1 .. n+111. Compared with full, and with
                   `bounded` at the same n without the eviction (bounded@P+16), so the
                   encoder replay's own cost is the difference of the two.
Per scenario: bits per byte of the next token under full and under the mode (same rows), the
difference, KL(full || mode) in nats per row, top-1 agreement, max |logit difference|; per row
group: the prefill's row (d = 0), decode rows d = 1..64 and d = 65..128.

Implementations: `py-f64` = tools/train/ced_batched.py in float64 (held to the reference at
1e-9 by tests/train_forward_test.py); `cedar-cpp` = the C++ engine (F32) through
build/bench/bench_quality, which runs the real modes (Prefill in each mode, DecodeStep,
DropWindowsAndResidual + EncoderReplay). Where both ran, a cross-check line gives the largest
difference of the per-row next-token NLL between them.
Prints JSON lines (one per model x scenario x implementation x row group) and a markdown table.
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools", "train"))
sys.path.insert(0, os.path.join(ROOT, "tools", "reference"))

import ced_batched as cb  # noqa: E402
import corpus  # noqa: E402
from config import Config  # noqa: E402
from init import write_model  # noqa: E402

T = 1024
CUTS = [128, 320, 512, 704, 896]
DECODE = 128
REPLAY_P = [128, 384, 640, 896]
SUFFIX = 16
REPLAY_DECODE = 112
GROUPS = [("all", 0, 10 ** 9), ("d=0", 0, 0), ("d=1-64", 1, 64), ("d=65-128", 65, 128)]


def row_metrics(lp_mode, lp_full, logits_mode, logits_full, targets):
    """Per-row arrays: nll (nats), nll_full, KL(full||mode), top1 agreement, max |Δlogit|."""
    nll = -lp_mode.gather(-1, targets[:, None])[:, 0]
    nll_f = -lp_full.gather(-1, targets[:, None])[:, 0]
    kl = (lp_full.exp() * (lp_full - lp_mode)).sum(-1)
    top1 = (logits_mode.argmax(-1) == logits_full.argmax(-1)).double()
    mx = (logits_mode - logits_full).abs().max(-1).values
    return {"nll": nll.tolist(), "nll_full": nll_f.tolist(), "kl": kl.tolist(), "top1": top1.tolist(), "max_abs": mx.tolist()}


def python_scenarios(model, seq):
    """seq: int64 [T+1]. Returns (full nll list, {scenario key: per-row dict with 'row'})."""
    cfg = model.cfg
    x = torch.from_numpy(seq[:-1])[None]
    y = torch.from_numpy(seq[1:])
    stats = cb.Stats()
    with torch.no_grad():
        full = model(x, stats=stats)[0]
    lpf = torch.log_softmax(full, -1)
    out = {}
    # batch of scenarios over the same tokens: per-sequence floors and pool overrides
    L = cfg.n_layers
    specs = [("bounded", cb.bounded_floors(cfg, T, CUTS), None),
             ("bounded-paper", cb.bounded_floors(cfg, T, CUTS, paper=True), None),
             ("bounded@P+16", cb.bounded_floors(cfg, T, [p + SUFFIX for p in REPLAY_P]), None)]
    for P in REPLAY_P:
        specs.append((f"encoder-replay@{P}", cb.encoder_replay_floors(cfg, T, P, P + SUFFIX), P))
    B = len(specs)
    floors = torch.stack([s[1] for s in specs], dim=1)                      # [L, B, T]
    rows_mask = torch.zeros(B, T, dtype=torch.bool)
    for b, s in enumerate(specs):
        if s[2] is not None:
            rows_mask[b, :s[2]] = True
    override = (rows_mask, {l: u.expand(B, -1, -1) for l, u in stats.pool_inputs.items()})
    with torch.no_grad():
        lg = model(x.expand(B, -1), floors=floors, pool_override=override)
    for b, (name, _, P) in enumerate(specs):
        lpm = torch.log_softmax(lg[b], -1)
        if name in ("bounded", "bounded-paper"):
            for n in CUTS:
                r = list(range(n - 1, min(n + DECODE, T)))
                out[(name, n, None)] = dict(row=r, **row_metrics(lpm[r], lpf[r], lg[b][r], full[r], y[r]))
        elif name == "bounded@P+16":
            for P2 in REPLAY_P:
                n = P2 + SUFFIX
                r = list(range(n - 1, min(n + REPLAY_DECODE, T)))
                out[(name, n, P2)] = dict(row=r, **row_metrics(lpm[r], lpf[r], lg[b][r], full[r], y[r]))
        else:
            n = P + SUFFIX
            r = list(range(n - 1, min(n + REPLAY_DECODE, T)))
            out[("encoder-replay", n, P)] = dict(row=r, **row_metrics(lpm[r], lpf[r], lg[b][r], full[r], y[r]))
    nll_full = (-lpf.gather(-1, y[:, None])[:, 0]).tolist()
    return nll_full, out


def cpp_scenarios(binary, model_dir, seqs, threads=1, weights="f32"):
    """Runs bench_quality on the sequences; same keys as python_scenarios."""
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        for s in seqs:
            f.write(",".join(str(int(t)) for t in s) + "\n")
        path = f.name
    try:
        cmd = [binary, "--model", model_dir, "--tokens", path, "--cuts", ",".join(map(str, CUTS)),
               "--decode", str(DECODE), "--modes", "exact,bounded,bounded-paper", "--threads", str(threads),
               "--weights", weights]
        res = subprocess.run(cmd, check=True, capture_output=True, text=True)
        cmd_r = [binary, "--model", model_dir, "--tokens", path, "--modes", "bounded", "--decode", str(REPLAY_DECODE),
                 "--cuts", ",".join(str(p + SUFFIX) for p in REPLAY_P),
                 "--replay", ",".join(f"{p}:{p + SUFFIX}" for p in REPLAY_P), "--threads", str(threads),
                 "--weights", weights]
        res_r = subprocess.run(cmd_r, check=True, capture_output=True, text=True)
    finally:
        os.unlink(path)
    full = {}
    per = {}
    for line in res.stdout.splitlines() + res_r.stdout.splitlines():
        j = json.loads(line)
        s = j["seq"]
        if j["scenario"] == "full":
            full[s] = j["nll"]
            continue
        if j["scenario"] == "encoder-replay":
            key = ("encoder-replay", j["n"], j["P"])
        elif j["n"] in [p + SUFFIX for p in REPLAY_P] and j["scenario"] == "bounded" and j["n"] not in CUTS:
            key = ("bounded@P+16", j["n"], j["n"] - SUFFIX)
        else:
            key = (j["scenario"], j["n"], None)
        per.setdefault(s, {})[key] = {k: j[k] for k in ("row", "nll", "nll_full", "kl", "top1", "max_abs")}
    return [full[i] for i in range(len(seqs))], [per.get(i, {}) for i in range(len(seqs))]


def aggregate(per_seq, scenario, P=None, groups=GROUPS):
    """Pools the rows of one scenario over sequences, by row group (distance d from the prefill
    row); P: only the cache hit at P (encoder-replay, bounded@P+16)."""
    res = {}
    for gname, lo, hi in groups:
        acc = {"nll": [], "nll_full": [], "kl": [], "top1": [], "max_abs": []}
        for d in per_seq:
            for key, v in d.items():
                if key[0] != scenario or (P is not None and key[2] != P):
                    continue
                n = key[1]
                for i, r in enumerate(v["row"]):
                    dist = r - (n - 1)
                    if lo <= dist <= hi:
                        for k in acc:
                            acc[k].append(v[k][i])
        if not acc["nll"]:
            continue
        ln2 = math.log(2)
        res[gname] = {"rows": len(acc["nll"]), "bpb_full": float(np.mean(acc["nll_full"])) / ln2,
                      "bpb_mode": float(np.mean(acc["nll"])) / ln2,
                      "delta_bpb": (float(np.mean(acc["nll"])) - float(np.mean(acc["nll_full"]))) / ln2,
                      "se_delta_bpb": float(np.std(np.subtract(acc["nll"], acc["nll_full"])) / math.sqrt(len(acc["nll"]))) / ln2,
                      "kl_nats": float(np.mean(acc["kl"])), "top1_agree": float(np.mean(acc["top1"])),
                      "max_abs_logit": float(np.max(acc["max_abs"]))}
    return res


def crosscheck(py_seq, cpp_seq, thr=1e-4):
    """Largest per-row NLL difference, rows compared, rows differing by more than thr."""
    worst, n, big = 0.0, 0, 0
    for a, b in zip(py_seq, cpp_seq):
        for key, v in a.items():
            if key in b:
                d = [abs(x - y) for x, y in zip(v["nll"], b[key]["nll"])]
                worst = max(worst, max(d))
                n += len(d)
                big += sum(x > thr for x in d)
    return worst, n, big


def summary(lines):
    """The condensed table of docs/QUALITY.md from the JSON records: per model and scenario, all
    rows and the prefill's row (d = 0); py-f64 numbers (cedar-cpp for exact, which only it runs)."""
    out = ["| model | scenario | impl | rows | bpb full | Δ bpb (mode − full) ± s.e. | KL nats/row | KL at d = 0 | top-1 agree | top-1 at d = 0 |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    models = []
    for r in lines:
        if "model" in r and r["model"] not in models:
            models.append(r["model"])
    get = {(r["model"], r.get("impl"), r.get("scenario"), r.get("group")): r for r in lines if "scenario" in r}
    for m in models:
        for scen in ["full", "exact", "bounded", "bounded-paper", "bounded@P+16", "encoder-replay"]:
            impl = "cedar-cpp" if scen == "exact" else ("py-f64" if (m, "py-f64", scen, "all") in get or scen == "full" else "cedar-cpp")
            if scen == "full":
                rs = [get.get((m, i, "full", "all rows")) for i in ("cedar-cpp", "py-f64")]
                rs = [x for x in rs if x]
                if rs:
                    impls = " = ".join(i for i in ("cedar-cpp", "py-f64") if get.get((m, i, "full", "all rows")))
                    out.append(f"| {m} | full | {impls} | {rs[0]['rows']} | {rs[0]['bpb']:.4f} | 0 | 0 | 0 | 100% | 100% |")
                continue
            a, d0 = get.get((m, impl, scen, "all")), get.get((m, impl, scen, "d=0"))
            if not a:
                continue
            out.append(f"| {m} | {scen} | {impl} | {a['rows']} | {a['bpb_full']:.4f} | {a['delta_bpb']:+.4f} ± {a.get('se_delta_bpb', 0):.4f} | "
                       f"{a['kl_nats']:.1e} | {d0['kl_nats']:.1e} | {100 * a['top1_agree']:.2f}% | {100 * d0['top1_agree']:.1f}% |")
    return "\n".join(out) + "\n"


def pick_windows(n):
    w = corpus.heldout_windows(T)
    idx = sorted(set(int(round(i * (len(w) - 1) / max(1, n - 1))) for i in range(n)))
    return w[idx], idx


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="models/cedar-mini,models/cedar-mini-replay")
    ap.add_argument("--random", default="1", help="also a random-weight model of the first model's config, this seed ('' = none)")
    ap.add_argument("--seqs", type=int, default=12)
    ap.add_argument("--cpp", default=os.path.join(ROOT, "build", "bench", "bench_quality"), help="'' = Python only")
    ap.add_argument("--no-python", action="store_true")
    ap.add_argument("--jsonl", help="also write the JSON lines here")
    ap.add_argument("--md", help="also write the markdown tables here")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--weights", default="f32", help="the C++ engine's matmul weights: f32 | bf16 | int8 (docs/WEIGHTS.md)")
    ap.add_argument("--summarize", help="only print the condensed table of an earlier --jsonl file")
    a = ap.parse_args()
    if a.summarize:
        with open(a.summarize) as f:
            print(summary([json.loads(x) for x in f if x.strip()]))
        return 0
    torch.set_num_threads(a.threads)
    seqs, idx = pick_windows(a.seqs)
    models = [(os.path.basename(os.path.normpath(m)), os.path.join(ROOT, m) if not os.path.isabs(m) else m)
              for m in a.models.split(",") if m]
    tmp = None
    if a.random != "":
        tmp = tempfile.mkdtemp(prefix="cedar-random-")
        cfg = Config.load(os.path.join(models[0][1], "config.json"))
        write_model(cfg, int(a.random), tmp)
        models.append((f"random (seed {a.random})", tmp))
    lines, md = [], []
    md.append(f"Held-out windows {idx} of {len(corpus.heldout_windows(T))} (T = {T}, files {', '.join(corpus.HELDOUT)}).\n")
    for name, path in models:
        t0 = time.time()
        impls = {}
        if not a.no_python:
            m = cb.CED.load(path, dtype=torch.float64)
            full_nll, per = [], []
            for s in seqs:
                fn, d = python_scenarios(m, s)
                full_nll.append(fn)
                per.append(d)
            impls["py-f64"] = (full_nll, per)
        if a.cpp and os.path.exists(a.cpp):
            impls["cedar-cpp"] = cpp_scenarios(a.cpp, path, seqs, a.threads, a.weights)
        elif a.cpp:
            print(f"# {a.cpp} not built: C++ numbers skipped", file=sys.stderr)
        md.append(f"\n### {name}\n")
        md.append("| scenario | rows (d = distance from the prefill row) | impl | rows | bpb full | bpb mode | Δ bpb ± s.e. | KL nats/row | top-1 agree | max abs Δlogit |")
        md.append("|---|---|---|---|---|---|---|---|---|---|")
        for impl, (full_nll, per) in impls.items():
            allrows = [v for fn in full_nll for v in fn]
            bpb = float(np.mean(allrows)) / math.log(2)
            rec = {"model": name, "impl": impl, "scenario": "full", "group": "all rows", "rows": len(allrows), "bpb": bpb}
            lines.append(rec)
            md.append(f"| full | all rows of the windows | {impl} | {len(allrows)} | {bpb:.4f} | {bpb:.4f} | 0 | 0 | 100% | 0 |")
        for scen in ["exact", "bounded", "bounded-paper", "bounded@P+16", "encoder-replay"]:
            for impl, (full_nll, per) in impls.items():
                agg = aggregate(per, scen)
                if scen in ("bounded@P+16", "encoder-replay"):
                    for P in REPLAY_P:
                        agg.update({f"P={P}, all": v for v in aggregate(per, scen, P, GROUPS[:1]).values()})
                for g, v in agg.items():
                    rec = {"model": name, "impl": impl, "scenario": scen, "group": g, **v}
                    lines.append(rec)
                    md.append(f"| {scen} | {g} | {impl} | {v['rows']} | {v['bpb_full']:.4f} | {v['bpb_mode']:.4f} | "
                              f"{v['delta_bpb']:+.4f} ± {v['se_delta_bpb']:.4f} | {v['kl_nats']:.2e} | {100 * v['top1_agree']:.2f}% | {v['max_abs_logit']:.2e} |")
        if len(impls) == 2:
            w, n, big = crosscheck(impls["py-f64"][1], impls["cedar-cpp"][1])
            df = [abs(x - y) for a1, b1 in zip(impls["py-f64"][0], impls["cedar-cpp"][0]) for x, y in zip(a1, b1)]
            wf, bigf = max(df), sum(x > 1e-4 for x in df)
            rec = {"model": name, "crosscheck": "py-f64 vs cedar-cpp", "max_abs_nll_diff_full": wf, "rows_full": len(df),
                   "rows_full_over_1e-4": bigf, "max_abs_nll_diff_scenarios": w, "rows_scenarios": n,
                   "rows_scenarios_over_1e-4": big}
            lines.append(rec)
            md.append(f"\nCross-check py-f64 vs cedar-cpp (per-row next-token NLL): full: largest difference {wf:.1e} nats, "
                      f"{bigf} of {len(df)} rows differ by more than 1e-4; scenarios: largest {w:.1e}, {big} of {n} rows.\n")
        print(f"# {name}: {time.time() - t0:.0f}s", file=sys.stderr)
    for rec in lines:
        print(json.dumps(rec))
    text = "## Summary\n\n" + summary(lines) + "\n## All rows\n\n" + "\n".join(md) + "\n"
    print(text)
    if a.jsonl:
        with open(a.jsonl, "w") as f:
            for rec in lines:
                f.write(json.dumps(rec) + "\n")
    if a.md:
        with open(a.md, "w") as f:
            f.write(text)
    if tmp:
        import shutil
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
