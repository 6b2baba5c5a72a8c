#!/usr/bin/env bash
# Runs the gpu tests against a CPU emulation of CUDA (emu_cuda.h): checks the kernels' logic
# and the tests themselves on a machine without a GPU. Slow (every CUDA thread is a fiber);
# not a substitute for scripts/gpu-check.sh on a GPU. Usage: tests/gpu_emu/run.sh [doctest args]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
emu="$root/tests/gpu_emu"
out=${EMU_BUILD:-/tmp/cedar-gpu-emu}
mkdir -p "$out/src"
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
objs=()
for f in "$out"/src/*.cpp "$root"/tests/gpu_test_main.cpp "$root"/kernels/reference_ops.cpp; do
  o="$out/$(basename "${f%.cpp}").o"
  if [[ ! -f "$o" || "$f" -nt "$o" || "$emu/emu_cuda.h" -nt "$o" ]]; then g++ "${flags[@]}" -c "$f" -o "$o"; fi
  objs+=("$o")
done
rc=0
for t in gpu_ops_test gpu_select_test gpu_attention_moe_test; do
  g++ "${flags[@]}" "$root/tests/$t.cpp" "${objs[@]}" -o "$out/$t"
  echo "== $t (emulated)"
  "$out/$t" "$@" || rc=1
done
exit $rc
