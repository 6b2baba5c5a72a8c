#!/usr/bin/env bash
# The test command: installs what is missing, builds, and runs every test ctest knows
# (labels unit, kernels, model; gpu tests are skipped where no GPU exists).
# Usage: bash scripts/test.sh [ctest args, e.g. -L unit]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cd build
ctest --output-on-failure -j2 --timeout 900 "$@"
