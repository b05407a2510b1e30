// selector_factory.h: builds a CandidateSelector from its scenario name.
//
// Names: fcfs | lpm | dfs-weight | block-table | oracle | cht. An unknown name throws
// std::invalid_argument listing the valid ones (the scenario loader turns that into a
// file:line:field message).
#pragma once

#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "policies/config_fields.h"
#include "policies/selector.h"

namespace feather {

// What MakeSelector passes to each selector's own config (ChtConfig, LpmConfig, ...). The knobs a
// scenario sets sit directly under `scheduler:` (one namespace for all selectors, so lpm and
// dfs-weight share radix_page_size) and are listed in Fields(); the rest come from other parts of
// the scenario (the KV pool, the block size, the workload's size).
struct SelectorOptions {
  uint32_t chunk_tokens = 50;          // cht
  bool cht_retain_cached = true;       // cht: finished requests stay in a second tree while cached
  uint32_t radix_page_size = 1;        // lpm, dfs-weight
  bool lpm_fcfs_fallback = false;      // lpm: SGLang's switch to FCFS above 128 waiting
  uint64_t cache_capacity_tokens = 0;  // lpm, dfs-weight (0 = unbounded); from the KV pool
  uint32_t block_tokens = 16;          // block-table; serving.block_tokens
  uint32_t expected_requests = 1024;   // capacity hint; the workload's size

  // scheduler.<key> in a scenario (policies/config_fields.h); no cross-field rules.
  static constexpr std::string_view kSection = "";
  [[nodiscard]] static std::span<const ConfigField<SelectorOptions>> Fields();
  [[nodiscard]] std::vector<ConfigRuleProblem> RuleProblems() const { return {}; }
};

[[nodiscard]] std::span<const std::string_view> SelectorNames();

[[nodiscard]] std::unique_ptr<CandidateSelector> MakeSelector(std::string_view name,
                                                              const SelectorOptions& options = {});

}  // namespace feather
