#!/usr/bin/env bash
# Runs the gpu tests against a CPU emulation of CUDA (emu_cuda.h): checks the kernels' logic,
# the CUDA engine (engine/cuda/) and the tests themselves on a machine without a GPU. Slow
# (every CUDA thread is a fiber); not a substitute for scripts/gpu-check.sh on a GPU.
# Usage: tests/gpu_emu/run.sh [doctest args]
#   EMU_TESTS: which binaries (default: gpu_ops_test gpu_select_test gpu_attention_moe_test gpu_model_test
#              gpu_session_test)
#   EMU_BUILD: object directory (default /tmp/cedar-gpu-emu); EMU_FLAGS: extra compiler flags
# The model-level tests (gpu_model_test, gpu_session_test) run with CEDAR_GPU_QUICK=1 (fewer
# lengths) unless CEDAR_GPU_QUICK=0 is set.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
emu="$root/tests/gpu_emu"
out=${EMU_BUILD:-/tmp/cedar-gpu-emu}
tests=(${EMU_TESTS:-gpu_ops_test gpu_select_test gpu_attention_moe_test gpu_model_test gpu_session_test})
model_tests=" gpu_model_test gpu_session_test "  # linked against the engine (and the session layer)
mkdir -p "$out/src" "$out/engine"
# The .cu files as C++: kernel launches become emu::Launch calls, dynamic shared memory a pointer.
for f in "$root"/kernels/cuda/*.cu; do
  python3 - "$f" "$out/src/$(basename "${f%.cu}").cpp" <<'PY'
import re, sys
s = open(sys.argv[1]).read()
s = re.sub(r'extern __shared__ (\w+) (\w+)\[\];', r'\1* \2 = EMU_DYN_SHARED(\1);', s)
s = re.sub(r'([A-Za-z_][\w:]*(?:<[^<>;]*>)?)<<<(.*?)>>>\(', r'::emu::Launch(\2, \1, ', s, flags=re.S)
try:
    if open(sys.argv[2]).read() == s: sys.exit(0)  # unchanged: keep its object file
except FileNotFoundError:
    pass
open(sys.argv[2], 'w').write(s)
PY
done
flags=(-std=c++20 -O1 -g -I"$emu" -I"$root" ${EMU_FLAGS:-})
# compile <source> <object> <flags...>: only when the source (or the emulator) is newer.
compile() {
  local f=$1 o=$2; shift 2
  if [[ ! -f "$o" || "$f" -nt "$o" || "$emu/emu_cuda.h" -nt "$o" ]]; then g++ "$@" -c "$f" -o "$o"; fi
}
objs=()
for f in "$out"/src/*.cpp "$root"/tests/gpu_test_main.cpp; do
  o="$out/$(basename "${f%.cpp}").o"
  compile "$f" "$o" "${flags[@]}"
  objs+=("$o")
done
# The scalar references (ref::MatmulMany calls ref::MatmulW on typed weights, which decodes FP8/FP4).
ref_objs=()
for f in reference_ops weight_view_ref quant_formats; do
  compile "$root/kernels/$f.cpp" "$out/$f.o" "${flags[@]}"
  ref_objs+=("$out/$f.o")
done

# The engine with its CUDA backend, as the CMake build compiles it but against the emulator's
# kernels (plain C++: engine code sees only the host-only kernels/cuda headers). Headers are
# not tracked: a header change needs EMU_BUILD cleared (or the touched .cpp files).
engine_objs=()
session_objs=()
need_engine=0
for t in "${tests[@]}"; do [[ $model_tests == *" $t "* ]] && need_engine=1; done
if [[ $need_engine == 1 ]]; then
  blas_inc=$(ls -d /usr/include/x86_64-linux-gnu/openblas-pthread /usr/include/openblas 2>/dev/null | head -1 || true)
  eflags=(-std=c++20 -O2 -g -march=native -fopenmp-simd -I"$root" -I"$blas_inc" -DCEDAR_HAVE_CUDA
          -DSPDLOG_COMPILED_LIB -DSPDLOG_FMT_EXTERNAL -DSPDLOG_SHARED_LIB -DFMT_SHARED
          -DCEDAR_SOURCE_DIR="\"$root\"" ${EMU_FLAGS:-})
  for f in "$root"/engine/*.cpp "$root"/engine/cuda/*.cpp "$root"/kernels/*.cpp "$root"/tests/test_models.cpp; do
    case $(basename "$f") in reference_ops.cpp|weight_view_ref.cpp|quant_formats.cpp) continue ;; esac  # in ref_objs
    o="$out/engine/$(basename "$(dirname "$f")")_$(basename "${f%.cpp}").o"
    compile "$f" "$o" "${eflags[@]}"
    engine_objs+=("$o")
  done
  # The prefix cache and the session layer: host code, built only for gpu_session_test.
  if [[ " ${tests[*]} " == *" gpu_session_test "* ]]; then
    for f in "$root"/cache/*.cpp "$root"/session/*.cpp; do
      o="$out/engine/$(basename "$(dirname "$f")")_$(basename "${f%.cpp}").o"
      compile "$f" "$o" "${eflags[@]}"
      session_objs+=("$o")
    done
  fi
fi

rc=0
for t in "${tests[@]}"; do
  if [[ $model_tests == *" $t "* ]]; then
    compile "$root/tests/$t.cpp" "$out/engine/tests_$t.o" "${eflags[@]}"
    extra=()
    [[ $t == gpu_session_test ]] && extra=("${session_objs[@]}" -llmdb)
    g++ "${flags[@]}" "$out/engine/tests_$t.o" "${engine_objs[@]}" "${extra[@]}" "${objs[@]}" "${ref_objs[@]}" \
      -o "$out/$t" -lopenblas -lspdlog -lfmt -lxxhash -lpthread
    echo "== $t (emulated)"
    CEDAR_GPU_QUICK=${CEDAR_GPU_QUICK:-1} "$out/$t" "$@" || rc=1
  else
    g++ "${flags[@]}" "$root/tests/$t.cpp" "${objs[@]}" "${ref_objs[@]}" -o "$out/$t"
    echo "== $t (emulated)"
    "$out/$t" "$@" || rc=1
  fi
done
exit $rc
