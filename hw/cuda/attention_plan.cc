// attention_plan.cc: BuildAttentionPlan and the split-KV chunk choice (see attention_plan.h).
#include "hw/cuda/attention_plan.h"

#include <algorithm>

namespace feather::hw::cuda {
namespace {

uint32_t CeilDiv(uint32_t a, uint32_t b) { return (a + b - 1) / b; }

uint64_t ItemsFor(const std::vector<uint32_t>& pages, const std::vector<uint32_t>& tiles,
                  uint32_t chunk) {
  uint64_t items = 0;
  for (size_t e = 0; e < pages.size(); ++e) {
    items += uint64_t{tiles[e]} * std::max<uint32_t>(1, CeilDiv(pages[e], chunk));
  }
  return items;
}

}  // namespace

uint32_t CsrSeqLen(const uint32_t* indptr, const uint32_t* last_page_len, uint32_t page_size,
                   uint32_t e) {
  const uint32_t pages = indptr[e + 1] - indptr[e];
  return pages == 0 ? 0 : (pages - 1) * page_size + last_page_len[e];
}

uint32_t ChooseKvChunkPages(const std::vector<uint32_t>& pages, const std::vector<uint32_t>& tiles,
                            uint64_t budget) {
  uint32_t high = 1;
  for (const uint32_t p : pages) high = std::max(high, p);
  if (ItemsFor(pages, tiles, high) > budget) return high;  // too many entries to split at all
  uint32_t low = 1;
  while (low < high) {  // smallest chunk within the budget; ItemsFor falls as the chunk grows
    const uint32_t mid = low + (high - low) / 2;
    if (ItemsFor(pages, tiles, mid) <= budget) {
      high = mid;
    } else {
      low = mid + 1;
    }
  }
  return low;
}

std::string BuildAttentionPlan(const AttentionPlanInput& in, AttentionPlan& plan) {
  plan.items.clear();
  plan.row_list.clear();
  plan.merge_rows.clear();
  plan.merge_indptr.assign(1, 0);
  plan.merge_slots.clear();
  plan.num_slots = 0;
  plan.kv_chunk_tokens = 0;
  if (in.kv_heads == 0 || in.num_heads == 0 || in.num_heads % in.kv_heads != 0) {
    return "query heads (" + std::to_string(in.num_heads) +
           ") must be a positive multiple of kv heads (" + std::to_string(in.kv_heads) + ")";
  }
  if (in.page_size == 0) return "page size must be positive";
  auto rows_of = [&](uint32_t e) {
    return in.qo_indptr ? in.qo_indptr[e + 1] - in.qo_indptr[e] : 1u;
  };
  uint32_t max_rows = 1;
  for (uint32_t e = 0; e < in.num_entries; ++e) max_rows = std::max(max_rows, rows_of(e));
  plan.geometry = ChooseAttentionGeometry(in.head_dim, in.num_heads / in.kv_heads, max_rows);
  if (plan.geometry.unsupported != nullptr) return plan.geometry.unsupported;
  const uint32_t rows_per_item = plan.geometry.rows_per_item;

  // Ranges and row tiles of every entry.
  std::vector<uint32_t> pages(in.num_entries), tiles(in.num_entries);
  for (uint32_t e = 0; e < in.num_entries; ++e) {
    const uint32_t len = CsrSeqLen(in.kv_indptr, in.kv_last_page_len, in.page_size, e);
    const uint32_t begin = in.kv_begin ? in.kv_begin[e] : 0;
    if (begin > len) {
      return "entry " + std::to_string(e) + ": kv_begin " + std::to_string(begin) +
             " is past its " + std::to_string(len) + " tokens";
    }
    if (in.causal && rows_of(e) > len) {
      return "entry " + std::to_string(e) + ": " + std::to_string(rows_of(e)) +
             " causal rows but only " + std::to_string(len) + " tokens";
    }
    pages[e] = CeilDiv(len - begin, in.page_size);
    tiles[e] = CeilDiv(rows_of(e), rows_per_item);
  }
  uint32_t chunk_tokens = 0;
  if (in.split_kv && in.max_ctas > 0) {
    const uint32_t chunk_pages = ChooseKvChunkPages(pages, tiles, in.max_ctas / in.kv_heads);
    uint32_t most = 0;
    for (const uint32_t p : pages) most = std::max(most, p);
    if (chunk_pages < most) chunk_tokens = chunk_pages * in.page_size;
  }
  plan.kv_chunk_tokens = chunk_tokens;

  for (uint32_t e = 0; e < in.num_entries; ++e) {
    const uint32_t len = CsrSeqLen(in.kv_indptr, in.kv_last_page_len, in.page_size, e);
    const uint32_t begin = in.kv_begin ? in.kv_begin[e] : 0;
    const uint32_t rows = rows_of(e);
    const auto list_begin = static_cast<uint32_t>(plan.row_list.size());
    for (uint32_t i = 0; i < rows; ++i) {
      const uint32_t qo = in.qo_indptr ? in.qo_indptr[e] + i : e;
      plan.row_list.push_back(in.row_list ? in.row_list[qo] : qo);
    }
    for (uint32_t r0 = 0; r0 < rows; r0 += rows_per_item) {
      const uint32_t n = std::min(rows_per_item, rows - r0);
      AttentionWorkItem item;
      item.entry = e;
      item.row_begin = list_begin + r0;
      item.num_rows = n;
      uint32_t end = len;
      if (in.causal) {
        item.first_position = static_cast<int32_t>(len - rows + r0);
        end = len - rows + r0 + n;  // the last row's position + 1
      }
      const uint32_t span = end > begin ? end - begin : 0;
      const uint32_t chunks = chunk_tokens == 0 ? 1 : std::max(1u, CeilDiv(span, chunk_tokens));
      if (chunks == 1) {
        item.kv_begin = begin;
        item.kv_end = std::max(begin, end);
        plan.items.push_back(item);
        continue;
      }
      const uint32_t first_slot = plan.num_slots;
      for (uint32_t c = 0; c < chunks; ++c) {
        item.kv_begin = begin + c * chunk_tokens;
        item.kv_end = std::min(end, item.kv_begin + chunk_tokens);
        item.slot = first_slot + c * n;
        plan.items.push_back(item);
      }
      plan.num_slots += chunks * n;
      for (uint32_t i = 0; i < n; ++i) {
        plan.merge_rows.push_back(plan.row_list[list_begin + r0 + i]);
        for (uint32_t c = 0; c < chunks; ++c) plan.merge_slots.push_back(first_slot + c * n + i);
        plan.merge_indptr.push_back(static_cast<uint32_t>(plan.merge_slots.size()));
      }
    }
  }
  return "";
}

}  // namespace feather::hw::cuda
