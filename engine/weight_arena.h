// Anonymous memory for the model's weights, in 2 MiB pages where the kernel allows
// (transparent huge pages via madvise). Decode streams every active weight once per token; out
// of 4 KiB file pages each page costs a TLB walk and restarts the hardware prefetcher, which
// measured 4-10% of the matrix-vector rate on the benchmark VM (README, Benchmarks).
#pragma once
#include <cstddef>

namespace cedar {

class WeightArena {
 public:
  // Reserves `bytes` (rounded up to whole 2 MiB pages). Throws std::runtime_error if the
  // kernel refuses the mapping.
  explicit WeightArena(size_t bytes);
  ~WeightArena();
  WeightArena(const WeightArena&) = delete;
  WeightArena& operator=(const WeightArena&) = delete;

  // The next `n` floats, 64-byte aligned; throws std::logic_error past the reservation.
  float* Allocate(size_t n);
  // Whether the kernel accepted the request for huge pages (it may still back part of the
  // range with small ones).
  bool huge_pages_requested() const { return huge_; }

 private:
  void* map_ = nullptr;    // the whole mapping (for munmap)
  size_t map_bytes_ = 0;
  char* base_ = nullptr;   // 2 MiB aligned start inside the mapping
  size_t capacity_ = 0, used_ = 0;
  bool huge_ = false;
};

}  // namespace cedar
