// paged_kv.h: the paged KV cache in host memory, and the one view of it that every CPU attention
// kernel (decode, cascade, prefill) and AppendKv take.
//
// Layout. One pool holds the K (or the V) of one transformer layer for every physical page
// ("block" in vLLM's words, "page" in FlashInfer's):
//   pool[page][kv_head][token_in_page][head_dim]      ("HND" per page, as FlashInfer names it)
// so one (page, kv_head) tile of page_size × head_dim elements is contiguous and a decode kernel
// streams it with unit stride. The strides (StridePage, StrideHead, StrideToken) follow from the
// sizes; an NHD pool would change only them. Elements are fp32 or bf16 (storage only: kernels
// convert bf16 to fp32 on load and accumulate in fp32). Queries and outputs are always fp32.
//
// Block tables in CSR form, as FlashInfer's paged_kv_t lays them out: entry r (a request, or a
// shared prefix) owns the physical pages indices[indptr[r] .. indptr[r+1]) in token order, and
// its last page holds last_page_len[r] tokens (1 .. page_size), so
//   SeqLen(r) = (indptr[r+1] − indptr[r] − 1) · page_size + last_page_len[r]   (0 with no page).
// Requests that share a prefix list the same physical pages, as in vLLM. The arrays are planned
// on the host once per step (hw/plan_layout.h) and a kernel reads them as raw pointers; a
// Slice of entries [first, first + count) is the same arrays with indptr and last_page_len
// offset (indptr values index `indices` absolutely), so one step's table serves its decode
// entries, its prefill entries and its cascade prefixes without a copy.
//
// Cost: a view is a few pointers, copied by value into every params struct; Pages and SeqLen are
// O(1). AppendKv is O(count · kv_heads · head_dim).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace feather::hw {

enum class KvDtype : uint8_t { kFp32, kBf16 };

[[nodiscard]] constexpr size_t KvDtypeBytes(KvDtype dtype) {
  return dtype == KvDtype::kFp32 ? 4 : 2;
}

struct PagedKvLayout {
  uint32_t num_blocks = 0;
  uint32_t kv_heads = 0;
  uint32_t block_tokens = 16;
  uint32_t head_dim = 0;
  KvDtype dtype = KvDtype::kFp32;

  // Elements of one (block, kv_head) tile and of one block.
  [[nodiscard]] constexpr size_t TileElems() const { return size_t{block_tokens} * head_dim; }
  [[nodiscard]] constexpr size_t BlockElems() const { return TileElems() * kv_heads; }
  [[nodiscard]] constexpr size_t PoolBytes() const {
    return BlockElems() * num_blocks * KvDtypeBytes(dtype);
  }
  // Element strides of the HND layout (FlashInfer's stride_page, stride_h, stride_n).
  [[nodiscard]] constexpr size_t StridePage() const { return BlockElems(); }
  [[nodiscard]] constexpr size_t StrideHead() const { return TileElems(); }
  [[nodiscard]] constexpr size_t StrideToken() const { return head_dim; }
  // Element offset of (block, kv_head, token_in_block, 0).
  [[nodiscard]] constexpr size_t Offset(uint32_t block, uint32_t kv_head, uint32_t token) const {
    return size_t{block} * StridePage() + size_t{kv_head} * StrideHead() +
           size_t{token} * StrideToken();
  }
};

// The paged KV of a batch: both pools, their layout and the CSR block table (file comment).
// Kernels only read through it; AppendKv writes the pools. Invariants (checked by the plan that
// builds it, not per call): indptr is non-decreasing, every index < layout.num_blocks, every
// entry with pages has 1 ≤ last_page_len ≤ layout.block_tokens.
struct PagedKvView {
  void* k_data = nullptr;  // layout.PoolBytes() bytes
  void* v_data = nullptr;
  PagedKvLayout layout;
  uint32_t batch_size = 0;                  // entries
  const uint32_t* indptr = nullptr;         // [batch_size + 1]
  const uint32_t* indices = nullptr;        // [indptr[batch_size]] physical page ids
  const uint32_t* last_page_len = nullptr;  // [batch_size]

  // Entry r's physical pages, in token order.
  [[nodiscard]] const uint32_t* Pages(uint32_t r) const { return indices + indptr[r]; }
  [[nodiscard]] uint32_t NumPages(uint32_t r) const { return indptr[r + 1] - indptr[r]; }
  // Tokens of entry r.
  [[nodiscard]] uint32_t SeqLen(uint32_t r) const {
    const uint32_t pages = NumPages(r);
    return pages == 0 ? 0 : (pages - 1) * layout.block_tokens + last_page_len[r];
  }
  // Entries [first, first + count) as a view of their own (no copy).
  [[nodiscard]] PagedKvView Slice(uint32_t first, uint32_t count) const {
    PagedKvView view = *this;
    view.batch_size = count;
    view.indptr = indptr + first;
    view.last_page_len = last_page_len + first;
    return view;
  }
};

// Tokens of the last of ceil(tokens / page_size) pages: what a CSR builder stores in
// last_page_len (0 for an empty entry, which has no page).
[[nodiscard]] constexpr uint32_t LastPageLen(uint32_t tokens, uint32_t page_size) {
  return tokens == 0 ? 0 : tokens - (tokens - 1) / page_size * page_size;
}

// bf16 <-> fp32. bf16 is the upper half of an IEEE fp32; conversion to bf16 rounds to nearest
// even (NaN kept quiet), as PyTorch does.
[[nodiscard]] inline float Bf16ToFloat(uint16_t bits) {
  const uint32_t word = uint32_t{bits} << 16;
  float value;
  std::memcpy(&value, &word, sizeof value);
  return value;
}
[[nodiscard]] inline uint16_t FloatToBf16(float value) {
  uint32_t word;
  std::memcpy(&word, &value, sizeof word);
  if ((word & 0x7f800000u) == 0x7f800000u && (word & 0x007fffffu) != 0) {
    return static_cast<uint16_t>((word >> 16) | 0x0040u);  // quiet NaN
  }
  const uint32_t rounding = 0x7fffu + ((word >> 16) & 1u);
  return static_cast<uint16_t>((word + rounding) >> 16);
}

// Writes `count` new tokens' K and V (each [count][kv_heads][head_dim] fp32, token-major) into
// the pools at token positions start .. start + count − 1 of entry `entry` of `kv` (which must
// cover them: start + count ≤ SeqLen(entry)). Converts to the pool's dtype.
void AppendKv(const PagedKvView& kv, uint32_t entry, uint32_t start, uint32_t count,
              const float* k_new, const float* v_new);

// Fills `elems` elements of a pool of `dtype` with pseudo-random values in [−1, 1) (an LCG
// seeded by `seed`; the same seed gives the same pool): the stand-in KV of the kernel benchmarks
// and the prefetch tuning. O(elems), no allocation; ~0.3 s per 512 MiB on one core.
void FillPseudoRandomKv(void* pool, size_t elems, KvDtype dtype, uint64_t seed);

}  // namespace feather::hw
