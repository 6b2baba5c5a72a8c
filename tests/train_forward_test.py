"""The trainer's batched forward (tools/train/ced_batched.py) equals the row-by-row reference
(tools/reference/model.py) in float64 to 1e-9, on two tiny random configs:

  * full mode: the logits of every row (the reference decoding one token at a time);
  * Decoder SWA Bounded Replay (and the paper's variant): the prefill's last-row logits and the
    teacher-forced decode logits after it, several prefills packed as segments of one sequence;
  * Encoder SWA Bounded Replay of a cached prefix P followed by a bounded prefill and decode;
  * batching: two different sequences in one batch, per-sequence floors.

    /usr/bin/python3 tests/train_forward_test.py      (exit 77 when torch is missing)
"""
import os
import sys
import time

try:
    import torch
except ImportError:
    print("skipped: python3-torch is not installed")
    sys.exit(77)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools", "train"))
sys.path.insert(0, os.path.join(ROOT, "tools", "reference"))

import ced_batched as cb  # noqa: E402
from config import Config  # noqa: E402
from golden import TINY, POOL  # noqa: E402
from init import random_weights  # noqa: E402
from model import Model, SeqState  # noqa: E402

TOL = 1e-9
torch.set_num_threads(1)


def setup(cfgd, seed, n, data_seed):
    cfg = Config.from_dict(cfgd)
    w = random_weights(cfg, seed)
    ref = Model(cfg, w, torch.float64)
    bat = cb.CED(cfg).to(torch.float64)
    bat.load_tensors(w)
    g = torch.Generator().manual_seed(data_seed)
    toks = torch.randint(0, cfg.vocab_size, (n,), generator=g).tolist()
    return cfg, ref, bat, toks


def rel(a, b):
    return float((a - b).abs().max() / max(1.0, float(b.abs().max())))


def ref_rows(ref, cfg, toks, first, scenario):
    """Reference logits of rows first..len(toks)-1 for a scenario, as a [n, V] tensor."""
    st = SeqState(cfg)
    out = []
    kind = scenario[0]
    if kind == "full":
        for t in toks:
            out.append(ref.decode(st, t))
        return torch.stack(out[first:])
    if kind in ("bounded", "paper"):
        n = scenario[1]
        out.append(ref.prefill_bounded(st, toks[:n], paper=(kind == "paper")))
    elif kind == "replay":
        P, n = scenario[1], scenario[2]
        ref.prefill_full(st, toks[:P])
        st.drop_windows_and_HE()
        ref.encoder_replay(st)
        out.append(ref.prefill_bounded(st, toks[P:n]))
    for t in toks[n:]:
        out.append(ref.decode(st, t))
    return torch.stack(out)


def check(name, got, want):
    e = rel(got, want)
    ok = e <= TOL
    print(f"{'ok' if ok else 'FAIL'}  {name}: max rel diff {e:.3e}")
    return ok


def run_case(label, cfgd, seed, n, data_seed):
    cfg, ref, bat, toks = setup(cfgd, seed, n, data_seed)
    W = cfg.window
    T = len(toks)
    x = torch.tensor([toks])
    ok = True
    with torch.no_grad():
        full = bat(x)[0]
    ok &= check(f"{label} full, all {T} rows", full, ref_rows(ref, cfg, toks, 0, ("full",)))

    # bounded: two prefills packed as segments (cuts n1, n2; segment 2 starts at n2 - W >= n1)
    n1, n2 = W + 5, T - 9
    assert n2 - W >= n1
    for kind, paper in (("bounded", False), ("paper", True)):
        fl = cb.bounded_floors(cfg, T, [n1, n2], paper=paper)
        with torch.no_grad():
            got = bat(x, floors=fl[:, None, :])[0]
        r1 = ref_rows(ref, cfg, toks[:n2 - W], 0, (kind, n1))   # decode up to segment 2's start
        r2 = ref_rows(ref, cfg, toks, 0, (kind, n2))
        ok &= check(f"{label} {kind} prefill {n1} + {n2 - W - n1} decode", got[n1 - 1:n2 - W], r1)
        ok &= check(f"{label} {kind} prefill {n2} + {T - n2} decode", got[n2 - 1:], r2)
        # a bounded prefill does move the logits (a check that cannot tell modes apart is useless)
        assert rel(got[n2 - 1], full[n2 - 1]) > 1e-6, "bounded equals full: the test would be blind"

    # Encoder SWA Bounded Replay of prefix P (odd: a pending half group), bounded prefill to n
    for P, nn in ((T // 2 + 1, T // 2 + 4), (W + 3, T - 12)):
        stats = cb.Stats()
        with torch.no_grad():
            bat(x, stats=stats)
            rows = torch.arange(T)[None, :] < P
            got = bat(x, floors=cb.encoder_replay_floors(cfg, T, P, nn)[:, None, :],
                      pool_override=(rows, stats.pool_inputs))[0]
        ok &= check(f"{label} encoder replay P={P}, bounded to {nn}, {T - nn} decode", got[nn - 1:],
                    ref_rows(ref, cfg, toks, 0, ("replay", P, nn)))

    # batching with per-sequence floors: sequence 0 bounded at n1, sequence 1 full
    g = torch.Generator().manual_seed(data_seed + 100)
    toks2 = torch.randint(0, cfg.vocab_size, (T,), generator=g).tolist()
    xb = torch.tensor([toks, toks2])
    fl = torch.stack([cb.bounded_floors(cfg, T, [n1]), torch.zeros(cfg.n_layers, T, dtype=torch.long)], dim=1)
    with torch.no_grad():
        got = bat(xb, floors=fl)
    ok &= check(f"{label} batch[0] bounded {n1}", got[0, n1 - 1:], ref_rows(ref, cfg, toks, 0, ("bounded", n1)))
    ok &= check(f"{label} batch[1] full", got[1], ref_rows(ref, cfg, toks2, 0, ("full",)))
    return ok


def main():
    t0 = time.time()
    ok = True
    # tiny preset: W = 8, top-k 8, m = 2 pools at 1 and 3, decoder pool at 4, candidates 12 x 8
    ok &= run_case("tiny", TINY, 1000, 53, 1)
    # pool case: candidate pool active (4 blocks of 4), sparse top-k everywhere, W = 7 (odd,
    # not dividing T), ratio-0 layer after a kv source, clamp active, 1 expert per token
    ok &= run_case("pool", POOL, 2000, 67, 2)
    print(f"{'all ok' if ok else 'FAILED'} in {time.time() - t0:.1f}s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
