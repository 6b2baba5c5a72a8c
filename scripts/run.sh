#!/usr/bin/env bash
# The main job on a fresh machine: set up (packages + build), then show what Cedar is for: an
# agent's turns on `cedar serve` with the shipped trained model (models/cedar-mini, trained on
# the Python standard library), each a forced tool call and its result, printing per turn the
# cached tokens and the time to first token next to what the same prompt costs cold; then stop
# the server and generate code from the model in every execution mode. CEDAR_MODEL=DIR picks
# another model.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
MODEL=${CEDAR_MODEL:-models/cedar-mini}
./build/cedar --version
./build/cedar info --model "$MODEL"

echo "== an agent on cedar serve (examples/agent_py/agent_demo.py)"
DIR=$(mktemp -d)
SERVER_PID=
cleanup() {
  if [ -n "$SERVER_PID" ]; then kill "$SERVER_PID" 2>/dev/null || true; wait "$SERVER_PID" 2>/dev/null || true; fi
  rm -rf "$DIR"
}
trap cleanup EXIT
./build/cedar serve --model "$MODEL" --socket "$DIR/cedar.sock" --no-access-log > "$DIR/serve.out" 2> "$DIR/serve.err" &
SERVER_PID=$!
for _ in $(seq 1 300); do [ -S "$DIR/cedar.sock" ] && break; sleep 0.1; done
[ -S "$DIR/cedar.sock" ] || { cat "$DIR/serve.err"; echo "cedar serve did not start" >&2; exit 1; }
/usr/bin/python3 examples/agent_py/agent_demo.py --socket "$DIR/cedar.sock" --turns 5
kill "$SERVER_PID"; wait "$SERVER_PID" 2>/dev/null || true; SERVER_PID=
echo "(server stopped)"

PROMPT='def read_config(path):
    """Read a configuration file and return a dict."""
'
for mode in full exact bounded bounded-paper; do
  echo "== $mode"
  ./build/cedar generate --model "$MODEL" --prompt "$PROMPT" --mode "$mode" --max-tokens 120 \
    --temperature 0.7 --top-p 0.9 --seed 1
done
