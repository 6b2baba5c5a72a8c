// Device discovery, DeviceBuffer and copies (see device.h).
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/device.h"

namespace cedar::kernels::cuda {

using detail::AsCuda;
using detail::FromCuda;

Status DeviceCount(int* count) {
  *count = 0;
  return FromCuda(cudaGetDeviceCount(count));
}

Status GetDeviceInfo(int ordinal, DeviceInfo* info) {
  cudaDeviceProp p{};
  CEDAR_CUDA_TRY(FromCuda(cudaGetDeviceProperties(&p, ordinal)));
  info->name = p.name;
  info->major = p.major;
  info->minor = p.minor;
  info->multiprocessors = p.multiProcessorCount;
  info->global_bytes = p.totalGlobalMem;
  info->l2_bytes = size_t(p.l2CacheSize);
  return {};
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_) cudaFree(ptr_);
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (ptr_) cudaFree(ptr_);
    ptr_ = o.ptr_, bytes_ = o.bytes_;
    o.ptr_ = nullptr, o.bytes_ = 0;
  }
  return *this;
}

Status DeviceBuffer::Allocate(size_t bytes) {
  if (ptr_) cudaFree(ptr_);
  ptr_ = nullptr, bytes_ = 0;
  if (bytes == 0) return {};
  CEDAR_CUDA_TRY(FromCuda(cudaMalloc(&ptr_, bytes)));
  bytes_ = bytes;
  return {};
}

Status CopyToDevice(void* dst, const void* src, size_t bytes) {
  return bytes ? FromCuda(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice)) : Status{};
}
Status CopyToHost(void* dst, const void* src, size_t bytes) {
  return bytes ? FromCuda(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost)) : Status{};
}
Status CopyToDeviceAsync(void* dst, const void* src, size_t bytes, Stream stream) {
  return bytes ? FromCuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, AsCuda(stream))) : Status{};
}
Status CopyToHostAsync(void* dst, const void* src, size_t bytes, Stream stream) {
  return bytes ? FromCuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, AsCuda(stream))) : Status{};
}
Status CopyOnDeviceAsync(void* dst, const void* src, size_t bytes, Stream stream) {
  return bytes ? FromCuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, AsCuda(stream))) : Status{};
}
Status MemsetAsync(void* dst, int byte, size_t bytes, Stream stream) {
  return bytes ? FromCuda(cudaMemsetAsync(dst, byte, bytes, AsCuda(stream))) : Status{};
}
Status Synchronize(Stream stream) { return FromCuda(cudaStreamSynchronize(AsCuda(stream))); }

}  // namespace cedar::kernels::cuda
