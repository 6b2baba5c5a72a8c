#include "engine/weight_arena.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

namespace cedar {

namespace {
constexpr size_t kHugePage = size_t(2) << 20;
size_t RoundUp(size_t n, size_t to) { return (n + to - 1) / to * to; }
}  // namespace

WeightArena::WeightArena(size_t bytes) {
  capacity_ = RoundUp(std::max<size_t>(bytes, 1), kHugePage);
  map_bytes_ = capacity_ + kHugePage;  // room to align the start to a huge page
  map_ = ::mmap(nullptr, map_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (map_ == MAP_FAILED) {
    map_ = nullptr;
    throw std::runtime_error("model: cannot reserve " + std::to_string(capacity_ >> 20) + " MiB for the weights: " +
                             std::strerror(errno) + " (--mmap-weights reads them in place from the file)");
  }
  base_ = reinterpret_cast<char*>(RoundUp(reinterpret_cast<uintptr_t>(map_), kHugePage));
#ifdef MADV_HUGEPAGE
  huge_ = ::madvise(base_, capacity_, MADV_HUGEPAGE) == 0;
#endif
}

WeightArena::~WeightArena() {
  if (map_) ::munmap(map_, map_bytes_);
}

float* WeightArena::Allocate(size_t n) {
  const size_t at = RoundUp(used_, 64), bytes = n * sizeof(float);
  if (at + bytes > capacity_) throw std::logic_error("WeightArena: allocation past the reserved size");
  used_ = at + bytes;
  return reinterpret_cast<float*>(base_ + at);
}

}  // namespace cedar
