// stop_policy_factory.h: builds a StopPolicy from its scenario name and the policies' configs.
//
// Names: always | heuristic | bandit | qlearning | dynamic-batching | bandit-authors (the authors'
// exact bandit, BanditConfig::Authors(): it ignores scheduler.bandit.*, scheduler.state_bins and
// scheduler.reward_time, so none of them is checked for it) | bandit-delayed (the bandit with
// delayed credit, bandit_policy.h; it ignores scheduler.reward_time). An unknown name, or an
// option out of range, throws std::invalid_argument (the message lists the valid names, or every
// bad option with its value and constraint); the scenario loader adds file:line.
// Complexity: O(1) apart from the tables' zero-initialization (≈ 42 KiB for bandit/qlearning).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "policies/bandit_policy.h"
#include "policies/dynamic_batching_policy.h"
#include "policies/heuristic_policy.h"
#include "policies/mpc_policy.h"
#include "policies/policy_state.h"
#include "policies/qlearning_policy.h"
#include "policies/stop_policy.h"

namespace feather {

// The options of every stop policy, one config per policy (each with its field table,
// policies/config_fields.h); MakeStopPolicy uses the named one.
struct StopPolicyOptions {
  uint64_t seed = 1;                           // qlearning's exploration draws
  StateBins state_bins = StateBins::kAuthors;  // bandit and qlearning discretization
  HeuristicConfig heuristic;                   // authors' constants
  BanditConfig bandit;                         // UCB
  QLearningConfig qlearning;
  DynamicBatchingConfig dynamic_batching;
  MpcConfig mpc;
};

[[nodiscard]] std::span<const std::string_view> StopPolicyNames();

// Every out-of-range knob of the named policy's config as "key = value: must be in [a, b]" and
// every broken cross-field rule (empty when all are valid; ConfigProblems of config_fields.h).
// An unknown name yields no errors here.
[[nodiscard]] std::vector<std::string> StopPolicyOptionErrors(std::string_view name,
                                                              const StopPolicyOptions& options);

[[nodiscard]] std::unique_ptr<StopPolicy> MakeStopPolicy(std::string_view name,
                                                         const StopPolicyOptions& options = {});

}  // namespace feather
