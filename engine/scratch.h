// Buffers the engine fills completely before it reads them (matmul outputs, gathered rows):
// std::vector<float>(n) zeroes its n floats first, which was ~3% of a 512-token prefill's
// samples (memset) for values that were overwritten right after. Scratch<T>(n) leaves them
// unset, so only use it where every element is written before any is read.
#pragma once
#include <memory>
#include <vector>

namespace cedar {

// std::allocator whose value-initialisation (vector(n), resize(n)) is default-initialisation:
// no zeroing for trivial types.
template <class T>
struct NoInitAllocator : std::allocator<T> {
  template <class U>
  struct rebind {
    using other = NoInitAllocator<U>;
  };
  NoInitAllocator() = default;
  template <class U>
  NoInitAllocator(const NoInitAllocator<U>&) noexcept {}
  template <class U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;
  }
  template <class U, class... A>
  void construct(U* p, A&&... a) {
    ::new (static_cast<void*>(p)) U(std::forward<A>(a)...);
  }
};

template <class T>
using Scratch = std::vector<T, NoInitAllocator<T>>;

}  // namespace cedar
