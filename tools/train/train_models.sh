#!/bin/sh
# Trains the two committed models one after the other (one process, one thread) and copies
# them into models/. The replay-aware model is the same command plus --replay-from 640; it
# starts from the plain run's checkpoint at step 640, which is what it would compute itself
# (steps before 640 do not depend on --replay-from; batches are seeded by step).
#   sh tools/train/train_models.sh [RUNS_DIR]      (default /tmp/cedar-train)
set -eu
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
RUNS=${1:-/tmp/cedar-train}
PY=/usr/bin/python3
COMMON="--preset mini --steps 800 --batch 2 --seq 1024 --lr 3e-3 --warmup 50 --seed 1 --threads 1 --balance-rate 1e-2"
mkdir -p "$RUNS"
$PY "$ROOT/tools/train/train.py" $COMMON --keep-at 640 --name cedar-mini --out "$RUNS/mini" --resume
$PY "$ROOT/tools/train/train.py" $COMMON --replay-from 640 --name cedar-mini-replay --out "$RUNS/mini-replay" \
    --init-from "$RUNS/mini/checkpoint-640.pt" --resume
for m in mini mini-replay; do
  mkdir -p "$ROOT/models/cedar-$m"
  cp "$RUNS/$m/config.json" "$RUNS/$m/model.safetensors" "$RUNS/$m/result.json" "$RUNS/$m/train.log" "$ROOT/models/cedar-$m/"
done
