#!/usr/bin/env bash
# The main job on a fresh machine: set up (packages + build), show the shipped trained model
# (models/cedar-mini, trained on the Python standard library), and generate code from it in
# every execution mode. CEDAR_MODEL=DIR picks another model.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
MODEL=${CEDAR_MODEL:-models/cedar-mini}
./build/cedar info --model "$MODEL"
PROMPT='def read_config(path):
    """Read a configuration file and return a dict."""
'
for mode in full exact bounded bounded-paper; do
  echo "== $mode"
  ./build/cedar generate --model "$MODEL" --prompt "$PROMPT" --mode "$mode" --max-tokens 120 \
    --temperature 0.7 --top-p 0.9 --seed 1
done
