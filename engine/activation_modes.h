// The decode products' activation modes, set once from the command line (--int8-activations,
// --bf16-activations on `generate`, `serve` and `bench`). Each flag exists for speed, so where this
// build has no vector kernel for it the mode stays off with a warning and decode keeps F32
// activations: the kernels' scalar reference loop would give the flag's results 50-100x slower
// (docs/WEIGHTS.md, session 40), which nobody asking for a faster decode wants. The kernel tests
// still run that loop through kernels::SetInt8Activations / SetBf16Activations directly.
#pragma once

namespace cedar {

// INT8 and FP4 decode products on 8-bit activations (kernels::SetInt8Activations), where this build
// has the AVX-512 VNNI or AVX2 kernel.
void EnableInt8Activations();
// FP8, FP4 and INT8 decode products on BF16 activations (kernels::SetBf16Activations), where this
// build has the AVX-512 BF16 + VBMI kernel.
void EnableBf16Activations();

}  // namespace cedar
