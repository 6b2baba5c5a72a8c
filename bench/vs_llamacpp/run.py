#!/usr/bin/env python3
"""Cedar's decode at batch 1 against llama.cpp's, on models that stream the same weights.

For each pair of precisions (Cedar `--weights` = llama.cpp tensor type) the run writes a
LLaMA-architecture GGUF whose matmuls hold as many parameters as one decode token of the Cedar
model reads (write_gguf.py; random weights, only the shapes matter for speed), then alternates
llama.cpp's own llama-bench and `cedar bench` in one process tree, same context, same number of
generated tokens and reps, 2 threads each. Prints one JSON line per pair and round, then one
summary line per pair (medians over the rounds):

  cedar_tokens_per_s / llamacpp_tokens_per_s   medians over each engine's reps
  ratio                                        Cedar over llama.cpp
  *_weight_bytes_per_token                     bytes each engine's decode step must stream
  read_bandwidth_gbs                           Cedar's read probe beside that pair (median)
  *_fraction_of_bound                          bytes x tokens/s / the probe, for both engines

The released precisions pair as `fp8-fp4+bf16a=q8_0-mxfp4`: Cedar's FP8 dense weights, FP4 routed
experts and BF16 head against a GGUF of Q8_0 attention, MXFP4 FFN matrices and a BF16 head, with
as many FFN matrices kept Q8_0 as brings its bytes a token closest to Cedar's (write_gguf.py).

llama-bench comes from scripts/setup_llamacpp.sh (scripts/test.sh runs it).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import write_gguf  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_PAIRS = "f32=f32,bf16=f16,bf16=bf16,int8=q8_0,int8+bf16a=q8_0"


def fail(msg):
    print(f"vs_llamacpp: {msg}", file=sys.stderr)
    sys.exit(2)


def parse_pairs(text):
    pairs = []
    for item in filter(None, text.split(",")):
        if "=" not in item:
            fail(f"--pairs wants CEDAR=GGUF items (e.g. bf16=f16), got '{item}'")
        cedar, gguf = item.split("=", 1)
        weights, *flags = cedar.split("+")
        if weights not in ("f32", "bf16", "int8", "fp8-fp4"):
            fail(f"--pairs: Cedar weights f32, bf16, int8 or fp8-fp4 (+bf16a, +int8a), got '{cedar}'")
        if any(f not in ("bf16a", "int8a") for f in flags):
            fail(f"--pairs: Cedar flags are +bf16a and +int8a, got '{cedar}'")
        if gguf not in write_gguf.KINDS:
            fail(f"--pairs: llama.cpp types {', '.join(write_gguf.KINDS)}, got '{gguf}'")
        pairs.append((cedar, weights, flags, gguf))
    if not pairs:
        fail("--pairs is empty")
    return pairs


def cedar_info(cedar, model, weights):
    """`cedar info --json` of the model at --weights."""
    out = subprocess.run([cedar, "info", "--model", model, "--weights", weights, "--json"], capture_output=True, text=True)
    if out.returncode != 0:
        fail(f"`cedar info --model {model} --weights {weights}` failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout)


def cedar_shape(cedar, model):
    """The Cedar model's width, vocabulary and matmul parameters per decode token."""
    info = cedar_info(cedar, model, "f32")
    return info["config"]["dim"], info["config"]["vocab_size"], float(info["matmul_params_per_decode_token"])


def llama_shape(dim, vocab, params):
    """A LLaMA model (head_dim 128, 2 KV heads) with `params` matmul parameters a decode token:
    layers of an FFN about 4.5 x dim, the last FFN width fitted in multiples of 32."""
    heads = max(1, dim // 128)
    kv_heads = 2 if heads % 2 == 0 else 1
    vocab = max(vocab, 260)
    attn = 2 * dim * dim + 2 * (dim // heads * kv_heads) * dim
    body = params - vocab * dim
    layers = max(1, round(body / (attn + 3 * dim * (dim * 9 // 2))))
    ffn = max(32, round((body / layers - attn) / (3 * dim) / 32) * 32)
    return argparse.Namespace(layers=layers, dim=dim, heads=heads, kv_heads=kv_heads, ffn=ffn, vocab=vocab)


def gguf_model(shape, kind, q8_ffn=0):
    """The GGUF's shape with its tensor types (write_gguf.plan's arguments)."""
    return argparse.Namespace(**vars(shape), type=kind, q8_ffn_tensors=q8_ffn)


def fit_q8_ffn(shape, target_bytes):
    """q8_0-mxfp4: how many FFN matrices stay Q8_0 so the bytes a token come closest to target."""
    return min(range(3 * shape.layers + 1), key=lambda k: abs(write_gguf.matmul_bytes(gguf_model(shape, write_gguf.RELEASED, k)) - target_bytes))


def write_model(model, directory):
    suffix = f"-q8ffn{model.q8_ffn_tensors}" if model.type == write_gguf.RELEASED else ""
    path = os.path.join(directory, f"llama-{model.layers}x{model.dim}-ffn{model.ffn}-kv{model.kv_heads}-v{model.vocab}-{model.type}{suffix}.gguf")
    if not os.path.exists(path):
        tmp = path + ".part"
        subprocess.run([sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "write_gguf.py"),
                        "--out", tmp, "--type", model.type, "--q8-ffn-tensors", str(model.q8_ffn_tensors),
                        "--layers", str(model.layers), "--dim", str(model.dim), "--heads", str(model.heads),
                        "--kv-heads", str(model.kv_heads), "--ffn", str(model.ffn), "--vocab", str(model.vocab)],
                       check=True, stdout=subprocess.DEVNULL)
        os.replace(tmp, path)
    return path


def run_llama(llama_bench, path, args):
    out = subprocess.run([llama_bench, "-m", path, "-t", str(args.threads), "-p", "0", "-n", str(args.decode),
                          "-d", str(args.context), "-r", str(args.reps), "-o", "jsonl"],
                         capture_output=True, text=True)
    if out.returncode != 0:
        fail(f"llama-bench failed on {path}:\n{out.stderr[-2000:]}")
    rows = [json.loads(l) for l in out.stdout.splitlines() if l.startswith("{")]
    if len(rows) != 1 or len(rows[0]["samples_ts"]) != args.reps:
        fail(f"llama-bench printed {len(rows)} results, expected one with {args.reps} samples")
    return rows[0]["samples_ts"]


def run_cedar(cedar, model, weights, flags, args):
    cmd = [cedar, "bench", "--model", model, "--weights", weights, "--lengths", "", "--decode", str(args.decode),
           "--decode-batch", "1", "--decode-context", str(args.context), "--reps", str(args.reps),
           "--threads", str(args.threads)]
    cmd += [{"bf16a": "--bf16-activations", "int8a": "--int8-activations"}[f] for f in flags]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        fail(f"`{' '.join(cmd)}` failed:\n{out.stderr[-2000:]}")
    lines = [json.loads(l) for l in out.stdout.splitlines() if l.startswith("{")]
    decode = [d for d in lines if d.get("bench") == "decode" and d.get("batch") == 1]
    if len(decode) != 1:
        fail(f"`cedar bench` printed {len(decode)} batch-1 decode lines, expected 1")
    return decode[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, help="Cedar model directory (cedar init --out)")
    ap.add_argument("--cedar", default=os.path.join(ROOT, "build", "cedar"))
    ap.add_argument("--llama-bench", default=os.path.join(ROOT, "build", "llamacpp", "build", "bin", "llama-bench"))
    ap.add_argument("--pairs", default=DEFAULT_PAIRS, help="CEDAR=GGUF items; CEDAR is f32|bf16|int8|fp8-fp4 with optional +bf16a / +int8a, "
                    "GGUF f32|f16|bf16|q8_0|q8_0-mxfp4")
    ap.add_argument("--gguf-dir", default=os.path.join(tempfile.gettempdir(), "cedar-vs-llamacpp"),
                    help="where the GGUF files are written and reused")
    ap.add_argument("--context", type=int, default=512, help="tokens in context before decoding (llama-bench -d)")
    ap.add_argument("--decode", type=int, default=48, help="tokens generated per rep")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=2, help="times every pair runs, alternating which engine goes first")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    for name in ("context", "decode", "reps", "rounds", "threads"):
        if getattr(args, name) < 1:
            fail(f"--{name} must be at least 1, got {getattr(args, name)}")
    pairs = parse_pairs(args.pairs)
    for path, what in ((args.cedar, "--cedar"), (args.llama_bench, "--llama-bench (bash scripts/setup_llamacpp.sh)")):
        if not os.access(path, os.X_OK):
            fail(f"{what}: no executable at {path}")
    if not os.path.isfile(os.path.join(args.model, "config.json")):
        fail(f"--model: no Cedar model (config.json) in {args.model}")
    os.makedirs(args.gguf_dir, exist_ok=True)

    dim, vocab, params = cedar_shape(args.cedar, args.model)
    shape = llama_shape(dim, vocab, params)
    models = {}  # GGUF kind -> its shape and tensor types
    for cedar_name, weights, flags, gguf in pairs:
        if gguf == write_gguf.RELEASED and gguf not in models:
            models[gguf] = gguf_model(shape, gguf, fit_q8_ffn(shape, cedar_info(args.cedar, args.model, weights)["decode_weight_bytes_per_token"]))
        models.setdefault(gguf, gguf_model(shape, gguf))
    print(json.dumps({"bench": "vs_llamacpp_models", "cedar_model": args.model, "cedar_matmul_params_per_token": params,
                      "llamacpp_matmul_params_per_token": write_gguf.matmul_params(shape),
                      "llamacpp_shape": vars(shape),
                      "llamacpp_bytes_per_token": {g: write_gguf.matmul_bytes(m) for g, m in sorted(models.items())},
                      "llamacpp_q8_0_ffn_matrices": {g: m.q8_ffn_tensors for g, m in models.items() if g == write_gguf.RELEASED}}),
          flush=True)
    paths = {g: write_model(m, args.gguf_dir) for g, m in sorted(models.items())}

    results = {p[0] + "=" + p[3]: [] for p in pairs}
    for rnd in range(args.rounds):
        for cedar_name, weights, flags, gguf in pairs:
            order = ("llama", "cedar") if rnd % 2 == 0 else ("cedar", "llama")
            for engine in order:
                if engine == "llama":
                    samples = run_llama(args.llama_bench, paths[gguf], args)
                else:
                    line = run_cedar(args.cedar, args.model, weights, flags, args)
            probe = statistics.median(line["read_probes_gbs"])
            cedar_bytes = line["weight_bytes_per_step_lower_bound"]
            llama_bytes = write_gguf.matmul_bytes(models[gguf])
            llama_tps = statistics.median(samples)
            row = {
                "bench": "vs_llamacpp", "round": rnd, "cedar": cedar_name, "llamacpp": gguf,
                "context": args.context, "decode": args.decode, "reps": args.reps, "threads": args.threads,
                "cedar_tokens_per_s": line["tokens_per_s_median"], "cedar_tokens_per_s_min": line["tokens_per_s_min"],
                "cedar_tokens_per_s_max": line["tokens_per_s_max"],
                "llamacpp_tokens_per_s": llama_tps, "llamacpp_tokens_per_s_min": min(samples),
                "llamacpp_tokens_per_s_max": max(samples),
                "ratio": line["tokens_per_s_median"] / llama_tps,
                "cedar_weight_bytes_per_token": cedar_bytes, "llamacpp_weight_bytes_per_token": llama_bytes,
                "read_bandwidth_gbs": probe,
                "cedar_fraction_of_bound": cedar_bytes * line["tokens_per_s_median"] / (probe * 1e9),
                "llamacpp_fraction_of_bound": llama_bytes * llama_tps / (probe * 1e9),
                "load1": os.getloadavg()[0], "time": time.strftime("%H:%M:%S", time.gmtime()),
            }
            results[cedar_name + "=" + gguf].append(row)
            print(json.dumps(row), flush=True)
    for key, rows in results.items():
        print(json.dumps({
            "bench": "vs_llamacpp_summary", "pair": key, "rounds": len(rows),
            "ratio_median": statistics.median(r["ratio"] for r in rows),
            "ratio_min": min(r["ratio"] for r in rows), "ratio_max": max(r["ratio"] for r in rows),
            "cedar_fraction_of_bound_median": statistics.median(r["cedar_fraction_of_bound"] for r in rows),
            "llamacpp_fraction_of_bound_median": statistics.median(r["llamacpp_fraction_of_bound"] for r in rows),
        }), flush=True)


if __name__ == "__main__":
    main()
