// Main of every GPU test binary: exits 77 (registered as ctest's SKIP_RETURN_CODE) with a
// message when there is no usable CUDA device, so a CPU-only machine reports the gpu tests
// as skipped rather than failed; otherwise runs the doctest cases.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>

#include "kernels/cuda/device.h"

int main(int argc, char** argv) {
  namespace cu = cedar::kernels::cuda;
  int count = 0;
  const cu::Status st = cu::DeviceCount(&count);
  if (!st.ok() || count == 0) {
    std::printf("SKIP: no CUDA device (cudaGetDeviceCount: %s; %d devices); the gpu tests need an NVIDIA GPU\n",
                st.ToString().c_str(), count);
    return 77;
  }
  cu::DeviceInfo info;
  if (cu::GetDeviceInfo(0, &info).ok())
    std::printf("device 0: %s, compute capability %d.%d, %d SMs, %.1f GiB\n", info.name.c_str(), info.major,
                info.minor, info.multiprocessors, double(info.global_bytes) / (1 << 30));
  doctest::Context ctx(argc, argv);
  return ctx.run();
}
