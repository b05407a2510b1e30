// attention_plan.h: the host-side plan of one paged attention call on the GPU — which CTA does
// what — built once per call (per step, for every layer) as FlashInfer's plan() does, and handed
// to the kernel as raw arrays.
//
// One kernel (hw/cuda/attention_kernels.cu) serves the three attention forms of hw/: decode (one
// query row per request), prefill (a chunk of rows per request, causal) and the shared-prefix pass
// of cascade attention (the rows of every request of a group, over the group's prefix pages).
// Every form is "entries over a paged-KV CSR, each with a list of query rows":
//   entry e        a request (decode, prefill) or a prefix group (cascade), its KV pages
//                  kv_indices[kv_indptr[e] .. kv_indptr[e+1]) as in hw/paged_kv.h;
//   rows of e      row_list[qo_indptr[e] .. qo_indptr[e+1]) (qo_indptr null: entry e has the one
//                  row e; row_list null: the identity), the rows of q / out they read and write;
//   KV range of e  [kv_begin[e] (or 0), SeqLen(e)); causal: the entry's row i sits at position
//                  SeqLen(e) − rows + i and sees tokens at positions ≤ its own.
// A work item is (entry, a tile of rows_per_item of its rows, a chunk of its KV range); the grid
// is items × kv_heads, one CTA per (item, KV head) — FlashInfer's (request, KV head) tile. Split-KV
// (flash-decoding): when entries are too few to fill the GPU, long ranges are cut into chunks of
// kv_chunk_tokens, each chunk's normalised partial state goes to its own slot and a merge kernel
// combines each row's slots (merge_rows, merge_indptr, merge_slots) with StateMergeWeights. The
// chunk size is the smallest whole number of pages that keeps the grid within max_ctas (binary
// search, FlashInfer's PartitionPagedKVCacheBinarySearchMinNumPagePerBatch); with split_kv off, or
// when the grid is too big without splitting, every item is a whole range and writes out directly.
//
// Cost: O(entries · log(max pages) + items + rows) per plan; vectors are reused (they only grow).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "hw/cuda/attention_math.h"

namespace feather::hw::cuda {

inline constexpr uint32_t kNoSlot = 0xffffffffu;

// One CTA's work for one KV head. Plain data: copied to the device as is.
struct AttentionWorkItem {
  uint32_t entry = 0;      // KV entry
  uint32_t row_begin = 0;  // its rows: row_list[row_begin .. row_begin + num_rows)
  uint32_t num_rows = 0;
  uint32_t kv_begin = 0;  // tokens [kv_begin, kv_end) of the entry
  uint32_t kv_end = 0;
  int32_t first_position = -1;  // causal: position of its first row (row i: + i); −1 = no mask
  uint32_t slot = kNoSlot;  // kNoSlot: writes out and lse; else partial slot of row i is slot + i
};

struct AttentionPlanInput {
  uint32_t num_entries = 0;
  const uint32_t* kv_indptr = nullptr;         // [num_entries + 1]
  const uint32_t* kv_last_page_len = nullptr;  // [num_entries]
  uint32_t page_size = 16;
  const uint32_t* kv_begin = nullptr;   // [num_entries] or null (0)
  const uint32_t* qo_indptr = nullptr;  // [num_entries + 1] or null (one row per entry)
  const uint32_t* row_list = nullptr;   // [qo_indptr[num_entries]] or null (identity)
  bool causal = false;
  uint32_t num_heads = 0;  // query heads
  uint32_t kv_heads = 0;
  uint32_t head_dim = 0;
  bool split_kv = true;
  uint32_t max_ctas = 0;  // grid budget for split-KV (e.g. SMs × resident CTAs per SM)
};

struct AttentionPlan {
  AttentionGeometry geometry;
  uint32_t kv_chunk_tokens = 0;  // 0: no split
  std::vector<AttentionWorkItem> items;
  std::vector<uint32_t> row_list;      // every entry's rows, in entry order
  uint32_t num_slots = 0;              // partial states per query head
  std::vector<uint32_t> merge_rows;    // rows with ≥ 2 partial slots
  std::vector<uint32_t> merge_indptr;  // [merge_rows + 1] into merge_slots
  std::vector<uint32_t> merge_slots;

  [[nodiscard]] uint64_t NumCtas(uint32_t kv_heads) const {
    return uint64_t{items.size()} * kv_heads;
  }
};

// Tokens of entry e of a CSR table (hw/paged_kv.h's SeqLen).
[[nodiscard]] uint32_t CsrSeqLen(const uint32_t* indptr, const uint32_t* last_page_len,
                                 uint32_t page_size, uint32_t e);

// The smallest chunk, in pages, such that Σ_e tiles[e] · ceil(pages[e] / chunk) ≤ budget
// (tiles[e]: row tiles of entry e; entries with 0 pages count one item); the largest of pages[]
// when even that exceeds the budget (no split). Binary search: O(n · log max pages).
[[nodiscard]] uint32_t ChooseKvChunkPages(const std::vector<uint32_t>& pages,
                                          const std::vector<uint32_t>& tiles, uint64_t budget);

// Builds the plan into `plan` (reusing its vectors). Returns "" or why the input cannot run (an
// unsupported geometry, a kv_begin past the entry's end, heads not a multiple of kv_heads, a
// causal entry with more rows than tokens).
[[nodiscard]] std::string BuildAttentionPlan(const AttentionPlanInput& input, AttentionPlan& plan);

}  // namespace feather::hw::cuda
