// plan_layout.cc: LayOutPlan (see plan_layout.h).
#include "hw/plan_layout.h"

#include <algorithm>
#include <cstdint>

#include "base/check.h"

namespace feather::hw {

uint32_t StepLayout::Context(uint32_t e) const {
  const uint32_t pages = kv_indptr[e + 1] - kv_indptr[e];
  return (pages - 1) * page_size + kv_last_page_len[e] - NewTokens(e);
}

PagedKvView StepLayout::Kv(void* k_data, void* v_data, const PagedKvLayout& layout) const {
  return PagedKvView{.k_data = k_data,
                     .v_data = v_data,
                     .layout = layout,
                     .batch_size = num_entries(),
                     .indptr = kv_indptr.data(),
                     .indices = kv_indices.data(),
                     .last_page_len = kv_last_page_len.data()};
}

PagedKvView StepLayout::CascadePrefixKv(void* k_data, void* v_data,
                                        const PagedKvLayout& layout) const {
  return PagedKvView{.k_data = k_data,
                     .v_data = v_data,
                     .layout = layout,
                     .batch_size = cascade_prefix_tokens > 0 ? 1u : 0u,
                     .indptr = cascade_indptr.data(),
                     .indices = kv_indices.data(),
                     .last_page_len = cascade_last_page_len.data()};
}

void LayOutPlan(const BatchPlan& plan, uint32_t cascade_prefix_tokens, uint32_t num_pages,
                StepLayout& layout) {
  StepLayout& l = layout;
  const uint32_t page = plan.block_tokens;
  FEATHER_CHECK(page > 0, "plan.block_tokens must be positive");
  l.page_size = page;
  l.plan_index.clear();
  l.max_position = 0;
  // Batch order: decode entries (plan order), then prefill entries (plan order).
  for (uint32_t i = 0; i < plan.num_requests(); ++i) {
    if (!plan.requests[i].is_prefill) l.plan_index.push_back(i);
  }
  l.num_decode = static_cast<uint32_t>(l.plan_index.size());
  for (uint32_t i = 0; i < plan.num_requests(); ++i) {
    if (plan.requests[i].is_prefill) l.plan_index.push_back(i);
  }
  l.num_prefill = static_cast<uint32_t>(l.plan_index.size()) - l.num_decode;
  const uint32_t entries = l.num_entries();
  l.kv_indptr.assign(1, 0);
  l.kv_indices.clear();
  l.kv_last_page_len.clear();
  l.qo_indptr.assign(1, 0);
  l.row_position.clear();
  l.row_request.clear();
  l.sampled_row.resize(plan.num_requests());
  for (uint32_t e = 0; e < entries; ++e) {
    const StepRequest& r = plan.requests[l.plan_index[e]];
    FEATHER_CHECK(r.new_tokens >= 1, "a request of the plan computes no token");
    FEATHER_CHECK(r.is_prefill || r.new_tokens == 1, "a decode request computes more than one token");
    const uint64_t end = uint64_t{r.context_tokens} + r.new_tokens;
    FEATHER_CHECK(end <= uint64_t{r.block_table.size()} * page,
                  "a request's block table does not cover its context and new tokens");
    const auto pages = static_cast<uint32_t>((end + page - 1) / page);
    // The pages this step writes must lie in the pool (reads of bad ids would only misread).
    for (uint32_t b = r.context_tokens / page; b < pages; ++b) {
      FEATHER_CHECK(r.block_table[b] < num_pages, "block id outside the KV pool");
    }
    l.kv_indices.insert(l.kv_indices.end(), r.block_table.begin(), r.block_table.begin() + pages);
    l.kv_indptr.push_back(static_cast<uint32_t>(l.kv_indices.size()));
    l.kv_last_page_len.push_back(LastPageLen(static_cast<uint32_t>(end), page));
    l.max_position = std::max(l.max_position, static_cast<uint32_t>(end));
    l.sampled_row[l.plan_index[e]] = static_cast<uint32_t>(l.row_position.size()) + r.new_tokens - 1;
    for (uint32_t k = 0; k < r.new_tokens; ++k) {
      l.row_position.push_back(r.context_tokens + k);
      l.row_request.push_back(r.id);
    }
    l.qo_indptr.push_back(static_cast<uint32_t>(l.row_position.size()));
  }
  l.num_rows = static_cast<uint32_t>(l.row_position.size());
  l.prefill_qo_indptr.resize(l.num_prefill + 1);
  for (uint32_t p = 0; p <= l.num_prefill; ++p) {
    l.prefill_qo_indptr[p] = l.qo_indptr[l.num_decode + p] - l.qo_indptr[l.num_decode];
  }

  // Cascade: the prefix is the first P tokens' pages of the first decode entry, which every
  // request of the step holds physically (plan.common_prefix_tokens ≥ P).
  l.cascade_prefix_tokens = l.num_decode > 0 ? cascade_prefix_tokens : 0;
  l.cascade_indptr.clear();
  l.cascade_last_page_len.clear();
  l.cascade_kv_begin.clear();
  const uint32_t prefix = l.cascade_prefix_tokens;
  if (prefix == 0) return;
  const uint32_t prefix_pages = (prefix + page - 1) / page;
  FEATHER_CHECK(prefix_pages <= l.kv_indptr[1], "the cascade prefix is longer than a request");
  l.cascade_indptr = {0, prefix_pages};
  l.cascade_last_page_len = {LastPageLen(prefix, page)};
  l.cascade_kv_begin.assign(l.num_decode, prefix);
#ifndef NDEBUG
  for (const StepRequest& r : plan.requests) {
    FEATHER_DCHECK(std::equal(l.kv_indices.begin(), l.kv_indices.begin() + prefix_pages,
                              r.block_table.begin()),
                   "cascade prefix blocks are not shared physically by every request");
  }
#endif
}

}  // namespace feather::hw
