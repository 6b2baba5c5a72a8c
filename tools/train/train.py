"""Train a small CED model on the Python standard library (tools/train/corpus.py).

    /usr/bin/python3 tools/train/train.py --preset mini --steps 1500 --out runs/mini
    /usr/bin/python3 tools/train/train.py ... --resume              # continue from runs/mini/checkpoint.pt
    /usr/bin/python3 tools/train/train.py ... --replay-from 1200    # replay-aware final phase

Fixed budget of steps; AdamW with linear warm-up then cosine decay; batches drawn at random
offsets of the training stream from a generator seeded by (seed, step), so a resumed run is
the same as an uninterrupted one. Every --log-every steps a progress line with the loss,
the indexer's auxiliary loss, the learning rate and tokens/s goes to stdout and OUT/train.log.

--replay-from S simulates Decoder SWA Bounded Replay from step S on (the paper does this in
post-training): each training sequence is cut into segments; a segment is a bounded prefill of
length n (decoder layers after E see only the last R = min(W, n) rows: window floor n-R) followed
by teacher-forced decode rows. The loss skips the replayed rows before the prefill's last row
(their logits are never used at inference). Everything else (data, schedule, steps) is the same
as without it, so a plain and a replay-aware model differ only in that phase; the replay-aware
run may therefore start from the plain run's checkpoint at step S (--init-from).

Runs on CPU (Debian python3-torch 1.13, one thread by default) and unchanged on a CUDA
machine with a newer PyTorch (--device cuda, or auto).
At the end: OUT/config.json + OUT/model.safetensors (F32, spec §4 names), OUT/result.json with
the held-out bits per byte (all held-out windows, float32) and the bits per byte of the short
held-out slice the tests recompute (first --slice-windows windows, float64).
"""
import argparse
import json
import math
import os
import shutil
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)

import ced_batched as cb  # noqa: E402
import corpus  # noqa: E402
from config import Config  # noqa: E402

PRESETS = {
    # The committed model: the `small` preset's structure scaled down (L = 8, E = 4; two encoder
    # pools with m = 2 at layers 1 and 3, the decoder pool at E = 4, re-index at layer 6 with the
    # candidate pool active past 128 decoder-pool entries), W = 64, top-k 32, MoE 4 routed
    # experts (2 per token) + 1 shared.
    "mini": {"vocab_size": 512, "dim": 128, "n_layers": 8, "n_encoder_layers": 4, "n_heads": 4,
             "head_dim": 32, "rope_dim": 16, "q_lora_rank": 64, "o_groups": 2, "o_group_rank": 64,
             "window": 64, "compress_ratios": [0, 2, 2, 2, 1, 1, 1, 1], "kv_source_layers": [1, 3, 4],
             "index_source_layers": [1, 3, 4, 6], "index_heads": 2, "index_head_dim": 32, "index_topk": 32,
             "candidate_source_layer": 4, "candidate_blocks": 16, "candidate_block_size": 8,
             "n_routed_experts": 4, "n_shared_experts": 1, "experts_per_token": 2, "moe_inter_dim": 128,
             "route_scale": 1.5, "swiglu_limit": 10.0, "rope_theta": 10000.0, "compress_rope_theta": 160000.0,
             "norm_eps": 1e-6, "max_seq_len": 8192},
    # For tests: seconds per step on one core.
    "test": {"vocab_size": 512, "dim": 32, "n_layers": 4, "n_encoder_layers": 2, "n_heads": 2,
             "head_dim": 16, "rope_dim": 8, "q_lora_rank": 16, "o_groups": 1, "o_group_rank": 16,
             "window": 8, "compress_ratios": [0, 2, 1, 1], "kv_source_layers": [1, 2],
             "index_source_layers": [1, 2, 3], "index_heads": 2, "index_head_dim": 8, "index_topk": 8,
             "candidate_source_layer": 2, "candidate_blocks": 3, "candidate_block_size": 4,
             "n_routed_experts": 2, "n_shared_experts": 1, "experts_per_token": 1, "moe_inter_dim": 32,
             "route_scale": 1.5, "swiglu_limit": 10.0, "rope_theta": 10000.0, "compress_rope_theta": 160000.0,
             "norm_eps": 1e-6, "max_seq_len": 4096},
}


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="mini", choices=sorted(PRESETS))
    ap.add_argument("--config", help="config.json to train instead of a preset")
    ap.add_argument("--out", required=True, help="run folder (checkpoint, log, final model)")
    ap.add_argument("--steps", type=int, default=1500, help="total optimizer steps (the budget)")
    ap.add_argument("--stop-at", type=int, default=0, help="stop this invocation at this step (0 = --steps)")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=1024, help="tokens per training sequence")
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--min-lr-frac", type=float, default=0.1)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--aux-weight", type=float, default=1.0, help="indexer KL loss weight (0 = off)")
    ap.add_argument("--aux-rows", type=int, default=64, help="rows per sequence for the indexer loss")
    ap.add_argument("--balance-rate", type=float, default=1e-3, help="expert bias update per step")
    ap.add_argument("--replay-from", type=int, default=-1, help="simulate bounded replay from this step (-1 = never)")
    ap.add_argument("--replay-gap", default="1,5", help="segment length range, in units of W (min,max)")
    ap.add_argument("--resume", action="store_true", help="continue from OUT/checkpoint.pt if present")
    ap.add_argument("--init-from", help="start from another run's checkpoint (e.g. the plain run's at --replay-from)")
    ap.add_argument("--save-every", type=int, default=100)
    ap.add_argument("--keep-at", type=int, default=-1, help="also keep checkpoint-STEP.pt at this step")
    ap.add_argument("--log-every", type=int, default=10)
    ap.add_argument("--eval-every", type=int, default=250)
    ap.add_argument("--eval-windows", type=int, default=8, help="held-out windows for periodic evaluation")
    ap.add_argument("--final-eval-windows", type=int, default=0, help="held-out windows at the end (0 = all)")
    ap.add_argument("--slice-windows", type=int, default=2, help="the short held-out slice (float64) the tests recompute")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="auto", help="cpu | cuda | auto")
    ap.add_argument("--corpus-dir", default=corpus.CORPUS_DIR)
    ap.add_argument("--name", default="", help="model name written in the metadata")
    return ap.parse_args(argv)


def lr_at(a, step):
    if step < a.warmup:
        return a.lr * (step + 1) / a.warmup
    t = (step - a.warmup) / max(1, a.steps - a.warmup)
    return a.lr * (a.min_lr_frac + (1 - a.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * min(1.0, t))))


def replay_floors_and_mask(cfg, T, rng, gap):
    """One sequence's bounded-replay segments: floors [L, T] and loss mask [T] (False on the
    replayed rows before each prefill's last row)."""
    W = cfg.window
    lo, hi = gap
    cuts = []
    n = int(rng.integers(W + 1, W + 1 + hi * W))
    while n <= T:
        cuts.append(n)
        n += int(rng.integers(max(W, int(lo * W)), hi * W + 1))
    mask = np.ones(T, dtype=bool)
    for n in cuts:
        R = min(W, n)
        mask[n - R:n - 1] = False
    return cb.bounded_floors(cfg, T, cuts), torch.from_numpy(mask)


def batch_at(a, cfg, stream, step, replay):
    rng = np.random.default_rng([a.seed, step])
    T, B = a.seq, a.batch
    offs = rng.integers(0, len(stream) - T - 1, size=B)
    xy = np.stack([stream[o:o + T + 1] for o in offs]).astype(np.int64)
    x, y = torch.from_numpy(xy[:, :-1]), torch.from_numpy(xy[:, 1:])
    aux_rows = torch.from_numpy(np.sort(rng.integers(0, T, size=(B, a.aux_rows)), axis=1))
    floors, mask = None, None
    if replay:
        gap = [float(v) for v in a.replay_gap.split(",")]
        fm = [replay_floors_and_mask(cfg, T, rng, gap) for _ in range(B)]
        floors = torch.stack([f for f, _ in fm], dim=1)   # [L, B, T]
        mask = torch.stack([m for _, m in fm])             # [B, T]
    return x, y, aux_rows, floors, mask


@torch.no_grad()
def eval_bpb(model, windows, batch=4, device="cpu"):
    """Bits per token (= per byte but for the few specials) over held-out windows [n, T+1]."""
    model.eval()
    tot, cnt = 0.0, 0
    for i in range(0, len(windows), batch):
        w = torch.from_numpy(windows[i:i + batch]).to(device)
        logits = model(w[:, :-1])
        nll = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).double(), w[:, 1:].reshape(-1), reduction="sum")
        tot += float(nll)
        cnt += w[:, 1:].numel()
    model.train()
    return tot / cnt / math.log(2)


def torch_load(path, device):
    try:
        return torch.load(path, map_location=device, weights_only=False)
    except TypeError:  # torch < 1.13 has no weights_only
        return torch.load(path, map_location=device)


def main(argv=None):
    a = parse_args(argv)
    torch.set_num_threads(a.threads)
    dev = ("cuda" if torch.cuda.is_available() else "cpu") if a.device == "auto" else a.device
    os.makedirs(a.out, exist_ok=True)
    cfg = Config.load(a.config) if a.config else Config.from_dict(PRESETS[a.preset])
    logf = open(os.path.join(a.out, "train.log"), "a")

    def log(msg):
        print(msg, flush=True)
        logf.write(msg + "\n")
        logf.flush()

    stream, info = corpus.training_stream(a.corpus_dir)
    model = cb.CED(cfg).to(dev)
    cb.init_weights(model, a.seed)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=a.lr, betas=(0.9, 0.95), eps=1e-8)
    step, train_seconds = 0, 0.0
    ck_path = os.path.join(a.out, "checkpoint.pt")
    src = ck_path if (a.resume and os.path.exists(ck_path)) else a.init_from
    log(f"# {' '.join([os.path.basename(sys.executable)] + sys.argv)}")
    if src:
        ck = torch_load(src, dev)
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["opt"])
        step, train_seconds = ck["step"], ck.get("train_seconds", 0.0)
        log(f"# resumed from {src} at step {step} ({train_seconds:.0f}s of training so far)")
    else:
        log(f"# config {json.dumps(cfg.to_dict())}")
        log(f"# params {model.n_params()} ({model.n_params() * 4 / 1e6:.1f} MB F32); corpus {info}; "
            f"held-out {corpus.HELDOUT}; device {dev}; torch {torch.__version__}; threads {a.threads}")
    heldout = corpus.heldout_windows(a.seq, corpus_dir=a.corpus_dir)
    stop = a.stop_at or a.steps

    def save(path):
        tmp = path + ".tmp"
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step,
                    "train_seconds": train_seconds, "args": vars(a), "config": cfg.to_dict()}, tmp)
        os.replace(tmp, path)

    t_last, tok_last = time.time(), 0
    while step < min(stop, a.steps):
        t0 = time.time()
        replay = a.replay_from >= 0 and step >= a.replay_from
        x, y, aux_rows, floors, mask = batch_at(a, cfg, stream, step, replay)
        x, y, aux_rows = x.to(dev), y.to(dev), aux_rows.to(dev)
        lr = lr_at(a, step)
        for g in opt.param_groups:
            g["lr"] = lr
        stats = cb.Stats()
        logits = model(x, floors=floors, aux_rows=aux_rows if a.aux_weight > 0 else None, stats=stats)
        nll = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), y.reshape(-1), reduction="none")
        if mask is not None:
            m = mask.to(dev).reshape(-1).float()
            loss = (nll * m).sum() / m.sum()
        else:
            loss = nll.mean()
        aux = torch.stack(stats.aux).mean() if stats.aux else torch.zeros((), device=dev)
        opt.zero_grad(set_to_none=True)
        (loss + a.aux_weight * aux).backward()
        if a.clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), a.clip)
        opt.step()
        with torch.no_grad():  # auxiliary-loss-free balancing: move the choosing bias
            for l, load in stats.expert_load.items():
                bias = model.layers[l].ffn.gate.bias
                bias += a.balance_rate * torch.sign(load.mean() - load).to(bias.device, bias.dtype)
        step += 1
        train_seconds += time.time() - t0
        tok_last += x.numel()
        if step % a.log_every == 0 or step == a.steps:
            now = time.time()
            loads = [int(v.max().item()) for v in stats.expert_load.values()]
            log(f"step {step}/{a.steps} loss {loss.item():.4f} bpb {loss.item() / math.log(2):.3f} "
                f"aux {aux.item():.3f} lr {lr:.2e} tok/s {tok_last / (now - t_last):.0f} "
                f"max-expert-load {max(loads) if loads else 0}/{x.numel()} replay {int(replay)} "
                f"train {train_seconds:.0f}s")
            t_last, tok_last = now, 0
        if step % a.eval_every == 0 and step < a.steps:
            bpb = eval_bpb(model, heldout[:a.eval_windows], device=dev)
            log(f"eval step {step} heldout-bpb[{a.eval_windows} windows] {bpb:.4f}")
            t_last = time.time()
        if step % a.save_every == 0 or step == a.keep_at or step == a.steps:
            save(ck_path)
            if step == a.keep_at:
                shutil.copyfile(ck_path, os.path.join(a.out, f"checkpoint-{step}.pt"))
            t_last = time.time()
    if step < a.steps:
        save(ck_path)
        log(f"# stopped at step {step} (--stop-at); --resume continues")
        return 0

    # ---- final: weights, held-out bits per byte ----
    n_final = a.final_eval_windows or len(heldout)
    bpb = eval_bpb(model, heldout[:n_final], device=dev)
    m64 = cb.CED(cfg).to(torch.float64)
    m64.load_tensors({k: v.double() for k, v in model.tensors().items()})
    sl = heldout[:a.slice_windows]
    slice_bpb = eval_bpb(m64, sl)
    res = {"name": a.name or os.path.basename(os.path.normpath(a.out)), "steps": a.steps, "train_seconds": round(train_seconds, 1),
           "tokens_seen": a.steps * a.batch * a.seq, "params": model.n_params(),
           "replay_from": a.replay_from, "heldout_files": corpus.HELDOUT, "heldout_T": a.seq,
           "heldout_windows": int(n_final), "heldout_tokens": int(n_final * a.seq), "heldout_bpb": round(bpb, 6),
           "slice_windows": a.slice_windows, "slice_sha256": corpus.windows_sha256(sl), "slice_bpb_f64": slice_bpb,
           "corpus": info, "torch": torch.__version__, "device": dev, "threads": a.threads}
    log(f"final heldout-bpb[{n_final} windows x {a.seq}] {bpb:.4f} slice-bpb[{a.slice_windows} windows, f64] "
        f"{slice_bpb:.6f} train {train_seconds:.0f}s")
    model.save(a.out, {"format": "pt", "generator": "tools/train/train.py", "name": res["name"],
                       "heldout_bpb": f"{bpb:.6f}", "slice_bpb_f64": f"{slice_bpb:.9f}", "steps": str(a.steps),
                       "replay_from": str(a.replay_from)})
    with open(os.path.join(a.out, "result.json"), "w") as f:
        json.dump(res, f, indent=1)
        f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
