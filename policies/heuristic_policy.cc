// heuristic_policy.cc: see heuristic_policy.h for the rules and the floor's reading.
#include "policies/heuristic_policy.h"

#include <array>
#include <span>
#include <string>
#include <vector>

#include "policies/policy_state.h"

namespace feather {

std::span<const ConfigField<HeuristicConfig>> HeuristicConfig::Fields() {
  using C = HeuristicConfig;
  static constexpr std::array<ConfigField<C>, 4> kFields = {{
      {"max_loss_chunks", &C::max_loss_chunks, ConfigField<C>::Integer(0, 1 << 20)},
      {"relaxed_loss_chunks", &C::relaxed_loss_chunks, ConfigField<C>::Integer(0, 1 << 20)},
      {"relaxed_min_peers", &C::relaxed_min_peers, ConfigField<C>::Integer(0, 1 << 30)},
      {"floor_cap", &C::floor_cap, ConfigField<C>::Integer(0, 1 << 20)},
  }};
  return kFields;
}

std::vector<ConfigRuleProblem> HeuristicConfig::RuleProblems() const {
  std::vector<ConfigRuleProblem> problems;
  if (relaxed_loss_chunks < max_loss_chunks) {
    problems.push_back({"relaxed_loss_chunks", "max_loss_chunks",
                        "relaxed_loss_chunks (" + std::to_string(relaxed_loss_chunks) +
                            ") must be >= max_loss_chunks (" + std::to_string(max_loss_chunks) +
                            "): the relaxed bound loosens the strict one"});
  }
  return problems;
}

StopDecision HeuristicPolicy::Decide(const StopContext& context) {
  const Observation o = Observe(context);
  const bool add = o.batch_size == 0 ||
                   o.tip_loss_chunks <= static_cast<int64_t>(config_.max_loss_chunks) ||
                   (o.tip_loss_chunks <= static_cast<int64_t>(config_.relaxed_loss_chunks) &&
                    o.peers >= config_.relaxed_min_peers) ||
                   o.batch_size < floor_;
  if (!add) return StopDecision::kStop;
  if (floor_ < config_.floor_cap) ++floor_;
  return StopDecision::kAdd;
}

void HeuristicPolicy::Restore(const HeuristicConfig& config, uint32_t floor) {
  config_ = config;
  floor_ = floor;
}

}  // namespace feather
