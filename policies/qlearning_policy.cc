// qlearning_policy.cc: see qlearning_policy.h for the update order and the ε schedule.
#include "policies/qlearning_policy.h"

#include <algorithm>
#include <array>
#include <limits>
#include <span>
#include <sstream>
#include <string>
#include <vector>

namespace feather {

std::span<const ConfigField<QLearningConfig>> QLearningConfig::Fields() {
  using C = QLearningConfig;
  static constexpr std::array<ConfigField<C>, 5> kFields = {{
      {"learning_rate", &C::learning_rate, ConfigField<C>::Real(0, 1, true)},
      {"discount", &C::discount, ConfigField<C>::Real(0, 1)},
      {"epsilon_start", &C::epsilon_start, ConfigField<C>::Real(0, 1)},
      {"epsilon_min", &C::epsilon_min, ConfigField<C>::Real(0, 1)},
      {"epsilon_decay_decisions", &C::epsilon_decay_decisions,
       ConfigField<C>::Integer(0, std::numeric_limits<int64_t>::max())},
  }};
  return kFields;
}

std::vector<ConfigRuleProblem> QLearningConfig::RuleProblems() const {
  std::vector<ConfigRuleProblem> problems;
  if (epsilon_min > epsilon_start) {
    std::ostringstream message;
    message << "epsilon_min (" << epsilon_min << ") must be <= epsilon_start (" << epsilon_start
            << "): exploration decays from the start value to the minimum";
    problems.push_back({"epsilon_min", "epsilon_start", message.str()});
  }
  return problems;
}

namespace {

constexpr size_t kPendingReserve = 4096;

}  // namespace

QLearningPolicy::QLearningPolicy(const QLearningConfig& config, uint64_t seed)
    : config_(config), rng_{seed} {
  pending_cells_.reserve(kPendingReserve);
}

double QLearningPolicy::EpsilonAt(const QLearningConfig& config, uint64_t decisions) {
  // The end of the schedule returns epsilon_min exactly (the interpolation would round).
  if (decisions >= config.epsilon_decay_decisions) return config.epsilon_min;
  const double fraction =
      static_cast<double>(decisions) / static_cast<double>(config.epsilon_decay_decisions);
  return config.epsilon_start + (config.epsilon_min - config.epsilon_start) * fraction;
}

StopDecision QLearningPolicy::Greedy(uint32_t state_index) const {
  return Q(state_index, StopDecision::kAdd) >= Q(state_index, StopDecision::kStop)
             ? StopDecision::kAdd
             : StopDecision::kStop;
}

StopDecision QLearningPolicy::Decide(const StopContext& context) {
  const Observation o = Observe(context);
  if (o.batch_size == 0) return StopDecision::kAdd;
  const uint32_t state = StateIndex(Discretize(o, config_.state_bins));
  if (!learning()) return Greedy(state);

  StopDecision action;
  if (rng_.NextUnit() < epsilon()) {
    action = (rng_.Next() >> 63) != 0 ? StopDecision::kStop : StopDecision::kAdd;
  } else {
    action = Greedy(state);
  }
  ++tables_.decisions;
  pending_cells_.push_back(CellIndex(state, action));
  return action;
}

void QLearningPolicy::OnStepExecuted(const StepFeedback& feedback) {
  const std::optional<double> reward = StepRewardTokensPerS(feedback);
  if (learning() && reward) {
    const size_t k = pending_cells_.size();
    for (size_t i = 0; i < k; ++i) {
      const uint32_t cell = pending_cells_[i];
      double target = *reward;
      if (i + 1 < k) {
        const uint32_t next_state = pending_cells_[i + 1] / kNumActions;
        target += config_.discount *
                  std::max(Q(next_state, StopDecision::kAdd), Q(next_state, StopDecision::kStop));
      }
      tables_.q[cell] += config_.learning_rate * (target - tables_.q[cell]);
      ++tables_.visits[cell];
    }
  }
  pending_cells_.clear();
}

void QLearningPolicy::Restore(const QLearningConfig& config, const QTables& tables,
                              uint64_t rng_state) {
  config_ = config;
  tables_ = tables;
  rng_.state = rng_state;
  pending_cells_.clear();
}

}  // namespace feather
