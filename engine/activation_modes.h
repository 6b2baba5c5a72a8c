// The decode products' activation modes, set once from the command line (--int8-activations,
// --bf16-activations on `generate`, `serve` and `bench`): each turns its kernels:: mode on and
// warns where this build has no vector kernel for it, since the scalar reference loop then runs
// the products (the same results, a far slower decode).
#pragma once

namespace cedar {

// kernels::SetInt8Activations(true): INT8 and FP4 decode products on 8-bit activations.
void EnableInt8Activations();
// kernels::SetBf16Activations(true): FP8, FP4 and INT8 decode products on BF16 activations.
void EnableBf16Activations();

}  // namespace cedar
