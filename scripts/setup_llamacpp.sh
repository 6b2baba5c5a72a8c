#!/usr/bin/env bash
# Builds llama.cpp's llama-bench for bench/vs_llamacpp (Cedar's decode against llama.cpp's on a
# model of the same size, in the same run). The source is the llama.cpp tree that the npm package
# node-llama-cpp ships as a git bundle: the npm registry is reachable where this project builds,
# GitHub is not. Pinned: node-llama-cpp 3.22.1 carries llama.cpp de3ff81. CPU only, -march=native
# (GGML_NATIVE), as Cedar builds.
# Usage: bash scripts/setup_llamacpp.sh [OUT_DIR]   (default build/llamacpp; llama-bench lands in
# OUT_DIR/build/bin/; a second run with it present does nothing)
set -euo pipefail
cd "$(dirname "$0")/.."
NLC_VERSION=3.22.1
LLAMA_COMMIT=de3ff815ea7d559ee917f063901b8986f038abc6
out="${1:-build/llamacpp}"
if [ -x "$out/build/bin/llama-bench" ] && [ "$(cat "$out/commit" 2>/dev/null)" = "$LLAMA_COMMIT" ]; then
  exit 0
fi
for tool in npm git cmake ninja; do
  command -v "$tool" >/dev/null 2>&1 || { echo "setup_llamacpp: $tool is missing (scripts/setup.sh installs it)" >&2; exit 1; }
done
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
# npm pack checks the tarball against the registry's sha512.
(cd "$tmp" && npm pack "node-llama-cpp@$NLC_VERSION" --silent --loglevel=error >/dev/null)
tar xzf "$tmp/node-llama-cpp-$NLC_VERSION.tgz" -C "$tmp" package/llama/gitRelease.bundle
rm -rf "$out/src" "$out/build" "$out/commit"
mkdir -p "$out"
git clone -q "$tmp/package/llama/gitRelease.bundle" "$out/src" 2>/dev/null
got="$(git -C "$out/src" rev-parse HEAD)"
if [ "$got" != "$LLAMA_COMMIT" ]; then
  echo "setup_llamacpp: node-llama-cpp $NLC_VERSION's bundle is llama.cpp $got, expected $LLAMA_COMMIT" >&2
  exit 1
fi
cmake -S "$out/src" -B "$out/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
  -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
  -DLLAMA_BUILD_SERVER=OFF -DBUILD_SHARED_LIBS=OFF >/dev/null
cmake --build "$out/build" --target llama-bench -j"$(nproc)" >/dev/null
echo "$LLAMA_COMMIT" > "$out/commit"
echo "setup_llamacpp: $out/build/bin/llama-bench (llama.cpp ${LLAMA_COMMIT:0:7})"
