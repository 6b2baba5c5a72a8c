#!/usr/bin/env bash
# The main job on a fresh machine: set up (packages + build), make a seeded tiny model, show
# what it is, and generate from it in every execution mode.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
MODEL=${CEDAR_MODEL:-build/models/tiny}
[ -f "$MODEL/model.safetensors" ] || ./build/cedar init --preset tiny --seed 1 --out "$MODEL"
./build/cedar info --model "$MODEL"
for mode in full exact bounded bounded-paper; do
  echo "== $mode"
  ./build/cedar generate --model "$MODEL" --prompt "def fibonacci(n):" --mode "$mode" --max-tokens 16 --json
done
