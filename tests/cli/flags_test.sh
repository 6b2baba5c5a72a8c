#!/usr/bin/env bash
# Every numeric flag of every `cedar` subcommand refuses bad values before doing anything:
# exit code 2 (a usage error; a failure met while running exits 1, checked below) and one message
# naming the flag and the value (and never a library's own text:
# stoi, lexical_cast, "Cannot allocate memory"); and --int8-activations / --bf16-activations
# change what `generate` computes (or, in a build without their kernel, say so and change nothing).
# Usage: flags_test.sh path/to/cedar
set -u
CEDAR=$1
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail=0
n=0

# check_refused FLAG VALUE -- cedar arguments...: prints "ok: ..." or "FAIL: ...".
check_refused() {
  local flag=$1 value=$2
  shift 3
  local out rc
  out=$("$CEDAR" "$@" 2>&1 </dev/null)
  rc=$?
  if [[ $rc -ne 2 ]]; then
    echo "FAIL: cedar $* -> exit $rc (expected 2): $out"; return
  fi
  if [[ $out != *"$flag"* || $out != *"$value"* ]]; then
    echo "FAIL: cedar $* -> message does not name $flag and '$value': $out"; return
  fi
  if grep -qiE 'stoi|stol|stod|lexical_cast|Cannot allocate memory|std::' <<<"$out"; then
    echo "FAIL: cedar $* -> a library's message leaks: $out"; return
  fi
  echo "ok: cedar $* -> $out"
}

# The cases run in parallel: a start of `cedar` takes ~0.5 s, mostly loading its libraries.
expect_refused() {
  n=$((n + 1))
  check_refused "$@" >"$TMP/case.$n" &
}

M=(--model "$TMP/no-model")  # never loaded: the flags are checked first
S=(serve "${M[@]}" --socket "$TMP/s.sock")
expect_refused --max-connections 0 -- "${S[@]}" --max-connections 0
expect_refused --max-connections -5 -- "${S[@]}" --max-connections -5
expect_refused --max-unix-connections 0 -- "${S[@]}" --max-unix-connections 0
expect_refused --read-timeout 0 -- "${S[@]}" --read-timeout 0
expect_refused --read-timeout -1 -- "${S[@]}" --read-timeout -1
expect_refused --read-timeout nan -- "${S[@]}" --read-timeout nan
expect_refused --auth-timeout inf -- "${S[@]}" --auth-timeout inf
expect_refused --drain-timeout -3 -- "${S[@]}" --drain-timeout -3
expect_refused --port -5 -- "${S[@]}" --port -5
expect_refused --port 70000 -- "${S[@]}" --port 70000
expect_refused --port 80x -- "${S[@]}" --port 80x
expect_refused --cache-disk 1e30 -- "${S[@]}" --cache-disk 1e30
expect_refused --cache-disk 100T -- "${S[@]}" --cache-disk 100T --cache-dir "$TMP/cache"
expect_refused --cache-ram -1G -- "${S[@]}" --cache-ram -1G
expect_refused --cache-ram 4096T -- "${S[@]}" --cache-ram 4096T
expect_refused --cache-ram 12Q -- "${S[@]}" --cache-ram 12Q
expect_refused --max-body-bytes 0 -- "${S[@]}" --max-body-bytes 0
expect_refused --io-threads 0 -- "${S[@]}" --io-threads 0
expect_refused --threads -1 -- "${S[@]}" --threads -1
expect_refused --max-sessions abc -- "${S[@]}" --max-sessions abc
expect_refused --default-max-tokens 0 -- "${S[@]}" --default-max-tokens 0
expect_refused "API key #1" empty -- "${S[@]}" --api-key ""
expect_refused --server-id "a b" -- "${S[@]}" --server-id "a b"
expect_refused --batch-prefill serial -- "${S[@]}" --batch-prefill --scheduler serial
expect_refused --batch-prefill maybe -- "${S[@]}" --batch-prefill maybe

G=(generate "${M[@]}" --prompt hi)
expect_refused --max-tokens -1 -- "${G[@]}" --max-tokens -1
expect_refused --top-p 0 -- "${G[@]}" --top-p 0
expect_refused --temperature -1 -- "${G[@]}" --temperature -1
# What the server refuses, generate refuses (issue 19): temperature in [0, 2], max_tokens >= 0.
expect_refused --temperature 9 -- "${G[@]}" --temperature 9
expect_refused --max-tokens -5 -- "${G[@]}" --max-tokens -5
expect_refused --sse-keepalive -1 -- "${S[@]}" --sse-keepalive -1
expect_refused --chunk 1e3 -- "${G[@]}" --chunk 1e3
expect_refused --threads -2 -- "${G[@]}" --threads -2
expect_refused --seed -1 -- "${G[@]}" --seed -1
expect_refused --tokens x -- generate "${M[@]}" --tokens 1,x,3
expect_refused --stop -4 -- "${G[@]}" --stop 5,-4
expect_refused --spec-tokens 16 -- "${G[@]}" --spec-tokens 16
expect_refused --spec-tokens -1 -- "${G[@]}" --spec-tokens -1

expect_refused --seed -1 -- init --out "$TMP/m" --seed -1
expect_refused --tol 0 -- check-golden "${M[@]}" --golden "$TMP/g" --tol 0

expect_refused --decode -1 -- bench --decode -1
expect_refused --spec-tokens 0 -- bench --spec-tokens 0
expect_refused --lengths 0 -- bench --lengths 512,0
expect_refused --decode-batch x -- bench --decode-batch x
expect_refused --threads 1.5 -- bench --threads 1.5

P=(profile --trace "$TMP/none.json" --out "$TMP/out")
expect_refused --servers 0 -- "${P[@]}" --servers 0
expect_refused --cache-remote-ram -1G -- "${P[@]}" --servers 2 --cache-remote-ram -1G
expect_refused --concurrency 0 -- "${P[@]}" --concurrency 0
expect_refused --cache-ram 1e30 -- "${P[@]}" --cache-ram 1e30
expect_refused --page-tokens 0 -- "${P[@]}" --page-tokens 0
expect_refused --sweep-ram oops -- "${P[@]}" --sweep-ram 1G,oops
expect_refused --units-per-s -1 -- "${P[@]}" --units-per-s -1
expect_refused --limit -1 -- "${P[@]}" --limit -1
# Not only numbers: an unknown flag, a missing value, a word no flag takes, flags that do not go
# together, and a value that is not one of the choices, on every subcommand.
expect_refused --bogus unrecognised -- "${S[@]}" --bogus 1
expect_refused --bogus unrecognised -- generate "${M[@]}" --prompt hi --bogus x
expect_refused --host --port -- "${S[@]}" --host 127.0.0.1
expect_refused --mode sideways -- "${G[@]}" --mode sideways
expect_refused --weights f12 -- "${G[@]}" --weights f12
expect_refused --prompt --tokens -- generate "${M[@]}" --prompt hi --tokens 1
expect_refused prompt empty -- generate "${M[@]}" --prompt ''
expect_refused --prompt --tokens -- generate "${M[@]}" --tokens ''
expect_refused --prompt --tokens -- generate "${M[@]}" --max-tokens 2
expect_refused preset huge -- info --preset huge
expect_refused preset v41-huge -- info --preset v41-huge
# info takes both kinds of preset, so its message lists both; bench's lists the CED ones.
expect_refused v41-small huge -- info --preset huge
expect_refused medium huge -- bench --preset huge
expect_refused --weights fp8-fp4 -- info --preset v41-small --weights fp8-fp4
expect_refused --weights f12 -- info --preset v41-small --weights f12
expect_refused --kv-dtype f32 -- info --preset v41-tiny --kv-dtype f32
expect_refused --dtype f12 -- init --out "$TMP/m" --dtype f12
expect_refused --out required -- init --seed 1
expect_refused --arrival poison:3 -- "${P[@]}" --arrival poison:3
expect_refused --preset small9 -- bench --preset small9
expect_refused --weights f12 -- bench --weights f12 --preset tiny

# A failure met while running (here the model directory that does not exist) exits 1, not 2.
check_runtime_failure() {
  local out rc
  out=$("$CEDAR" "$@" 2>&1 </dev/null)
  rc=$?
  if [[ $rc -ne 1 || $out != *"$TMP/no-model"* ]]; then
    echo "FAIL: cedar $* -> exit $rc (expected 1 and a message naming the model directory): $out"; return
  fi
  echo "ok: cedar $* -> exit 1: $out"
}
n=$((n + 1)); check_runtime_failure "${G[@]}" >"$TMP/case.$n" &
n=$((n + 1)); check_runtime_failure check-golden "${M[@]}" --golden "$TMP/g" >"$TMP/case.$n" &

# The help and version a newcomer reads (issue 19): `cedar --version`, `cedar help CMD`, every
# preset in init's help, and no --cache-disk default without --cache-dir.
check_help() {
  local what=$1 needle=$2 absent=$3
  shift 3
  local out
  out=$("$CEDAR" "$@" 2>&1 </dev/null)
  if [[ $? -ne 0 || $out != *"$needle"* ]]; then echo "FAIL: cedar $* ($what) lacks '$needle': $out"; return; fi
  if [[ -n $absent && $out == *"$absent"* ]]; then echo "FAIL: cedar $* ($what) shows '$absent'"; return; fi
  echo "ok: cedar $* ($what)"
}
n=$((n + 1)); check_help version "cedar 0." "" --version >"$TMP/case.$n" &
n=$((n + 1)); check_help "help serve" "--sse-keepalive" "" help serve >"$TMP/case.$n" &
n=$((n + 1)); check_help "init presets" "medium" "" init --help >"$TMP/case.$n" &
n=$((n + 1)); check_help "cache-disk default" "--cache-disk arg" "--cache-disk arg (=" serve --help >"$TMP/case.$n" &
# A released-layout preset with --weights W also prints what Cedar would hold loading it at W.
n=$((n + 1)); check_help "info v41 held bytes" "Cedar at --weights int8: holds" "" info --preset v41-small --weights int8 >"$TMP/case.$n" &

# The activation flags reach the kernels on `generate` (engine/activation_modes.h): on INT8 weights
# each one changes the final logits, and F32 weights, which neither touches, keep theirs. A build
# without a flag's vector kernel must say so and keep F32 activations: the logits without the flag.
check_activation_flags() {
  local tiny=$1 h0 h8 hb f0 fb out8 outb want8=changed wantb=changed
  run() { "$CEDAR" generate --model "$tiny" --tokens 1,2,3 --max-tokens 1 "$@" 2>&1; }
  hash_in() { sed -n 's/^final logits xxh3: //p' <<<"$1"; }
  h0=$(hash_in "$(run --weights int8)")
  out8=$(run --weights int8 --int8-activations); h8=$(hash_in "$out8")
  outb=$(run --weights int8 --bf16-activations); hb=$(hash_in "$outb")
  f0=$(hash_in "$(run --weights f32)"); fb=$(hash_in "$(run --weights f32 --bf16-activations)")
  [[ $out8 == *"keeps F32 activations"* ]] && want8=$h0
  [[ $outb == *"keeps F32 activations"* ]] && wantb=$h0
  local bad=0
  [[ -z $h0 || -z $h8 || -z $hb || -z $f0 || $f0 != "$fb" ]] && bad=1
  if [[ $want8 == changed ]]; then [[ $h8 == "$h0" ]] && bad=1; else [[ $h8 != "$want8" ]] && bad=1; fi
  if [[ $wantb == changed ]]; then [[ $hb == "$h0" || $hb == "$h8" ]] && bad=1; else [[ $hb != "$wantb" ]] && bad=1; fi
  if ((bad)); then
    echo "FAIL: activation flags: int8 $h0, + --int8-activations $h8 (want $want8), + --bf16-activations $hb (want $wantb); f32 $f0, + --bf16-activations $fb"; return
  fi
  echo "ok: activation flags on INT8: $h0 / $h8 ($want8) / $hb ($wantb); F32 keeps $f0"
}
n=$((n + 1)); check_activation_flags "$(cd "$(dirname "$0")/../.." && pwd)/tests/golden/tiny" >"$TMP/case.$n" &

wait
for i in $(seq 1 "$n"); do
  cat "$TMP/case.$i"
  grep -q '^ok: ' "$TMP/case.$i" || fail=1
done
echo "$n cases"
exit $fail
