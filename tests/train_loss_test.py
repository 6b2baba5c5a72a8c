"""The trainer (tools/train/train.py) on a tiny config, a few seconds on one core:

  * the loss goes down over 40 steps;
  * a run stopped and resumed (--stop-at, --resume) ends with the same weights, bit for bit,
    as an uninterrupted run, including a replay-aware final phase (--replay-from);
  * the written model loads in the reference (spec §4 names and shapes) and in the batched
    forward, and result.json's slice bits per byte is what the weights give.

    /usr/bin/python3 tests/train_loss_test.py      (exit 77 when torch is missing)
"""
import json
import math
import os
import re
import shutil
import sys
import tempfile
import time

try:
    import torch
    import numpy  # noqa: F401
except ImportError:
    print("skipped: python3-torch or numpy is not installed")
    sys.exit(77)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools", "train"))
sys.path.insert(0, os.path.join(ROOT, "tools", "reference"))

import corpus  # noqa: E402
if not os.path.isdir(corpus.CORPUS_DIR) or not all(
        os.path.exists(os.path.join(corpus.CORPUS_DIR, f)) for f in corpus.HELDOUT):
    print(f"skipped: the corpus {corpus.CORPUS_DIR} (Debian python3.11) is not on this machine")
    sys.exit(77)

import ced_batched as cb  # noqa: E402
import safetensors_io  # noqa: E402
import train  # noqa: E402
from model import load_model  # noqa: E402

COMMON = ["--preset", "test", "--seq", "128", "--batch", "4", "--warmup", "5", "--lr", "1e-2", "--log-every", "1",
          "--eval-every", "1000", "--final-eval-windows", "2", "--slice-windows", "1", "--save-every", "1000"]


def losses(out):
    with open(os.path.join(out, "train.log")) as f:
        return [float(m.group(1)) for m in re.finditer(r"^step \d+/\d+ loss ([0-9.]+)", f.read(), re.M)]


def main():
    torch.set_num_threads(1)
    t0 = time.time()
    tmp = tempfile.mkdtemp(prefix="cedar-train-test-")
    ok = True
    try:
        # 1. the loss goes down
        a = os.path.join(tmp, "a")
        train.main(COMMON + ["--steps", "40", "--out", a])
        ls = losses(a)
        first, last = sum(ls[:5]) / 5, sum(ls[-5:]) / 5
        good = len(ls) == 40 and all(math.isfinite(x) for x in ls) and last < first - 1.0
        print(f"{'ok' if good else 'FAIL'}  loss over 40 steps: first 5 mean {first:.3f}, last 5 mean {last:.3f}")
        ok &= good

        # 2. stop + resume == uninterrupted (with a replay-aware phase from step 8)
        b, c = os.path.join(tmp, "b"), os.path.join(tmp, "c")
        extra = ["--steps", "12", "--replay-from", "8"]
        train.main(COMMON + extra + ["--out", b])
        train.main(COMMON + extra + ["--out", c, "--stop-at", "6"])
        train.main(COMMON + extra + ["--out", c, "--resume"])
        tb, _ = safetensors_io.load(os.path.join(b, "model.safetensors"))
        tc, _ = safetensors_io.load(os.path.join(c, "model.safetensors"))
        same = tb.keys() == tc.keys() and all(torch.equal(tb[k], tc[k]) for k in tb)
        print(f"{'ok' if same else 'FAIL'}  stopped at 6 and resumed == uninterrupted (12 steps, replay from 8)")
        ok &= same
        rl = losses(b)
        good = len(rl) == 12 and all(math.isfinite(x) for x in rl)
        print(f"{'ok' if good else 'FAIL'}  replay-aware steps have finite losses: {[round(x, 3) for x in rl[-4:]]}")
        ok &= good

        # 3. the written model: reference loader (names, shapes), batched forward, result.json
        ref = load_model(a)
        m = cb.CED.load(a, dtype=torch.float64)
        with open(os.path.join(a, "result.json")) as f:
            res = json.load(f)
        w = corpus.heldout_windows(128, res["slice_windows"])
        bpb = train.eval_bpb(m, w)
        good = abs(bpb - res["slice_bpb_f64"]) < 1e-9 and res["slice_sha256"] == corpus.windows_sha256(w)
        print(f"{'ok' if good else 'FAIL'}  written model loads (reference: {len(ref.w)} tensors); "
              f"slice bpb {bpb:.6f} == result.json {res['slice_bpb_f64']:.6f}")
        ok &= good
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{'all ok' if ok else 'FAILED'} in {time.time() - t0:.1f}s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
