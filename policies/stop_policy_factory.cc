// stop_policy_factory.cc: name -> stop policy (see stop_policy_factory.h).
#include "policies/stop_policy_factory.h"

#include <array>
#include <stdexcept>

#include "policies/always_add_policy.h"
#include "policies/bandit_policy.h"
#include "policies/converge_policy.h"
#include "policies/dynamic_batching_policy.h"
#include "policies/heuristic_policy.h"
#include "policies/mpc_policy.h"
#include "policies/qlearning_policy.h"

namespace feather {
namespace {

constexpr std::array<std::string_view, 10> kNames = {
    "always",           "heuristic",      "bandit",         "qlearning", "dynamic-batching",
    "bandit-authors",   "bandit-delayed", "mpc",            "converge",
    "converge-shape"};

}  // namespace

std::span<const std::string_view> StopPolicyNames() { return kNames; }

std::vector<std::string> StopPolicyOptionErrors(std::string_view name, const StopPolicyOptions& o) {
  if (name == "heuristic") return ConfigProblems(o.heuristic);
  if (name == "bandit" || name == "bandit-delayed") return ConfigProblems(o.bandit);
  if (name == "qlearning") return ConfigProblems(o.qlearning);
  if (name == "dynamic-batching") return ConfigProblems(o.dynamic_batching);
  if (name == "mpc") return ConfigProblems(o.mpc);
  return {};
}

std::unique_ptr<StopPolicy> MakeStopPolicy(std::string_view name,
                                           const StopPolicyOptions& options) {
  const std::vector<std::string> errors = StopPolicyOptionErrors(name, options);
  if (!errors.empty()) {
    std::string message = "invalid options for stop policy '" + std::string(name) + "':";
    for (const std::string& e : errors) message += "\n  " + e;
    throw std::invalid_argument(message);
  }
  if (name == "always") return std::make_unique<AlwaysAddPolicy>();
  if (name == "heuristic") return std::make_unique<HeuristicPolicy>(options.heuristic);
  if (name == "bandit") {
    BanditConfig config = options.bandit;
    config.state_bins = options.state_bins;
    return std::make_unique<BanditPolicy>(config);
  }
  if (name == "bandit-delayed") {
    BanditConfig config = options.bandit;
    config.state_bins = options.state_bins;
    config.reward = BanditReward::kDelayed;
    return std::make_unique<BanditPolicy>(config);
  }
  if (name == "bandit-authors") return std::make_unique<BanditPolicy>(BanditConfig::Authors());
  if (name == "qlearning") {
    QLearningConfig config = options.qlearning;
    config.state_bins = options.state_bins;
    return std::make_unique<QLearningPolicy>(config, options.seed);
  }
  if (name == "dynamic-batching") {
    return std::make_unique<DynamicBatchingPolicy>(options.dynamic_batching);
  }
  if (name == "mpc") return std::make_unique<MpcPolicy>(options.mpc);
  if (name == "converge") return std::make_unique<ConvergePolicy>(/*gated=*/true);
  if (name == "converge-shape") return std::make_unique<ConvergePolicy>(/*gated=*/false);
  std::string valid;
  for (std::string_view n : kNames) valid += (valid.empty() ? "" : ", ") + std::string(n);
  throw std::invalid_argument("unknown stop policy '" + std::string(name) + "' (valid: " + valid +
                              ")");
}

}  // namespace feather
