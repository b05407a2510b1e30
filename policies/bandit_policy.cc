// bandit_policy.cc: see bandit_policy.h for the rules and the tie/forced-decision conventions.
#include "policies/bandit_policy.h"

#include <array>
#include <cmath>
#include <limits>
#include <span>
#include <string>
#include <vector>

namespace feather {

std::span<const ConfigField<BanditConfig>> BanditConfig::Fields() {
  using C = BanditConfig;
  static constexpr std::array<ConfigField<C>, 1> kFields = {{
      {"exploration", &C::exploration, ConfigField<C>::Real(0, 1e12)},
  }};
  return kFields;
}

std::vector<ConfigRuleProblem> BanditConfig::RuleProblems() const { return {}; }

namespace {

constexpr size_t kPendingReserve = 4096;

}  // namespace

BanditPolicy::BanditPolicy(const BanditConfig& config) : config_(config) {
  pending_cells_.reserve(kPendingReserve);
}

double BanditPolicy::Ucb(uint32_t state_index, StopDecision action) const {
  const uint32_t cell = CellIndex(state_index, action);
  const uint64_t n = tables_.count[cell];
  if (n == 0) return std::numeric_limits<double>::infinity();
  const auto count = static_cast<double>(n);
  const double mean = tables_.reward_sum[cell] / count;
  const double log_s = std::log(static_cast<double>(tables_.total_decisions) + 1.0);
  return mean + config_.exploration * std::sqrt(log_s / count);
}

StopDecision BanditPolicy::Decide(const StopContext& context) {
  const Observation o = Observe(context);
  if (o.batch_size == 0 || (o.tip_loss_chunks == 0 && o.has_tip)) return StopDecision::kAdd;
  const uint32_t state = StateIndex(Discretize(o, config_.state_bins));

  if (!learning()) {
    const uint32_t add_cell = CellIndex(state, StopDecision::kAdd);
    const uint32_t stop_cell = CellIndex(state, StopDecision::kStop);
    const uint64_t n_add = tables_.count[add_cell];
    const uint64_t n_stop = tables_.count[stop_cell];
    if (n_stop == 0) return StopDecision::kAdd;
    if (n_add == 0) return StopDecision::kStop;
    const double mean_add = tables_.reward_sum[add_cell] / static_cast<double>(n_add);
    const double mean_stop = tables_.reward_sum[stop_cell] / static_cast<double>(n_stop);
    return mean_add >= mean_stop ? StopDecision::kAdd : StopDecision::kStop;
  }

  // +∞ >= +∞ holds, so two unseen actions give Add.
  const StopDecision action = Ucb(state, StopDecision::kAdd) >= Ucb(state, StopDecision::kStop)
                                  ? StopDecision::kAdd
                                  : StopDecision::kStop;
  pending_cells_.push_back(CellIndex(state, action));
  return action;
}

void BanditPolicy::OnStepExecuted(const StepFeedback& feedback) {
  const std::optional<double> reward = config_.reward == BanditReward::kAuthors
                                           ? StepRewardBatchPerS(feedback)
                                           : StepRewardTokensPerS(feedback);
  if (learning() && reward) {
    for (const uint32_t cell : pending_cells_) {
      ++tables_.count[cell];
      tables_.reward_sum[cell] += *reward;
      ++tables_.total_decisions;
    }
  }
  pending_cells_.clear();
}

void BanditPolicy::Restore(const BanditConfig& config, const BanditTables& tables) {
  const BanditReward reward = config_.reward;
  config_ = config;
  config_.reward = reward;
  tables_ = tables;
  pending_cells_.clear();
}

}  // namespace feather
