#!/usr/bin/env bash
# The bench programs' command lines (bench/bench_flags.h): `--help` prints the options and
# exits 0 at once, without running the benchmark; a bad value or an unknown flag exits 2 with
# one message naming the flag (and never a library's own text: stoi, stol, stod, lexical_cast).
# bench_decode_ab and `cedar bench` (its decode lines) also run once each, on one tiny model made
# with the `cedar` beside the bench directory.
# Usage: flags_test.sh BENCH_DIR   (build/bench, where the programs are)
set -u
DIR=$1
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
n=0

# check_help PROGRAM: exit 0 within 10 s, the options listed on stdout, nothing measured.
check_help() {
  local prog=$1 out rc
  out=$(timeout 10 "$DIR/$prog" --help 2>&1 </dev/null)
  rc=$?
  if [[ $rc -ne 0 ]]; then echo "FAIL: $prog --help -> exit $rc (expected 0): $out"; return; fi
  if [[ $out != *"$prog"* || $out != *"--help"* ]]; then echo "FAIL: $prog --help -> no usage: $out"; return; fi
  if [[ $out == *'"bench"'* ]]; then echo "FAIL: $prog --help -> ran the benchmark: $out"; return; fi
  echo "ok: $prog --help -> exit 0, $(wc -l <<<"$out") lines"
}

# check_refused PROGRAM FLAG args...: exit 2 within 10 s, the message names FLAG.
check_refused() {
  local prog=$1 flag=$2 out rc
  shift 2
  out=$(timeout 10 "$DIR/$prog" "$@" 2>&1 </dev/null)
  rc=$?
  if [[ $rc -ne 2 ]]; then echo "FAIL: $prog $* -> exit $rc (expected 2): $out"; return; fi
  if [[ $out != *"$flag"* ]]; then echo "FAIL: $prog $* -> message does not name $flag: $out"; return; fi
  if grep -qiE 'stoi|stol|stod|stoul|lexical_cast|std::' <<<"$out"; then
    echo "FAIL: $prog $* -> a library's message leaks: $out"; return
  fi
  if [[ $(wc -l <<<"$out") -ne 1 ]]; then echo "FAIL: $prog $* -> more than one line: $out"; return; fi
  echo "ok: $prog $* -> $out"
}

# Each case in the background (a start loads the whole stack's libraries: ~0.1-0.5 s).
run() {
  n=$((n + 1))
  "$@" >"$TMP/case.$n" &
}

# The tiny model both runs below read, made once with the `cedar` beside the bench directory.
TINY_ERROR=$(timeout 60 "$DIR/../cedar" init --preset tiny --seed 3 --out "$TMP/tiny" 2>&1) && TINY_ERROR=

# check_decode_ab: bench_decode_ab runs both settings on the tiny model and prints a line per
# side, then the ratio.
check_decode_ab() {
  local out rc
  if [[ -n $TINY_ERROR ]]; then echo "FAIL: cedar init --preset tiny: $TINY_ERROR"; return; fi
  out=$(timeout 60 "$DIR/bench_decode_ab" --model "$TMP/tiny" --weights int8 --a threads=1 --b bf16a=1,int8a=1 \
        --context 24 --steps 3 --warmup 1 --batch 2 2>&1 </dev/null)
  rc=$?
  if [[ $rc -ne 0 ]]; then echo "FAIL: bench_decode_ab on a tiny model -> exit $rc: $out"; return; fi
  if [[ $(grep -c '"bench":"decode_ab"' <<<"$out") -ne 3 || $out != *'"side":"a"'*'"side":"b"'*'"ratio_b_over_a":'* ||
        $out != *'"setting":"bf16a=1,int8a=1"'* ]]; then
    echo "FAIL: bench_decode_ab on a tiny model -> not a line per side and the ratio: $out"; return
  fi
  echo "ok: bench_decode_ab on a tiny model -> $(wc -l <<<"$out") lines"
}

# check_cedar_bench: `cedar bench`'s machine line names the kernels that ran (Cedar's and OpenBLAS's); its CPU decode lines
# carry a probe before the first rep and after each (reps + 1, all read) and the paired fraction's
# min <= median <= max, its median also as fraction_of_bound_paired; its `full` prefill line the
# same with sgemm probes (fraction_of_sgemm_paired), and sgemm_gflops at least the best of them.
check_cedar_bench() {
  local out rc
  if [[ -n $TINY_ERROR ]]; then echo "FAIL: cedar init --preset tiny: $TINY_ERROR"; return; fi
  out=$(timeout 120 "$DIR/../cedar" bench --model "$TMP/tiny" --device cpu --lengths 16 --decode 2 \
        --decode-batch 1,2 --decode-context 16 --reps 3 2>&1 </dev/null)
  rc=$?
  if [[ $rc -ne 0 ]]; then echo "FAIL: cedar bench on a tiny model -> exit $rc: $out"; return; fi
  local verdict
  verdict=$(python3 -c '
import json, sys
lines = [json.loads(l) for l in sys.stdin if l.startswith("{")]
mach = [d for d in lines if d.get("bench") == "machine"]
if len(mach) != 1 or not mach[0].get("kernels"): sys.exit("machine lines %r: want one, naming its kernels" % mach)
if not isinstance(mach[0].get("blas_core"), str) or not mach[0]["blas_core"]: sys.exit("machine line %r: no blas_core" % mach[0])
dec = [d for d in lines if d.get("bench") == "decode"]
if [d["batch"] for d in dec] != [1, 2]: sys.exit("decode lines for batches %s, expected [1, 2]" % [d["batch"] for d in dec])
for d in dec:
    p = d.get("read_probes_gbs")
    if not isinstance(p, list) or len(p) != d["reps"] + 1 or min(p) <= 0: sys.exit("read_probes_gbs %r with reps %d" % (p, d["reps"]))
    lo, mid, hi = d["fraction_of_bound_paired_min"], d["fraction_of_bound_paired_median"], d["fraction_of_bound_paired_max"]
    if not (0 < lo <= mid <= hi) or d["fraction_of_bound_paired"] != mid: sys.exit("paired fractions %r %r %r %r" % (lo, mid, hi, d["fraction_of_bound_paired"]))
    if d["bandwidth_gbs"] < p[-1]: sys.exit("bandwidth_gbs %r below the last probe %r" % (d["bandwidth_gbs"], p[-1]))
full = [d for d in lines if d.get("bench") == "prefill" and d.get("mode") == "full"]
if len(full) != 1: sys.exit("full prefill lines %r: want one" % full)
f = full[0]
p = f.get("sgemm_probes_gflops")
if not isinstance(p, list) or len(p) != f["reps"] + 1 or min(p) <= 0: sys.exit("sgemm_probes_gflops %r with reps %d" % (p, f["reps"]))
lo, mid, hi = f["fraction_of_sgemm_paired_min"], f["fraction_of_sgemm_paired_median"], f["fraction_of_sgemm_paired_max"]
if not (0 < lo <= mid <= hi) or f["fraction_of_sgemm_paired"] != mid: sys.exit("paired sgemm fractions %r %r %r %r" % (lo, mid, hi, f["fraction_of_sgemm_paired"]))
if f["sgemm_gflops"] < max(p) or f["sgemm_gflops_probe_after"] != p[-1]: sys.exit("sgemm_gflops %r against the probes %r" % (f["sgemm_gflops"], p))
print("ok")
' <<<"$out" 2>&1)
  if [[ $verdict != ok ]]; then echo "FAIL: cedar bench lines: $verdict: $out"; return; fi
  echo "ok: cedar bench on a tiny model -> a full prefill line and $(grep -c '"bench":"decode"' <<<"$out") decode lines with paired probes"
}

# check_cedar_bench_no_decode: `cedar bench --decode 0` prints the machine and prefill lines and no
# decode line (it used to refuse 0).
check_cedar_bench_no_decode() {
  local out rc
  if [[ -n $TINY_ERROR ]]; then echo "FAIL: cedar init --preset tiny: $TINY_ERROR"; return; fi
  out=$(timeout 120 "$DIR/../cedar" bench --model "$TMP/tiny" --device cpu --lengths 16 --decode 0 --reps 1 2>&1 </dev/null)
  rc=$?
  if [[ $rc -ne 0 ]]; then echo "FAIL: cedar bench --decode 0 -> exit $rc: $out"; return; fi
  if [[ $(grep -c '"bench":"prefill"' <<<"$out") -ne 2 || $out == *'"bench":"decode"'* ]]; then
    echo "FAIL: cedar bench --decode 0 -> not two prefill lines and no decode line: $out"; return
  fi
  echo "ok: cedar bench --decode 0 -> prefill lines only"
}

PROGRAMS=(bench_tokenizer bench_dsml_prompt bench_quality bench_sampling bench_weights bench_gemm bench_engram
          bench_server bench_session bench_grammar bench_scheduler bench_trace_replay bench_decode_ab)
for p in "${PROGRAMS[@]}"; do
  run check_help "$p"
  run check_refused "$p" --no-such-flag --no-such-flag 1
done
run check_refused bench_tokenizer --repeat --repeat abc
run check_refused bench_tokenizer --max-mb --max-mb -1
run check_refused bench_dsml_prompt --tokens --tokens -5
run check_refused bench_dsml_prompt --repeat --repeat 3x
run check_refused bench_quality --decode --model m --tokens t --decode abc
run check_refused bench_quality --cuts --model m --tokens t --cuts 128,x
run check_refused bench_quality --replay --model m --tokens t --replay 10:5
run check_refused bench_quality --model --tokens t
run check_refused bench_sampling --draws --draws abc
run check_refused bench_sampling --draws --draws -5
run check_refused bench_weights --rows --rows abc
run check_refused bench_weights --threads --threads 1,-2
run check_refused bench_gemm --reps --reps 0
run check_refused bench_gemm --rows --rows 16,abc
run check_refused bench_gemm --preset --preset large
run check_refused bench_engram --gib --gib -1
run check_refused bench_engram --lookups --lookups 1e5
run check_refused bench_server --turns --turns abc
run check_refused bench_session --context --context -5
run check_refused bench_grammar --steps --steps x
run check_refused bench_scheduler --sessions --sessions x
run check_refused bench_trace_replay --time-scale --time-scale -1
run check_refused bench_trace_replay --configs --configs mixed,bogus
run check_refused bench_decode_ab --b --model m --b foo=1
run check_refused bench_decode_ab --b --model m --b bf16a=2
run check_refused bench_decode_ab --a --model m --a threads --b bf16a=1
run check_refused bench_decode_ab --model --b bf16a=1
run check_refused bench_decode_ab --steps --model m --b bf16a=1 --steps 0
# bench_engine (`cedar bench`): its own parser, the same exit code.
run check_refused bench_engine --no-such-flag --no-such-flag 1
run check_refused bench_engine --decode --decode -1
run check_refused bench_engine --preset --preset small9
# check_cedar_bench_released: on a released-layout model the decode bound's bytes are the bytes
# `cedar info --weights` says Cedar holds for a decode token (engine/v41_info.h V41Held, which
# v41_held_bytes_test checks against the loader), not the CED estimate (no Engram, routers at F32).
check_cedar_bench_released() {
  local err info out verdict
  err=$(timeout 60 "$DIR/../cedar" init --arch v41 --preset v41-tiny --seed 2 --out "$TMP/v41" 2>&1) || {
    echo "FAIL: cedar init --arch v41 --preset v41-tiny: $err"; return; }
  info=$("$DIR/../cedar" info --model "$TMP/v41" --weights as-stored --json 2>&1 </dev/null) || { echo "FAIL: cedar info: $info"; return; }
  out=$(timeout 120 "$DIR/../cedar" bench --model "$TMP/v41" --device cpu --weights as-stored --lengths '' --decode 2 \
        --decode-batch 1 --decode-context 16 --reps 1 2>&1 </dev/null) || { echo "FAIL: cedar bench on v41-tiny: $out"; return; }
  verdict=$(INFO=$info python3 -c '
import json, os, sys
info = os.environ["INFO"]
want = json.loads(info[info.index("{"):])["held"]["decode_token_bytes"]
dec = [json.loads(l) for l in sys.stdin if l.startswith("{") and "\"bench\":\"decode\"" in l]
if len(dec) != 1: sys.exit("decode lines %r: want one" % dec)
got = dec[0]["weight_bytes_per_step_lower_bound"]
if got != want: sys.exit("weight_bytes_per_step_lower_bound %r, cedar info held decode_token_bytes %r" % (got, want))
print("ok %d" % want)
' <<<"$out" 2>&1)
  if [[ $verdict != ok* ]]; then echo "FAIL: cedar bench on v41-tiny: $verdict"; return; fi
  echo "ok: cedar bench on v41-tiny as stored: the bound's bytes are cedar info's (${verdict#ok })"
}

run check_decode_ab
run check_cedar_bench
run check_cedar_bench_released
run check_cedar_bench_no_decode
wait

fail=0
for f in "$TMP"/case.*; do
  cat "$f"
  grep -q '^FAIL' "$f" && fail=1
done
echo "$n cases"
exit $fail
