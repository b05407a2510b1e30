// selector_factory.cc: name -> selector (see selector_factory.h).
#include "policies/selector_factory.h"

#include <array>
#include <stdexcept>
#include <string>

#include "policies/block_table_selector.h"
#include "policies/cht_selector.h"
#include "policies/dfs_weight_selector.h"
#include "policies/fcfs_selector.h"
#include "policies/lpm_selector.h"
#include "policies/oracle_selector.h"

namespace feather {
namespace {

constexpr std::array<std::string_view, 6> kNames = {"fcfs",        "lpm",    "dfs-weight",
                                                    "block-table", "oracle", "cht"};

}  // namespace

std::span<const std::string_view> SelectorNames() { return kNames; }

std::span<const ConfigField<SelectorOptions>> SelectorOptions::Fields() {
  using C = SelectorOptions;
  static constexpr std::array<ConfigField<C>, 4> kFields = {{
      {"chunk_tokens", &C::chunk_tokens, ConfigField<C>::Integer(1, 1 << 20)},
      {"cht_retain_cached", &C::cht_retain_cached, ConfigField<C>::Flag()},
      {"radix_page_size", &C::radix_page_size, ConfigField<C>::Integer(1, 1 << 16)},
      {"lpm_fcfs_fallback", &C::lpm_fcfs_fallback, ConfigField<C>::Flag()},
  }};
  return kFields;
}

std::unique_ptr<CandidateSelector> MakeSelector(std::string_view name,
                                                const SelectorOptions& options) {
  if (name == "fcfs") return std::make_unique<FcfsSelector>(options.expected_requests);
  if (name == "lpm") {
    LpmConfig config;
    config.page_size = options.radix_page_size;
    config.cache_capacity_tokens = options.cache_capacity_tokens;
    config.fcfs_fallback = options.lpm_fcfs_fallback;
    return std::make_unique<LpmSelector>(config);
  }
  if (name == "dfs-weight") {
    DfsWeightConfig config;
    config.page_size = options.radix_page_size;
    config.cache_capacity_tokens = options.cache_capacity_tokens;
    return std::make_unique<DfsWeightSelector>(config);
  }
  if (name == "block-table") {
    BlockHashConfig config;
    config.block_tokens = options.block_tokens;
    return std::make_unique<BlockTableSelector>(config);
  }
  if (name == "oracle") return std::make_unique<OracleSelector>();
  if (name == "cht") {
    ChtConfig config;
    config.chunk_tokens = options.chunk_tokens;
    config.expected_requests = options.expected_requests;
    return std::make_unique<ChtSelector>(config, options.cht_retain_cached);
  }
  std::string valid;
  for (std::string_view n : kNames) valid += (valid.empty() ? "" : ", ") + std::string(n);
  throw std::invalid_argument("unknown selector '" + std::string(name) + "' (valid: " + valid + ")");
}

}  // namespace feather
