// Shared vocabulary of the CUDA kernels: element types, the launcher status, the stream handle
// and host-side BF16 conversion. Host-only: includes no CUDA header, so engine code (compiled
// by the host compiler) can include every kernels/cuda/*.h. The headers are C++17 (what nvcc
// compiles the .cu files as) and C++20.
//
// Conventions of every launcher in kernels/cuda/:
//   - pointers are device pointers unless a comment says otherwise; row-major, weights [out, in];
//   - work is queued on `stream` (a cudaStream_t passed as void*, nullptr = the default stream)
//     and the launcher returns without waiting; a returned error is a launch or argument error,
//     an error inside a kernel shows up at the next synchronisation;
//   - "equals ref::X" means the same function as cedar::kernels::ref::X (kernels/ops.h) up to
//     F32 rounding (F32 accumulation everywhere; BF16 only where a dtype says so).
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace cedar::kernels::cuda {

// Element type of a tensor in device memory.
enum class DType : uint8_t { kF32, kBF16 };

inline size_t SizeOf(DType t) { return t == DType::kF32 ? 4 : 2; }
inline const char* Name(DType t) { return t == DType::kF32 ? "f32" : "bf16"; }

// A cudaStream_t; nullptr is the legacy default stream.
using Stream = void*;

// What a launcher returns: ok, a bad argument (checked before anything is queued), or the code
// of the CUDA runtime (cudaError_t) or cuBLAS (cublasStatus_t) call that failed.
struct Status {
  enum Kind : uint8_t { kOk, kInvalidArgument, kCuda, kCublas };
  Kind kind = kOk;
  int code = 0;            // cudaError_t or cublasStatus_t; 0 when kOk or kInvalidArgument
  const char* what = "";   // static text: the failed call's message or the violated precondition

  bool ok() const { return kind == kOk; }
  std::string ToString() const {
    static const char* kKinds[] = {"ok", "invalid argument", "CUDA error", "cuBLAS error"};
    std::string s = kKinds[kind];  // appends only: GCC 12 warns (-Wrestrict) on "x" + string
    if (kind == kCuda || kind == kCublas) s.append(" ").append(std::to_string(code));
    if (*what) s.append(": ").append(what);
    return s;
  }
};

// BF16 <-> F32 on the host (round to nearest even, NaN kept a NaN), bit-identical to the
// device's __float2bfloat16_rn / __bfloat162float.
inline uint16_t Bf16FromFloat(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  if ((b & 0x7fffffffu) > 0x7f800000u) return uint16_t((b >> 16) | 0x40u);  // quiet NaN
  b += 0x7fffu + ((b >> 16) & 1u);
  return uint16_t(b >> 16);
}
inline float FloatFromBf16(uint16_t h) {
  const uint32_t b = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

}  // namespace cedar::kernels::cuda
