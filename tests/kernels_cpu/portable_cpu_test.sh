#!/usr/bin/env bash
# The portable kernels (cedar_kernels_x86_64: no -march) on a CPU without AVX2, emulated by
# qemu-user (`-cpu Nehalem`: SSE4.2, no AVX). Such a build compiles its AVX2 kernels too and picks
# them at run time (kernels/avx2_runtime.h). On this machine's CPU its tests take them; here they
# must take the plain loops and still pass, and a single AVX instruction outside the runtime choice
# (an inline helper compiled for AVX2 and kept by the linker, a kernel called without the check)
# stops the test with SIGILL. Usage: portable_cpu_test.sh <build dir>. Exit 77 (skip) without
# qemu-x86_64 or the x86-64 kernel tests (CEDAR_ISA_TESTS=OFF, a non-x86 host).
set -uo pipefail
build=${1:?usage: portable_cpu_test.sh <build dir>}
# OpenBLAS picks its kernels from the emulated CPU's CPUID unless OPENBLAS_CORETYPE forces a core:
# a forced Haswell (set in some shells, this project's build machines among them) runs AVX2 code
# on the emulated Nehalem, which kernels_test's sgemm calls then die of (SIGSEGV / SIGILL under
# qemu), though Cedar's own kernels are right. The test is about Cedar's run-time choice, so
# OpenBLAS chooses from the CPU too.
unset OPENBLAS_CORETYPE
qemu=$(command -v qemu-x86_64) || { echo "SKIP: qemu-x86_64 not installed (Debian package qemu-user)"; exit 77; }
# Each kernel test, or (name|doctest test-case filter) the cases that run the run-time choice at a
# size qemu's emulation finishes in seconds: the whole of gemm_prefill_test and gemm_rowinv_test
# take 10+ minutes there. kernels_bf16a_test is left out: its kernel needs AVX-512 BF16, so the
# x86-64 build has only the plain loop, which kernels_bf16a_test_x86_64 runs natively (~10 s; ~150 s
# under qemu).
tests=(kernels_test kernels_weights_test kv_quant_test kernels_i8a8_test
       "gemm_prefill_test|GemmPrefillRows equals its scalar reference*,GemmPackedRows*"
       "gemm_rowinv_test|GemmRowInvariant equals its scalar reference*,MatVec sums*,a quantised source*")
[ -x "$build/tests/${tests[0]}_x86_64" ] || { echo "SKIP: $build/tests/${tests[0]}_x86_64 not built"; exit 77; }

# The emulated CPU must be what the test claims: no AVX2, and an AVX2 instruction must fault.
probe=$(mktemp -d)
trap 'rm -rf "$probe"' EXIT
cat > "$probe/p.c" <<'C'
#include <stdio.h>
int main(void) {
  __builtin_cpu_init();
  printf("%d\n", __builtin_cpu_supports("avx2") ? 1 : 0);
  return 0;
}
C
cc -O1 -march=x86-64 "$probe/p.c" -o "$probe/p" || exit 1
[ "$("$qemu" -cpu Nehalem "$probe/p")" = 0 ] || { echo "FAIL: qemu's Nehalem reports AVX2"; exit 1; }
cat > "$probe/a.c" <<'C'
int main(void) {
  __asm__ volatile("vpxor %ymm0, %ymm0, %ymm0");  /* AVX2 (256-bit integer) */
  return 0;
}
C
cc -O1 "$probe/a.c" -o "$probe/a" || exit 1
if "$qemu" -cpu Nehalem "$probe/a" 2>/dev/null; then echo "FAIL: an AVX2 instruction ran on qemu's Nehalem"; exit 1; fi

fail=0
for entry in "${tests[@]}"; do
  t=${entry%%|*}
  filter=()
  [[ $entry == *"|"* ]] && filter=("--test-case=${entry#*|}")
  bin="$build/tests/${t}_x86_64"
  start=$SECONDS
  if "$qemu" -cpu Nehalem "$bin" --minimal "${filter[@]}" > "$probe/out" 2>&1; then
    echo "ok   $t on Nehalem ($((SECONDS - start)) s)"
  else
    echo "FAIL $t on Nehalem:"
    tail -30 "$probe/out"
    fail=1
  fi
done
exit $fail
