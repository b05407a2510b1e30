// plan_layout.h: a BatchPlan turned into the host-side arrays a kernel backend consumes, planned
// once per step on the host as FlashInfer plans before it runs.
//
// The serving loop's plan lists requests in its own order, each with a span over its block
// table (possibly longer than the step needs). A backend wants flat arrays it can hand to every
// layer's kernels as raw pointers (and a GPU backend copies to the device once per step):
//
//   batch order   decode requests first (plan order), then prefill requests (plan order), so the
//                 decode queries are the contiguous [B][heads][head_dim] rows the decode kernels
//                 index by request and each prefill chunk is a contiguous run of rows.
//   KV pages      CSR over batch order (hw/paged_kv.h, FlashInfer's paged_kv_t): kv_indptr
//                 [entries + 1], kv_indices (the first ceil((context + new) / page) ids of each
//                 table), kv_last_page_len [entries]; SeqLen(e) = context + new tokens.
//   rows          CSR of query/output rows: qo_indptr [entries + 1] (a decode entry has one row);
//                 prefill_qo_indptr [prefill + 1] the same for the prefill entries alone, from 0.
//                 Per row: its token position and request (RoPE, the embedding gather); per plan
//                 request: the row the LM head samples (a decode's token, a chunk's last).
//   cascade       the shared-prefix level (vLLM's batch-wide cascade: one group of every decode
//                 entry): cascade_prefix_tokens P, its pages as a one-entry CSR over kv_indices
//                 (the first decode entry's leading pages, which every request holds physically)
//                 and the suffix start P of every decode entry. Empty when P = 0. FlashInfer's
//                 multi-level cascade would add entries (groups) here, not change the form.
//
// Checks (FEATHER_CHECK): every request computes ≥ 1 token, a decode request exactly 1, every
// table covers context + new tokens, and the pages a step writes lie in the pool. The cascade
// prefix being physically shared is a debug check.
//
// Cost: O(requests + Σ pages + rows) per step; the vectors are reused and only grow, so a step
// allocates nothing once they have reached the largest step.
#pragma once

#include <cstdint>
#include <vector>

#include "base/types.h"
#include "hw/paged_kv.h"
#include "sim/engine/engine.h"

namespace feather::hw {

struct StepLayout {
  uint32_t page_size = 16;  // tokens per page (the plan's block_tokens)
  uint32_t num_decode = 0;
  uint32_t num_prefill = 0;
  uint32_t num_rows = 0;      // new tokens of the step: num_decode + Σ prefill chunks
  uint32_t max_position = 0;  // largest context + new tokens (RoPE table size)

  std::vector<uint32_t> plan_index;  // [entries]: batch entry -> index in plan.requests
  std::vector<uint32_t> kv_indptr;   // [entries + 1]
  std::vector<uint32_t> kv_indices;
  std::vector<uint32_t> kv_last_page_len;   // [entries]
  std::vector<uint32_t> qo_indptr;          // [entries + 1]
  std::vector<uint32_t> prefill_qo_indptr;  // [num_prefill + 1], rows relative to the first
                                            // prefill row (qo_indptr[num_decode])

  std::vector<uint32_t> row_position;  // [num_rows]
  std::vector<RequestId> row_request;  // [num_rows]
  std::vector<uint32_t> sampled_row;   // [requests], in plan order

  uint32_t cascade_prefix_tokens = 0;
  std::vector<uint32_t> cascade_indptr;         // [2] when P > 0, into kv_indices
  std::vector<uint32_t> cascade_last_page_len;  // [1] when P > 0
  std::vector<uint32_t> cascade_kv_begin;       // [num_decode], all P, when P > 0

  [[nodiscard]] uint32_t num_entries() const { return num_decode + num_prefill; }
  // Entry e's cached tokens before the step (where its new K and V go).
  [[nodiscard]] uint32_t Context(uint32_t e) const;
  // New tokens of entry e (its rows).
  [[nodiscard]] uint32_t NewTokens(uint32_t e) const { return qo_indptr[e + 1] - qo_indptr[e]; }

  // Views over pools of `layout`: every entry; the decode or prefill entries alone; the cascade
  // prefix (one entry). Valid while this layout is unchanged.
  [[nodiscard]] PagedKvView Kv(void* k_data, void* v_data, const PagedKvLayout& layout) const;
  [[nodiscard]] PagedKvView DecodeKv(void* k_data, void* v_data,
                                     const PagedKvLayout& layout) const {
    return Kv(k_data, v_data, layout).Slice(0, num_decode);
  }
  [[nodiscard]] PagedKvView PrefillKv(void* k_data, void* v_data,
                                      const PagedKvLayout& layout) const {
    return Kv(k_data, v_data, layout).Slice(num_decode, num_prefill);
  }
  [[nodiscard]] PagedKvView CascadePrefixKv(void* k_data, void* v_data,
                                            const PagedKvLayout& layout) const;
};

// Lays `plan` out for a pool of `num_pages` pages into `layout` (reusing its vectors), with a
// batch-wide cascade prefix of `cascade_prefix_tokens` (0: none; ShapeStep's decision, only when
// there are decode requests). Aborts on a broken plan (file comment).
void LayOutPlan(const BatchPlan& plan, uint32_t cascade_prefix_tokens, uint32_t num_pages,
                StepLayout& layout);

}  // namespace feather::hw
