// Device discovery and device memory for host code that includes no CUDA header (the engine,
// the GPU tests): a move-only owning buffer and synchronous or stream-ordered copies.
#pragma once
#include <cstddef>
#include <string>

#include "kernels/cuda/common.h"

namespace cedar::kernels::cuda {

// Number of CUDA devices. Fails (kCuda) on a machine with no driver or no device, which the GPU
// tests turn into a skip.
Status DeviceCount(int* count);

// What the benchmark and the logs print about device `ordinal`.
struct DeviceInfo {
  std::string name;
  int major = 0, minor = 0;        // compute capability
  int multiprocessors = 0;
  size_t global_bytes = 0;
  size_t l2_bytes = 0;
};
Status GetDeviceInfo(int ordinal, DeviceInfo* info);

// An owning device allocation (cudaMalloc). Move-only; the destructor frees (cudaFree, which
// waits for the device).
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) { o.ptr_ = nullptr, o.bytes_ = 0; }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  // Frees what this holds, then allocates `bytes` (0 allowed: holds nullptr).
  Status Allocate(size_t bytes);
  void* get() const { return ptr_; }
  template <typename T>
  T* as() const { return static_cast<T*>(ptr_); }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// Synchronous copies (they wait for all earlier work on the device).
Status CopyToDevice(void* dst, const void* src, size_t bytes);
Status CopyToHost(void* dst, const void* src, size_t bytes);
// Stream-ordered: queued on `stream`; host memory must stay valid until the stream is synchronised.
Status CopyToDeviceAsync(void* dst, const void* src, size_t bytes, Stream stream);
Status CopyToHostAsync(void* dst, const void* src, size_t bytes, Stream stream);
Status MemsetAsync(void* dst, int byte, size_t bytes, Stream stream);
// Device to device, stream-ordered. The two ranges must not overlap.
Status CopyOnDeviceAsync(void* dst, const void* src, size_t bytes, Stream stream);
// Waits for everything queued on `stream`, and reports an error raised inside a kernel.
Status Synchronize(Stream stream);

}  // namespace cedar::kernels::cuda
