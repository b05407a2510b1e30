// aligned_memory.cc: see aligned_memory.h.
#include "hw/aligned_memory.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <new>

namespace feather::hw {

void* AllocateLargeArray(size_t bytes) {
  constexpr size_t kCacheLineBytes = 64;
  const bool huge = bytes >= kHugePageBytes;
  const size_t align = huge ? kHugePageBytes : kCacheLineBytes;
  const size_t rounded = (std::max<size_t>(bytes, 1) + align - 1) / align * align;
  void* p = std::aligned_alloc(align, rounded);
  if (p == nullptr) throw std::bad_alloc();
  if (huge) (void)madvise(p, rounded, MADV_HUGEPAGE);
  return p;
}

}  // namespace feather::hw
