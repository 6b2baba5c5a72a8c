#!/usr/bin/env bash
# bench/vs_llamacpp: llama.cpp itself reads every GGUF that write_gguf.py writes (the parameter
# count and tensor bytes llama-bench reports equal the writer's), and run.py runs end to end on a
# tiny Cedar model and prints lines whose fields agree with each other.
# Usage: vs_llamacpp_test.sh PYTHON3 CEDAR LLAMA_BENCH   (exit 77: llama-bench or numpy missing)
set -uo pipefail
PY="$1" CEDAR="$2" LLAMA_BENCH="$3"
SRC="$(cd "$(dirname "$0")/../.." && pwd)"
if [[ ! -x $LLAMA_BENCH ]]; then
  echo "SKIP: no llama-bench at $LLAMA_BENCH (bash scripts/setup_llamacpp.sh builds it)"
  exit 77
fi
"$PY" -c 'import numpy' 2>/dev/null || { echo "SKIP: $PY has no numpy"; exit 77; }
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# 1. Each tensor type, in a shape where every matrix differs (2 KV heads of 128, FFN 384); the
#    released layout's analogue (q8_0-mxfp4) with its first FFN matrix kept Q8_0.
for type in f32 f16 bf16 q8_0 q8_0-mxfp4; do
  args=(--type "$type" --q8-ffn-tensors 1 --layers 2 --dim 256 --heads 2 --kv-heads 1 --ffn 384 --vocab 300)
  if ! "$PY" "$SRC/bench/vs_llamacpp/write_gguf.py" --out "$TMP/m-$type.gguf" "${args[@]}" >/dev/null; then
    fail "write_gguf.py --type $type"; continue
  fi
  out=$("$LLAMA_BENCH" -m "$TMP/m-$type.gguf" -t 2 -p 0 -n 4 -d 8 -r 1 -o jsonl 2>"$TMP/err") ||
    { fail "llama-bench refused the $type file: $(tail -3 "$TMP/err")"; continue; }
  "$PY" - "$type" "$out" <<'EOF' || failures=$((failures + 1))
import json, sys
kind, row = sys.argv[1], json.loads(sys.argv[2].splitlines()[0])
d, f, v, kvd, L = 256, 384, 300, 128, 2
matmul = L * (2 * d * d + 2 * kvd * d + 3 * d * f) + v * d   # + output.weight
params = matmul + v * d + (2 * L + 1) * d                     # + token_embd, norms
per = {"f32": 4, "f16": 2, "bf16": 2, "q8_0": 34 / 32}
if kind == "q8_0-mxfp4":  # embedding, attention and layer 0's ffn_gate Q8_0, head BF16, 5 FFN matrices MXFP4
    size = (v * d + L * (2 * d * d + 2 * kvd * d) + d * f) * per["q8_0"] + v * d * 2 + 5 * d * f * 17 / 32
else:
    size = (matmul + v * d) * per[kind]
size += (2 * L + 1) * d * 4                                   # norms stay F32
ok = row["model_n_params"] == params and row["model_size"] == size and row["samples_ts"][0] > 0
print(("ok" if ok else "FAIL") + f": {kind}: llama.cpp read {row['model_n_params']} params, {row['model_size']} bytes; "
      f"the writer wrote {params}, {int(size)}")
sys.exit(0 if ok else 1)
EOF
done

# 2. A bad --pairs is refused with exit 2 before anything runs.
"$PY" "$SRC/bench/vs_llamacpp/run.py" --model "$TMP/none" --pairs bf16=q4_0 >/dev/null 2>"$TMP/err"
[[ $? -eq 2 ]] && grep -q -- '--pairs' "$TMP/err" || fail "--pairs bf16=q4_0 was not refused with exit 2: $(cat "$TMP/err")"

# 3. run.py end to end on a tiny Cedar model: one round, three pairs.
if ! timeout 60 "$CEDAR" init --preset tiny --seed 3 --out "$TMP/tiny" >/dev/null 2>"$TMP/err"; then
  fail "cedar init --preset tiny: $(cat "$TMP/err")"
elif ! timeout 300 "$PY" "$SRC/bench/vs_llamacpp/run.py" --model "$TMP/tiny" --cedar "$CEDAR" \
    --llama-bench "$LLAMA_BENCH" --gguf-dir "$TMP/gguf" --pairs int8=q8_0,bf16+bf16a=f16,fp8-fp4+bf16a=q8_0-mxfp4 \
    --rounds 1 --reps 2 --decode 4 --context 16 >"$TMP/run.jsonl" 2>"$TMP/err"; then
  fail "run.py on the tiny model: $(tail -5 "$TMP/err")"
else
  "$PY" - "$TMP/run.jsonl" <<'EOF' || failures=$((failures + 1))
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
kinds = [l["bench"] for l in lines]
assert kinds == ["vs_llamacpp_models"] + ["vs_llamacpp"] * 3 + ["vs_llamacpp_summary"] * 3, kinds
m = lines[0]
assert abs(m["llamacpp_matmul_params_per_token"] / m["cedar_matmul_params_per_token"] - 1) < 0.05, m
for r in lines[1:4]:
    assert r["cedar_tokens_per_s_min"] <= r["cedar_tokens_per_s"] <= r["cedar_tokens_per_s_max"], r
    assert r["llamacpp_tokens_per_s_min"] <= r["llamacpp_tokens_per_s"] <= r["llamacpp_tokens_per_s_max"], r
    assert abs(r["ratio"] - r["cedar_tokens_per_s"] / r["llamacpp_tokens_per_s"]) < 1e-9, r
    for side in ("cedar", "llamacpp"):
        want = r[side + "_weight_bytes_per_token"] * r[side + "_tokens_per_s"] / (r["read_bandwidth_gbs"] * 1e9)
        assert r[side + "_fraction_of_bound"] > 0 and abs(r[side + "_fraction_of_bound"] - want) < 1e-9, r
assert [l["pair"] for l in lines[4:]] == ["int8=q8_0", "bf16+bf16a=f16", "fp8-fp4+bf16a=q8_0-mxfp4"], lines[4:]
assert lines[1]["llamacpp_weight_bytes_per_token"] < lines[2]["llamacpp_weight_bytes_per_token"]  # q8_0 < f16
# The mixed GGUF: fewer bytes than all-Q8_0, and no other count of Q8_0 FFN matrices nearer Cedar's fp8-fp4 bytes
# (the tiny model: 7 layers of FFN 256 at width 64, so one matrix moves the bytes by 64 * 256 * 17 / 32).
mixed = lines[3]
assert mixed["llamacpp_weight_bytes_per_token"] == m["llamacpp_bytes_per_token"]["q8_0-mxfp4"], (mixed, m)
assert mixed["llamacpp_weight_bytes_per_token"] < lines[1]["llamacpp_weight_bytes_per_token"], mixed
k, step = m["llamacpp_q8_0_ffn_matrices"]["q8_0-mxfp4"], 64 * 256 * 17 / 32
gap = abs(mixed["llamacpp_weight_bytes_per_token"] - mixed["cedar_weight_bytes_per_token"])
assert 0 <= k <= 21 and (gap <= step / 2 or k in (0, 21)), (k, gap, mixed)
print("ok: run.py on the tiny model:", [round(l["ratio"], 2) for l in lines[1:4]])
EOF
fi

if [[ $failures -gt 0 ]]; then echo "$failures failure(s)"; exit 1; fi
echo "vs_llamacpp: all checks passed"
