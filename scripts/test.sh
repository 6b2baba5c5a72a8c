#!/usr/bin/env bash
# The test command: installs what is missing, builds, and runs every test ctest knows
# (labels unit, kernels, model; gpu tests are skipped where no GPU exists).
# Usage: bash scripts/test.sh [ctest args, e.g. -L unit]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# llama.cpp's llama-bench for bench_vs_llamacpp_test (a few minutes on 2 cores, once; the main
# job does not need it, so scripts/setup.sh does not build it).
bash scripts/setup_llamacpp.sh ||
  echo "test: building llama.cpp failed; bench_vs_llamacpp_test will skip"
cd build
ctest --output-on-failure -j2 --timeout 900 "$@"
