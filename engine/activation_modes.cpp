#include "engine/activation_modes.h"

#include <spdlog/spdlog.h>

#include "kernels/ops.h"

namespace cedar {

void EnableInt8Activations() {
  if (!kernels::Int8ActivationsVectorised()) {
    spdlog::warn("--int8-activations: no kernel for 8-bit activations runs here (this build has neither the AVX-512 VNNI nor "
                 "the AVX2 one, or it was built without -march and this CPU lacks AVX2 or CEDAR_NO_AVX2 is set); "
                 "decode keeps F32 activations (the scalar reference loop would run it far slower)");
    return;
  }
  kernels::SetInt8Activations(true);
}

void EnableBf16Activations() {
  if (!kernels::Bf16ActivationsVectorised()) {
    spdlog::warn("--bf16-activations: this build has no AVX-512 BF16 + VBMI kernel (a native build on a CPU with avx512_bf16 "
                 "and avx512vbmi has it); decode keeps F32 activations (the scalar loop would run it 50-100x slower)");
    return;
  }
  kernels::SetBf16Activations(true);
}

}  // namespace cedar
