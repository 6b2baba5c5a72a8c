#!/usr/bin/env bash
# GPU check, for a machine with an NVIDIA GPU: builds the CUDA kernels and engine in build-gpu/,
# runs every `gpu` test (ctest -L gpu: the kernel tests and the model-level parity test), then
# the kernel benchmark (bench.jsonl: the measured copy bandwidth and cuBLAS BF16 GEMM rate first,
# then each kernel against them) and the end-to-end engine benchmark on the GPU (engine.jsonl:
# prefill tokens/s full vs bounded and decode tokens/s at batch 1 and 32, on `small` (131M
# parameters) and `medium` (1.2B), with the device's GEMM rate and bandwidth measured first).
#
# The whole project is configured when its CPU dependencies are installed; otherwise (a bare
# GPU machine) the standalone kernels/cuda project, which needs only the CUDA toolkit and
# doctest's header (system-wide, or copied to .deps/include/doctest/doctest.h): then only the
# kernel tests and the kernel benchmark run (the engine needs spdlog, nlohmann-json, OpenBLAS,
# xxhash, LMDB and Boost; docs/GPU.md says how to bring them).
# Logs go to $OUT when it is set (the device tool brings that folder back), else build-gpu/logs.
# Exit status: 0 when the tests passed and the benchmark ran; nonzero otherwise.
#   JOBS (default: all cores), BUILD_DIR (default: build-gpu), BENCH_REPS (default: 20),
#   ENGINE_BENCH=0 skips the engine benchmark.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build-gpu}
logs=${OUT:-$build/logs}
jobs=${JOBS:-$(nproc)}
mkdir -p "$logs"
summary="$logs/summary.txt"
: >"$summary"
say() { echo "gpu-check: $*" | tee -a "$summary"; }
start=$(date +%s)

if ! command -v nvcc >/dev/null && [[ -x /usr/local/cuda/bin/nvcc ]]; then export PATH=/usr/local/cuda/bin:$PATH; fi
command -v nvcc >/dev/null || { say "no nvcc on PATH: cannot build the CUDA kernels"; exit 2; }
nvidia-smi >"$logs/nvidia-smi.txt" 2>&1 || say "nvidia-smi failed (no driver?): the tests will skip"
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)

# Configure: the full project, else the kernels alone.
mode=full
if ! cmake -S "$root" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DCEDAR_CUDA=ON >"$logs/configure.log" 2>&1; then
  mode=standalone
  rm -rf "$build"
  mkdir -p "$logs"
  if ! cmake -S "$root/kernels/cuda" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release >>"$logs/configure.log" 2>&1; then
    say "configure failed (see configure.log)"
    exit 2
  fi
fi
say "configured ($mode build, $(nvcc --version | grep -o 'release [0-9.]*')) in $(( $(date +%s) - start )) s"

targets=(gpu_bench)
if grep -q "gpu_ops_test" "$build/CMakeCache.txt" "$build"/build.ninja "$build"/Makefile 2>/dev/null; then
  targets+=(gpu_ops_test gpu_select_test gpu_attention_moe_test)
  [[ $mode == full ]] && targets+=(gpu_model_test cedar)
else
  say "the gpu tests are not configured (doctest missing?): building the benchmark only"
fi
t0=$(date +%s)
if ! cmake --build "$build" -j "$jobs" --target "${targets[@]}" >"$logs/build.log" 2>&1; then
  say "build failed (see build.log)"
  tail -40 "$logs/build.log"
  exit 2
fi
say "built ${targets[*]} with -j$jobs in $(( $(date +%s) - t0 )) s"

status=0
if (( ${#targets[@]} > 1 )); then
  t0=$(date +%s)
  ctest --test-dir "$build" -L gpu --output-on-failure >"$logs/ctest.log" 2>&1 || status=1
  tail -25 "$logs/ctest.log"
  if grep -q "Skipped" "$logs/ctest.log"; then say "gpu tests SKIPPED (no usable device?)"; status=1; fi
  say "ctest -L gpu: $([[ $status == 0 ]] && echo passed || echo FAILED) in $(( $(date +%s) - t0 )) s"
else
  status=1
fi

bench=$(find "$build" -name gpu_bench -type f -perm -u+x | head -1)
t0=$(date +%s)
if "$bench" "${BENCH_REPS:-20}" >"$logs/bench.jsonl" 2>&1; then
  say "benchmark: $(wc -l <"$logs/bench.jsonl") JSON lines in $(( $(date +%s) - t0 )) s"
else
  say "benchmark failed or skipped (see bench.jsonl)"
  status=1
fi
cat "$logs/bench.jsonl"

# End to end on the GPU: the engine benchmark (full build only), small then medium.
if [[ $mode == full && ${ENGINE_BENCH:-1} != 0 ]]; then
  t0=$(date +%s)
  : >"$logs/engine.jsonl"
  ok=1
  "$build/cedar" bench --device cuda --preset small --lengths 512,4096,16384 --decode 32 --decode-batch 1,32 \
    >>"$logs/engine.jsonl" 2>&1 || ok=0
  "$build/cedar" bench --device cuda --preset medium --lengths 4096,16384 --decode 16 --decode-batch 1,32 \
    >>"$logs/engine.jsonl" 2>&1 || ok=0
  (( ok )) || status=1
  say "engine benchmark: $([[ $ok == 1 ]] && echo ran || echo FAILED) in $(( $(date +%s) - t0 )) s (engine.jsonl)"
  cat "$logs/engine.jsonl"
else
  say "engine benchmark not run ($mode build)"
  [[ $mode == full ]] || status=1
fi
say "total $(( $(date +%s) - start )) s, exit $status"
exit $status
