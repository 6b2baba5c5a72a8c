#!/usr/bin/env bash
# `cedar profile`'s command line: stray positional arguments and unknown values are errors naming
# them (exit 2), --trace takes several values and reads them all, --progress off draws nothing.
# Usage: profile_args_test.sh path/to/cedar path/to/tests/data/profile
set -u
CEDAR=$1
DATA=$2
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail=0
P=(profile --preset tiny --no-plots --out "$TMP/out")

# refused WORD -- arguments...: exit 2 (a usage error) and a message that names WORD.
refused() {
  local word=$1
  shift 2
  local out rc
  out=$("$CEDAR" "$@" 2>&1 </dev/null)
  rc=$?
  if [[ $rc -ne 2 || $out != *"$word"* ]]; then
    echo "FAIL: cedar $* -> exit $rc, expected 2 and a message naming '$word': $out"
    fail=1
  else
    echo "ok: cedar $* -> $(tail -1 <<<"$out")"
  fi
}

refused stray.json -- "${P[@]}" --trace "$DATA/known.json" --progress off stray.json
refused "'x'" -- "${P[@]}" --trace "$DATA/known.json" --limit 3 x y
refused maybe -- "${P[@]}" --trace "$DATA/known.json" --progress maybe
refused poison:3 -- "${P[@]}" --trace "$DATA/known.json" --arrival poison:3
refused concurrency:0 -- "${P[@]}" --trace "$DATA/known.json" --arrival concurrency:0
refused fp4 -- "${P[@]}" --trace "$DATA/known.json" --kv-dtype fp4
refused int4 -- "${P[@]}" --trace "$DATA/known.json" --baseline-kv-dtype int4
refused jsonish -- "${P[@]}" --trace "$DATA/known.json" --format jsonish
refused lazy -- "${P[@]}" --trace "$DATA/known.json" --restore-policy lazy
refused huge -- profile --preset huge --trace "$DATA/known.json" --out "$TMP/out"
refused sometimes -- "${P[@]}" --trace "$DATA/known.json" --sweep-ram 1G,sometimes
refused sticky -- "${P[@]}" --trace "$DATA/known.json" --servers 2 --routing sticky
refused --servers -- "${P[@]}" --trace "$DATA/known.json" --cache-remote-ram 1G

# --trace a b reads both files; --progress off draws no bar on stderr (stderr is not a terminal
# here either way, so --progress on is the control: it does draw one).
out=$("$CEDAR" "${P[@]}" --trace "$DATA/known.json" "$DATA/claude_small.json" --progress off 2>&1 >/dev/null </dev/null)
if [[ $? -ne 0 || $out != *"from 2 file(s)"* ]]; then
  echo "FAIL: --trace with two values did not read both: $out"; fail=1
else
  echo "ok: --trace known.json claude_small.json reads 2 files"
fi
if grep -q "%" <<<"$out"; then echo "FAIL: --progress off drew a progress bar: $out"; fail=1; else echo "ok: --progress off draws nothing"; fi
on=$("$CEDAR" "${P[@]}" --trace "$DATA/known.json" --progress on 2>&1 >/dev/null </dev/null)
if ! grep -q "%" <<<"$on"; then echo "FAIL: --progress on drew no bar: $on"; fail=1; else echo "ok: --progress on draws the bar"; fi
# The arrival model is on the summary's first line.
out=$("$CEDAR" "${P[@]}" --trace "$DATA/known.json" --arrival concurrency:1 2>/dev/null </dev/null)
if [[ $(head -1 <<<"$out") != "arrival concurrency:1"* ]]; then echo "FAIL: first line: $(head -1 <<<"$out")"; fail=1; else echo "ok: $(head -1 <<<"$out")"; fi
exit $fail
