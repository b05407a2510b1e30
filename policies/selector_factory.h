// selector_factory.h: builds a CandidateSelector from its scenario name.
//
// Names: fcfs | lpm | dfs-weight | block-table | oracle | cht. An unknown name throws
// std::invalid_argument listing the valid ones (the scenario loader turns that into a
// file:line:field message).
#pragma once

#include <memory>
#include <span>
#include <string_view>

#include "policies/selector.h"

namespace feather {

struct SelectorOptions {
  uint32_t chunk_tokens = 50;          // cht
  uint32_t radix_page_size = 1;        // lpm, dfs-weight
  uint64_t cache_capacity_tokens = 0;  // lpm, dfs-weight (0 = unbounded)
  bool lpm_fcfs_fallback = false;      // lpm: SGLang's switch to FCFS above 128 waiting
  uint32_t block_tokens = 16;          // block-table
  uint32_t expected_requests = 1024;   // capacity hint
};

[[nodiscard]] std::span<const std::string_view> SelectorNames();

[[nodiscard]] std::unique_ptr<CandidateSelector> MakeSelector(std::string_view name,
                                                              const SelectorOptions& options = {});

}  // namespace feather
