// Helpers of the GPU op tests (label gpu): device tensors from host vectors, dtype-derived
// tolerances, and the worst-element report of tests/kernels_test.cpp. Host-only: like the
// engine, the tests see kernels/cuda/*.h and no CUDA header.
#pragma once
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_ops.h"

namespace gpu_test {

namespace cu = cedar::kernels::cuda;
using cu::DType;

// Fails the test case with the launcher's status text.
#define GPU_REQUIRE_OK(expr)                          \
  do {                                                \
    const ::cedar::kernels::cuda::Status st_ = (expr); \
    INFO(#expr << " -> " << st_.ToString());          \
    REQUIRE(st_.ok());                                \
  } while (0)

// Machine epsilon of a dtype: F32 2^-23, BF16 2^-7.
inline double Eps(DType t) { return t == DType::kF32 ? std::numeric_limits<float>::epsilon() : 1.0 / 128; }
// Relative rounding of storing a result in `t`: 0 for F32 (covered by the F32 term), eps/2 for BF16.
inline double StoreEps(DType t) { return t == DType::kF32 ? 0.0 : Eps(t) / 2; }

inline std::vector<float> Random(size_t n, uint64_t seed, float scale = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// The values `t` can hold: what the device sees after Upload, so the reference sees it too.
inline std::vector<float> RoundTo(std::vector<float> v, DType t) {
  if (t == DType::kBF16)
    for (float& x : v) x = cu::FloatFromBf16(cu::Bf16FromFloat(x));
  return v;
}

// A device tensor.
struct Dev {
  cu::DeviceBuffer buf;
  DType type = DType::kF32;
  size_t n = 0;
  void* p() const { return buf.get(); }
  float* f32() const { return buf.as<float>(); }
  int32_t* i32() const { return buf.as<int32_t>(); }
};

inline Dev Upload(const std::vector<float>& v, DType t) {
  Dev d;
  d.type = t;
  d.n = v.size();
  GPU_REQUIRE_OK(d.buf.Allocate(v.size() * cu::SizeOf(t)));
  if (t == DType::kF32) {
    GPU_REQUIRE_OK(cu::CopyToDevice(d.p(), v.data(), v.size() * 4));
  } else {
    std::vector<uint16_t> h(v.size());
    for (size_t i = 0; i < v.size(); ++i) h[i] = cu::Bf16FromFloat(v[i]);
    GPU_REQUIRE_OK(cu::CopyToDevice(d.p(), h.data(), h.size() * 2));
  }
  return d;
}

// An output tensor filled with NaN, so an element the kernel never writes fails the check.
inline Dev Poisoned(size_t n, DType t) {
  return Upload(std::vector<float>(n, std::numeric_limits<float>::quiet_NaN()), t);
}

template <typename T>
Dev UploadRaw(const std::vector<T>& v) {
  Dev d;
  d.n = v.size();
  GPU_REQUIRE_OK(d.buf.Allocate(v.size() * sizeof(T)));
  GPU_REQUIRE_OK(cu::CopyToDevice(d.p(), v.data(), v.size() * sizeof(T)));
  return d;
}

inline std::vector<float> Download(const Dev& d) {
  GPU_REQUIRE_OK(cu::Synchronize(nullptr));
  std::vector<float> v(d.n);
  if (d.type == DType::kF32) {
    GPU_REQUIRE_OK(cu::CopyToHost(v.data(), d.p(), d.n * 4));
  } else {
    std::vector<uint16_t> h(d.n);
    GPU_REQUIRE_OK(cu::CopyToHost(h.data(), d.p(), d.n * 2));
    for (size_t i = 0; i < d.n; ++i) v[i] = cu::FloatFromBf16(h[i]);
  }
  return v;
}

template <typename T>
std::vector<T> DownloadRaw(const Dev& d, size_t n) {
  GPU_REQUIRE_OK(cu::Synchronize(nullptr));
  std::vector<T> v(n);
  GPU_REQUIRE_OK(cu::CopyToHost(v.data(), d.p(), n * sizeof(T)));
  return v;
}

// Element-wise check with tolerance tol_scale · (1 + |expected|); tol_scale is a dtype epsilon
// times the growth of the op's reduction. A failure names the worst element, both values and
// its error over the tolerance; NaN (an unwritten, poisoned element) always fails.
inline void ExpectClose(const std::string& what, const std::vector<float>& got, const std::vector<float>& want,
                        double tol_scale) {
  REQUIRE(got.size() == want.size());
  double worst = 0;
  size_t at = 0;
  bool ok = true;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(double(got[i]) - want[i]);
    const double tol = tol_scale * (1.0 + std::fabs(want[i]));
    const double ratio = std::isnan(err) ? std::numeric_limits<double>::infinity() : err / tol;
    if (!(err <= tol)) ok = false;
    if (ratio > worst) worst = ratio, at = i;
  }
  INFO(what << ": worst element " << at << " of " << got.size() << ": got " << (got.empty() ? 0 : got[at])
            << " expected " << (want.empty() ? 0 : want[at]) << " (error/tolerance " << worst << ")");
  CHECK(ok);
}

inline std::string Str(DType t) { return cu::Name(t); }

const int kSizes[] = {0, 1, 2, 3, 7, 8, 15, 16, 17, 31, 64, 100, 129};  // as tests/kernels_test.cpp

}  // namespace gpu_test
