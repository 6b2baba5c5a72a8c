#!/usr/bin/env python3
"""Cluster benchmark (not a test): the shared Claude Code traces replayed live against 3
`cedar serve` behind HAProxy (examples/cluster/run.sh), session-affine vs random routing, each
with and without the shared Redis tier, beside `cedar profile --servers 3` on the same requests.
Prints one JSON line per configuration.

The traces' prompts (70-130K tokens) do not fit a small model's context, so every 64-token block
becomes --tokens-per-block tokens (default 2): the block ids, and with them which prompts share
which prefixes, are unchanged; only lengths shrink (a prompt of n tokens becomes ceil(n*k/64)).
The scaled files (claude-code format, block_size k) feed both the simulation and the live replay,
so both see the same requests in the same order (the order `cedar profile` reports).

Usage: bench/cluster_bench.py [--files 6] [--turns 40] [--cache-ram 4M] [--redis-maxmemory 64M]
                              [--configs affine,random,affine+shared,random+shared] [--cedar build/cedar]
Random routing sends no session (a session lives on one server); affine routing creates each
trace session on its server (POST /v1/sessions with X-Session-Id) and sends its turns there.
"""
import argparse
import glob
import hashlib
import json
import math
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def scale_requests(reqs, k, max_in, max_out):
    """Scaled copies of a claude-code request list; prompts that would not fit are dropped."""
    out = []
    for e in reqs:
        if e.get("type") == "subagent":
            sub = dict(e)
            sub["requests"] = scale_requests(e.get("requests", []), k, max_in, max_out)
            if sub["requests"]:
                out.append(sub)
            continue
        n = math.ceil(e["in"] * k / 64)
        if n > max_in:
            continue
        r = {"t": e["t"], "in": n, "out": min(e["out"], max_out), "hash_ids": e["hash_ids"]}
        if "type" in e:
            r["type"] = e["type"]
        out.append(r)
    return out


def write_scaled(args, folder):
    files = sorted(glob.glob(os.path.join(args.traces, "*.json")))[: args.files]
    if not files:
        sys.exit(f"cluster_bench: no *.json traces in {args.traces}")
    for f in files:
        doc = json.load(open(f))
        doc["block_size"] = args.tokens_per_block
        doc["requests"] = scale_requests(doc["requests"][: args.turns], args.tokens_per_block, args.max_prompt,
                                         args.max_output)
        doc.pop("totals", None)
        json.dump(doc, open(os.path.join(folder, os.path.basename(f)), "w"))
    return [os.path.join(folder, os.path.basename(f)) for f in files]


def block_tokens(scope, block_id, k):
    """The k token ids of a block: fixed per (file, id), in the byte range of the tiny tokenizer."""
    h = hashlib.blake2b(f"{scope}:{block_id}".encode(), digest_size=8).digest()
    rng = random.Random(int.from_bytes(h, "little"))
    return [rng.randrange(3, 256) for _ in range(k)]


def resolve(folder, source):
    """The request a report's `source` names: "<file>: requests[3].requests[2]"."""
    path, where = source.split(": ", 1)
    doc = json.load(open(path if os.path.isabs(path) else os.path.join(folder, os.path.basename(path))))
    node = doc
    for part in where.split("."):
        name, idx = part[:-1].split("[")
        node = node[name][int(idx)]
    return os.path.basename(path), node


def profile(args, scaled, routing, shared, out):
    cmd = [args.cedar, "profile", "--trace", scaled, "--preset", "tiny", "--cache-ram", args.cache_ram,
           "--servers", str(args.servers), "--routing", routing, "--cache-remote-ram", shared if shared else "0",
           "--out", out, "--no-plots", "--progress", "off"]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return json.load(open(os.path.join(out, "report.json")))


def post(base, path, body, session=None, timeout=600):
    headers = {"Content-Type": "application/json"}
    if session:
        headers["X-Session-Id"] = session
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(), headers=headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.headers, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, e.headers, {"error": e.read().decode(errors="replace")[:200]}


def replay(plan_path, result_path):
    """Child of run.sh: sends the plan's requests in order through HAProxy, one at a time."""
    plan = json.load(open(plan_path))
    lb = os.environ["CEDAR_CLUSTER_URL"]
    affine = plan["routing"] == "session"
    created, rows = set(), []
    t0 = time.time()
    for req in plan["requests"]:
        sid = req["session"] if affine else None
        if sid and sid not in created:
            st, _, body = post(lb, "/v1/sessions", {"session_id": sid}, sid)
            if st not in (200, 409):
                rows.append({"ok": False, "status": st, "error": body})
                continue
            created.add(sid)
        body = {"prompt": req["prompt"], "max_tokens": max(1, req["out"]), "temperature": 0, "ignore_eos": True}
        if sid:
            body["session_id"] = sid
        sent = time.time()
        st, headers, ans = post(lb, "/v1/completions", body, sid)
        latency = time.time() - sent
        if st != 200:
            rows.append({"ok": False, "status": st, "error": ans})
            continue
        c = ans["cedar"]
        rows.append({"ok": True, "server": headers.get("X-Cedar-Server"), "prompt": c["prompt_tokens"],
                     "cached": c["cached_tokens"], "by_tier": c.get("cached_tokens_by_tier", {}),
                     "ttft_ms": c.get("ttft_ms"), "latency_s": latency})
    json.dump({"rows": rows, "wall_s": time.time() - t0}, open(result_path, "w"))


def summarize(rows):
    ok = [r for r in rows if r["ok"]]
    prompt = sum(r["prompt"] for r in ok)
    cached = sum(r["cached"] for r in ok)
    tiers = {}
    for r in ok:
        for k, v in r["by_tier"].items():
            tiers[k] = tiers.get(k, 0) + v
    ttft = sorted(r["ttft_ms"] for r in ok if r["ttft_ms"] is not None)
    servers = {}
    for r in ok:
        servers[r["server"]] = servers.get(r["server"], 0) + 1
    return {"requests": len(rows), "errors": len(rows) - len(ok), "prompt_tokens": prompt,
            "hit_rate": round(cached / prompt, 4) if prompt else None,
            "hit_rate_by_tier": {k: round(v / prompt, 4) for k, v in sorted(tiers.items())} if prompt else {},
            "ttft_ms": {"mean": round(statistics.mean(ttft), 2), "p50": round(ttft[len(ttft) // 2], 2),
                        "p90": round(ttft[int(len(ttft) * 0.9)], 2)} if ttft else None,
            "requests_per_server": servers}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--traces", default=os.path.join(ROOT, "..", "shared", "traces", "claude-code"))
    ap.add_argument("--files", type=int, default=6, help="conversations (trace files, in path order)")
    ap.add_argument("--turns", type=int, default=40, help="top-level entries kept per file")
    ap.add_argument("--tokens-per-block", type=int, default=2)
    ap.add_argument("--max-prompt", type=int, default=4000, help="drop scaled prompts longer than this")
    ap.add_argument("--max-output", type=int, default=4)
    ap.add_argument("--servers", type=int, default=3)
    ap.add_argument("--cache-ram", default="4M", help="each server's prefix-cache RAM")
    ap.add_argument("--redis-maxmemory", default="64M", help="the shared tier's size")
    ap.add_argument("--configs", default="affine,random,affine+shared,random+shared")
    ap.add_argument("--cedar", default=os.path.join(ROOT, "build", "cedar"))
    ap.add_argument("--model", default="", help="model directory (default: the tiny preset, made in a temp dir)")
    ap.add_argument("--base-port", type=int, default=18300)
    ap.add_argument("--keep", action="store_true", help="keep the temp folder")
    ap.add_argument("--sim-only", action="store_true", help="only the simulated figures (no servers)")
    ap.add_argument("--child-replay", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child_replay:
        return replay(*args.child_replay)

    tmp = tempfile.mkdtemp(prefix="cedar-cluster-bench.")
    try:
        scaled = os.path.join(tmp, "traces")
        os.makedirs(scaled)
        write_scaled(args, scaled)
        model = args.model
        if not model:
            model = os.path.join(tmp, "tiny")
            subprocess.run([args.cedar, "init", "--preset", "tiny", "--seed", "1", "--out", model], check=True,
                           stdout=subprocess.DEVNULL)
        remote = "--cache-remote " in subprocess.run([args.cedar, "serve", "--help"], capture_output=True,
                                                     text=True).stdout
        plan_requests = None
        for name in args.configs.split(","):
            routing = "session" if name.startswith("affine") else "random"
            shared = name.endswith("+shared")
            sim = profile(args, scaled, routing, args.redis_maxmemory if shared else None, os.path.join(tmp, "prof-" + name))
            c = sim["cluster"]
            line = {"config": name, "routing": routing, "servers": args.servers, "cache_ram": args.cache_ram,
                    "shared_tier": args.redis_maxmemory if shared else None,
                    "trace": {"files": args.files, "turns": args.turns, "tokens_per_block": args.tokens_per_block,
                              "requests": c["requests"], "prompt_tokens": c["prompt_tokens"]},
                    "simulated": {"hit_rate": round(c["hit_rate"], 4),
                                  "hit_rate_by_tier": {k: round(v, 4) for k, v in c["hit_rate_by_tier"].items()},
                                  "one_server_hit_rate": round(c["one_server_hit_rate"], 4),
                                  "ideal_hit_rate": round(c["ideal_hit_rate"], 4),
                                  "requests_per_server": c["requests_per_server"]}}
            if plan_requests is None:
                plan_requests = []
                for r in sim["requests"]:
                    fname, entry = resolve(scaled, r["source"])
                    prompt = []
                    for b in entry["hash_ids"]:
                        prompt += block_tokens(fname, b, args.tokens_per_block)
                    prompt = prompt[: entry["in"]]
                    tail = random.Random(r["source"])
                    prompt += [tail.randrange(3, 256) for _ in range(entry["in"] - len(prompt))]
                    plan_requests.append({"session": r["session"].replace("/", ":"), "prompt": prompt,
                                          "out": entry["out"]})
            if args.sim_only:
                print(json.dumps(line), flush=True)
                continue
            if shared and not remote:
                line["live"] = None
                line["note"] = "cedar serve has no --cache-remote in this build: live run skipped"
                print(json.dumps(line), flush=True)
                continue
            plan = os.path.join(tmp, "plan.json")
            json.dump({"routing": routing, "requests": plan_requests}, open(plan, "w"))
            result = os.path.join(tmp, "result-" + name + ".json")
            cmd = [os.path.join(ROOT, "examples", "cluster", "run.sh"), "--model", model, "--servers", str(args.servers),
                   "--base-port", str(args.base_port), "--balance", routing, "--cache-ram", args.cache_ram,
                   "--redis-maxmemory", args.redis_maxmemory.lower().replace("m", "mb").replace("g", "gb"),
                   "--workdir", os.path.join(tmp, "cluster-" + name)]
            if not shared:
                cmd.append("--no-redis")
            cmd += ["--", sys.executable, os.path.abspath(__file__), "--child-replay", plan, result]
            subprocess.run(cmd, check=True, env=dict(os.environ, CEDAR=args.cedar), stderr=subprocess.DEVNULL)
            res = json.load(open(result))
            line["live"] = summarize(res["rows"])
            line["live"]["wall_s"] = round(res["wall_s"], 1)
            print(json.dumps(line), flush=True)
    finally:
        if args.keep:
            print(f"kept {tmp}", file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
