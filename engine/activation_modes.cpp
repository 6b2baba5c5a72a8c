#include "engine/activation_modes.h"

#include <spdlog/spdlog.h>

#include "kernels/ops.h"

namespace cedar {

void EnableInt8Activations() {
  kernels::SetInt8Activations(true);
  if (!kernels::Int8ActivationsVectorised())
    spdlog::warn("--int8-activations: this build has neither the AVX-512 VNNI nor the AVX2 kernel; the products run on the scalar reference loop (same results, much slower decode)");
}

void EnableBf16Activations() {
  kernels::SetBf16Activations(true);
  if (!kernels::Bf16ActivationsVectorised())
    spdlog::warn("--bf16-activations: this build lacks the AVX-512 BF16 + VBMI kernel; the products run on the scalar reference loop (same results, much slower decode)");
}

}  // namespace cedar
