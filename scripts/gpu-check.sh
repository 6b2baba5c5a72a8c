#!/usr/bin/env bash
# shellcheck disable=SC2317  # the configure_* functions are called indirectly, as "configure_$m"
# GPU check, for a machine with an NVIDIA GPU: builds the CUDA kernels and engine in build-gpu/,
# runs every `gpu` test (ctest -L gpu: the kernel tests, the model and session parity tests), then
# the kernel benchmark (bench.jsonl: the measured copy bandwidth and cuBLAS BF16 GEMM rate first,
# then each kernel against them) and the end-to-end engine benchmark on the GPU (engine.jsonl:
# prefill tokens/s full vs bounded and decode tokens/s at batch 1 and 32, on `small` (131M
# parameters) and `medium` (1.2B), with the device's GEMM rate and bandwidth measured first).
#
# Which build, in this order (GPU_CHECK_MODE=full|engine|standalone forces one):
#  - full: the whole project, when its CPU dependencies are installed system-wide; the engine
#    benchmark is `cedar bench`.
#  - engine: CEDAR_ENGINE_ONLY (kernels, engine, CUDA, the gpu tests, bench/bench_engine, and the
#    cache and session layer when LMDB is there; no Boost or pkg-config), against the Debian
#    packages in .gpu-deps/ that scripts/gpu-deps.sh downloaded on a Debian machine, unpacked here
#    under $GPU_DEPS_PREFIX (default /tmp/cedar-gpu-deps; only under /tmp), found through
#    CMAKE_PREFIX_PATH and run with LD_LIBRARY_PATH. This is the path on the device tool's H200 (docs/GPU.md).
#  - standalone: the kernels/cuda project, which needs only the CUDA toolkit and doctest's header
#    (system-wide, or .deps/include/doctest/doctest.h): only the kernel tests and the kernel
#    benchmark run, and the script exits 1.
# Logs go to $OUT when it is set (the device tool brings that folder back), else build-gpu/logs.
# Exit status: 0 when the tests passed and both benchmarks ran; nonzero otherwise.
#   JOBS (default: all cores), BUILD_DIR (default: build-gpu), BENCH_REPS (default: 20),
#   ENGINE_BENCH=0 skips the engine benchmark, GPU_CHECK_BUDGET_S (default 450): the tests and
#   benchmarks are cut (timeout) so that the script ends, summary written, within this many
#   seconds of its start. GPU_CHECK_CMAKE_ARGS: more -D arguments for the engine configure (e.g.
#   the static OpenBLAS: docs/GPU.md, "How to run the check").
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

# Configure: the full project, else the engine alone against .gpu-deps, else the kernels alone.
deps_dir=${GPU_DEPS_DIR:-$root/.gpu-deps}
deps_prefix=${GPU_DEPS_PREFIX:-/tmp/cedar-gpu-deps}
want=${GPU_CHECK_MODE:-auto}
configure_full() {
  cmake -S "$root" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DCEDAR_CUDA=ON >>"$logs/configure.log" 2>&1
}
configure_engine() {
  local prefix_args=()
  if compgen -G "$deps_dir/*.deb" >/dev/null; then
    case $deps_prefix in /tmp/?*|/var/tmp/?*) ;; *) echo "GPU_DEPS_PREFIX must be under /tmp: $deps_prefix"; return 1;; esac
    rm -rf "$deps_prefix"
    GPU_DEPS_DIR=$deps_dir bash "$root/scripts/gpu-deps.sh" --unpack "$deps_prefix" >>"$logs/configure.log" 2>&1 || return 1
    local lib=$deps_prefix/usr/lib/x86_64-linux-gnu
    export LD_LIBRARY_PATH=$lib:$lib/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    prefix_args=(-DCMAKE_PREFIX_PATH="$deps_prefix/usr")
    deps_used="$deps_dir unpacked in $deps_prefix"
  else
    deps_used="system libraries (no $deps_dir/*.deb)"
  fi
  # shellcheck disable=SC2086  # GPU_CHECK_CMAKE_ARGS is a list of arguments, split on spaces
  cmake -S "$root" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DCEDAR_CUDA=ON \
    -DCEDAR_ENGINE_ONLY=ON "${prefix_args[@]}" ${GPU_CHECK_CMAKE_ARGS:-} >>"$logs/configure.log" 2>&1
}
configure_standalone() {
  cmake -S "$root/kernels/cuda" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release >>"$logs/configure.log" 2>&1
}
: >"$logs/configure.log"
mode=
deps_used=system
for m in full engine standalone; do
  [[ $want == auto || $want == "$m" ]] || continue
  [[ $want == auto && $m == engine ]] && ! compgen -G "$deps_dir/*.deb" >/dev/null && continue
  # A fresh build folder for each try (keeping the logs when they live in it).
  [[ -d $build ]] && find "$build" -mindepth 1 -maxdepth 1 ! -path "$logs" -exec rm -rf {} +
  mkdir -p "$logs"
  echo "== gpu-check: configuring the $m build" >>"$logs/configure.log"
  if "configure_$m"; then mode=$m; break; fi
done
if [[ -z $mode ]]; then
  say "configure failed (see configure.log)"
  tail -30 "$logs/configure.log"
  exit 2
fi
[[ $mode == engine ]] && say "engine-only build against $deps_used"
say "configured ($mode build, $(nvcc --version | grep -o 'release [0-9.]*')) in $(( $(date +%s) - start )) s"

targets=(gpu_bench)
if grep -q "gpu_ops_test" "$build/CMakeCache.txt" "$build"/build.ninja "$build"/Makefile 2>/dev/null; then
  # Every test labelled gpu (its target has the test's name), and the engine benchmark's binary.
  mapfile -t gpu_tests < <(ctest --test-dir "$build" -N -L gpu | awk '/Test +#[0-9]+:/ {print $3}')
  targets+=("${gpu_tests[@]}")
  [[ $mode == full ]] && targets+=(cedar)
  [[ $mode == engine ]] && targets+=(bench_engine)
else
  say "the gpu tests are not configured (doctest missing?): building the benchmark only"
fi
t0=$(date +%s)
# Keep going past a failing target (ninja -k 0, make -k), so one that fails to compile or link
# still leaves the others to run: its test then reports "Not Run" and the check fails.
keep_going=(-k)
[[ ${#generator[@]} -gt 0 ]] && keep_going=(-k 0)
build_status=0
cmake --build "$build" -j "$jobs" --target "${targets[@]}" -- "${keep_going[@]}" >"$logs/build.log" 2>&1 || build_status=1
if (( build_status )); then
  say "build FAILED for some targets in $(( $(date +%s) - t0 )) s (see build.log); running what was built"
  grep -E 'error|FAILED' "$logs/build.log" | head -20
else
  say "built ${targets[*]} with -j$jobs in $(( $(date +%s) - t0 )) s"
fi
engine_bench=()
[[ $mode == full ]] && engine_bench=("$build/cedar" bench)
[[ $mode == engine ]] && engine_bench=("$build/bench/bench_engine")
[[ ${#engine_bench[@]} -gt 0 && ! -x ${engine_bench[0]} ]] && engine_bench=()
if (( ${#engine_bench[@]} )); then
  # Where the engine's libraries come from (the engine build: the unpacked prefix).
  { echo "== ldd ${engine_bench[0]}"; ldd "${engine_bench[0]}"; } >>"$logs/build.log" 2>&1
  say "libraries: $(ldd "${engine_bench[0]}" 2>&1 | grep -E 'openblas|spdlog|fmt|xxhash|gfortran|not found' | awk '{print $1 " -> " $3}' | tr '\n' ' ')"
fi

# Each step below is cut so that the script ends, with its summary, inside the budget.
budget=${GPU_CHECK_BUDGET_S:-450}
left() { echo $(( budget - ($(date +%s) - start) )); }
limited() {  # limited MIN_S CMD...: CMD under a timeout of what is left (minus 10 s for the summary)
  local s=$(( $(left) - 10 )) min=$1; shift
  if (( s < min )); then echo "gpu-check: skipped, ${s} s left of the ${budget} s budget: $*"; return 124; fi
  timeout -k 5 "$s" "$@"
}

status=$build_status
if (( ${#targets[@]} > 1 )); then
  t0=$(date +%s)
  limited 30 ctest --test-dir "$build" -L gpu --output-on-failure >"$logs/ctest.log" 2>&1 || status=1
  tail -25 "$logs/ctest.log"
  if grep -q "Skipped" "$logs/ctest.log"; then say "gpu tests SKIPPED (no usable device?)"; status=1; fi
  say "ctest -L gpu: $( ((status)) && echo FAILED || echo passed) in $(( $(date +%s) - t0 )) s ($(grep -E 'tests passed|tests failed' "$logs/ctest.log" | tail -1); skipped counts as failed)"
else
  status=1
fi

bench=$(find "$build" -name gpu_bench -type f -perm -u+x | head -1)
t0=$(date +%s)
if [[ -n $bench ]] && limited 20 "$bench" "${BENCH_REPS:-20}" >"$logs/bench.jsonl" 2>&1; then
  say "benchmark: $(wc -l <"$logs/bench.jsonl") JSON lines in $(( $(date +%s) - t0 )) s"
else
  say "benchmark failed or skipped (see bench.jsonl)"
  status=1
fi
cat "$logs/bench.jsonl" 2>/dev/null

# End to end on the GPU: the engine benchmark (full and engine builds), small then medium.
if (( ${#engine_bench[@]} )) && [[ ${ENGINE_BENCH:-1} != 0 ]]; then
  t0=$(date +%s)
  : >"$logs/engine.jsonl"
  ok=1
  limited 30 "${engine_bench[@]}" --device cuda --preset small --lengths 512,4096,16384 --decode 32 --decode-batch 1,32 \
    >>"$logs/engine.jsonl" 2>&1 || ok=0
  limited 60 "${engine_bench[@]}" --device cuda --preset medium --lengths 4096,16384 --decode 16 --decode-batch 1,32 \
    >>"$logs/engine.jsonl" 2>&1 || ok=0
  (( ok )) || status=1
  say "engine benchmark: $([[ $ok == 1 ]] && echo ran || echo FAILED) in $(( $(date +%s) - t0 )) s (engine.jsonl)"
  cat "$logs/engine.jsonl"
else
  say "engine benchmark not run ($mode build$([[ ${ENGINE_BENCH:-1} == 0 ]] && echo ', ENGINE_BENCH=0')$([[ $mode != standalone && ${ENGINE_BENCH:-1} != 0 ]] && echo ', its binary did not build'))"
  status=1
fi
say "total $(( $(date +%s) - start )) s, exit $status"
exit $status
