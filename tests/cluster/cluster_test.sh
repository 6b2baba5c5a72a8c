#!/usr/bin/env bash
# examples/cluster end to end: run.sh starts 2 `cedar serve` (sharing Redis when cedar has
# --cache-remote) behind HAProxy on a tiny model; conversation.py checks session affinity,
# outputs equal to a single server's, and failover to the other server. Exits 77 (skipped) when
# haproxy or redis-server is missing.
# Usage: cluster_test.sh CEDAR_BINARY
set -euo pipefail
cedar="$1"
src="$(cd "$(dirname "$0")/../.." && pwd)"
for b in haproxy redis-server curl python3; do
  if ! command -v "$b" >/dev/null; then
    echo "SKIP: $b is not installed (scripts/setup.sh installs haproxy and redis-server)"
    exit 77
  fi
done

# The shipped configuration is what run.sh generates for its defaults.
if ! diff <("$src/examples/cluster/run.sh" --print-config) "$src/examples/cluster/haproxy.cfg"; then
  echo "FAIL: examples/cluster/haproxy.cfg differs from run.sh --print-config (regenerate it)"
  exit 1
fi

tmp="$(mktemp -d "${TMPDIR:-/tmp}/cedar-cluster-test.XXXXXX")"
ref_pid=""
cleanup() {
  [ -n "$ref_pid" ] && kill "$ref_pid" 2>/dev/null && wait "$ref_pid" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT

"$cedar" init --preset tiny --seed 1 --out "$tmp/tiny" >/dev/null
# Four free loopback ports in a row: HAProxy, two servers, the single reference server.
base="$(python3 - <<'PY'
import random, socket
for _ in range(200):
    p = random.randint(20000, 60000)
    try:
        socks = []
        for k in range(4):
            s = socket.socket(); s.bind(("127.0.0.1", p + k)); socks.append(s)
        for s in socks: s.close()
        print(p); break
    except OSError:
        for s in socks: s.close()
PY
)"
[ -n "$base" ] || { echo "FAIL: no four free ports in a row"; exit 1; }

"$cedar" serve --model "$tmp/tiny" --socket none --port $((base + 3)) --cache-dir none >"$tmp/ref.log" 2>&1 &
ref_pid=$!
for _ in $(seq 1 300); do curl -fsS -o /dev/null "http://127.0.0.1:$((base + 3))/health" 2>/dev/null && break; sleep 0.1; done

CEDAR="$cedar" "$src/examples/cluster/run.sh" --model "$tmp/tiny" --servers 2 --base-port "$base" --workdir "$tmp/cluster" \
  -- python3 "$src/tests/cluster/conversation.py" "http://127.0.0.1:$((base + 3))" || {
  rc=$?
  for f in "$tmp"/cluster/*.log; do echo "== $f"; tail -5 "$f"; done
  exit "$rc"
}
