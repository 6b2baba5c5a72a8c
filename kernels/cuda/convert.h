// Element-type conversion on the device: dst[i] = src[i] for i < n, F32 -> BF16 rounds to
// nearest even (like Bf16FromFloat), BF16 -> F32 is exact, equal types copy.
#pragma once
#include <cstdint>

#include "kernels/cuda/common.h"

namespace cedar::kernels::cuda {

Status Convert(const void* src, DType src_type, void* dst, DType dst_type, int64_t n, Stream stream);

}  // namespace cedar::kernels::cuda
