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
  static constexpr std::array<ConfigField<C>, 6> kFields = {{
      {"learning_rate", &C::learning_rate, ConfigField<C>::Real(0, 1, true)},
      {"discount", &C::discount, ConfigField<C>::Real(0, 1)},
      {"epsilon_start", &C::epsilon_start, ConfigField<C>::Real(0, 1)},
      {"epsilon_min", &C::epsilon_min, ConfigField<C>::Real(0, 1)},
      {"epsilon_decay_decisions", &C::epsilon_decay_decisions,
       ConfigField<C>::Integer(0, std::numeric_limits<int64_t>::max())},
      {"hold", &C::hold, ConfigField<C>::Flag()},
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

QLearningPolicy::QLearningPolicy(const QLearningConfig& config, uint64_t seed)
    : config_(config), rng_{seed} {}

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

double QLearningPolicy::MaxQ(uint32_t state_index) const {
  return std::max(Q(state_index, StopDecision::kAdd), Q(state_index, StopDecision::kStop));
}

bool QLearningPolicy::HoldGoesOn(const Observation& o) const {
  return config_.state_bins == StateBins::kCascade && o.cascade == 0 &&
         o.largest_group_requests + o.largest_group_waiting >= kCascadeMinRequests;
}

bool QLearningPolicy::MayHold(const Observation& o) const {
  return config_.hold && HoldGoesOn(o) && !o.in_largest_group;
}

void QLearningPolicy::Update(uint32_t cell, double target) {
  tables_.q[cell] += config_.learning_rate * (target - tables_.q[cell]);
  ++tables_.visits[cell];
}

StopDecision QLearningPolicy::Decide(const StopContext& context) {
  const Observation o = Observe(context);
  const bool free_addition =
      (o.tip_loss_chunks == 0 && o.has_tip) ||
      (config_.state_bins == StateBins::kCascade && o.cascade == 1);
  if (o.batch_size == 0 || free_addition) return StopDecision::kAdd;
  if (holding_ && HoldGoesOn(o)) {
    return o.in_largest_group ? StopDecision::kAdd : StopDecision::kStop;
  }
  holding_ = false;
  const uint32_t state = StateIndex(Discretize(o, config_.state_bins));
  if (!learning()) {
    const StopDecision greedy = Greedy(state);
    holding_ = greedy == StopDecision::kStop && MayHold(o);
    return greedy;
  }

  StopDecision action;
  if (rng_.NextUnit() < epsilon()) {
    action = (rng_.Next() >> 63) != 0 ? StopDecision::kStop : StopDecision::kAdd;
  } else {
    action = Greedy(state);
  }
  ++tables_.decisions;
  // The previous decision's transition ends here: within the round (no time passed), or after
  // the steps since an earlier round.
  if (in_round_) {
    Update(last_cell_, MaxQ(state));
  } else if (awaiting_) {
    Update(last_cell_, return_ + return_discount_ * MaxQ(state));
    awaiting_ = false;
  }
  last_cell_ = CellIndex(state, action);
  in_round_ = true;
  holding_ = action == StopDecision::kStop && MayHold(o);
  return action;
}

void QLearningPolicy::OnStepExecuted(const StepFeedback& feedback) {
  if (!learning()) {
    in_round_ = awaiting_ = false;
    return;
  }
  if (in_round_) {  // the round's last decision now waits for the next decision's state
    in_round_ = false;
    awaiting_ = true;
    return_ = 0.0;
    return_discount_ = 1.0;
  }
  const std::optional<double> reward = StepDecodeRate(feedback);
  if (awaiting_ && reward) {
    return_ += return_discount_ * *reward;
    return_discount_ *= config_.discount;
  }
}

void QLearningPolicy::Restore(const QLearningConfig& config, const QTables& tables,
                              uint64_t rng_state) {
  config_ = config;
  tables_ = tables;
  rng_.state = rng_state;
  in_round_ = awaiting_ = holding_ = false;
}

}  // namespace feather
