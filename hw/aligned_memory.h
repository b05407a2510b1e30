// aligned_memory.h: the allocation rule for the CPU engine's and the probes' large arrays (KV
// pools, weights, bandwidth arrays).
//
// Arrays of at least 2 MiB are 2 MiB-aligned and advised into transparent huge pages
// (madvise(MADV_HUGEPAGE); advice only: a kernel with THP off, or out of huge pages, gives 4 KiB
// pages and nothing else changes). A paged KV pool is read in scattered 16-token blocks; with
// 4 KiB pages nearly every block is a TLB miss of its own, and software prefetches that miss the
// TLB may be dropped, so decode then runs at a fraction of the bandwidth the kernel benchmarks
// (which allocate the same way) report. Smaller arrays are 64-byte aligned (AVX-512 loads).
// Cost: one aligned_alloc and one madvise; the pages are not touched here.
#pragma once

#include <cstddef>

namespace feather::hw {

inline constexpr size_t kHugePageBytes = size_t{2} << 20;

// Allocates at least `bytes` (≥ 1) as described above; free with std::free. Throws
// std::bad_alloc when the allocation fails.
[[nodiscard]] void* AllocateLargeArray(size_t bytes);

}  // namespace feather::hw
