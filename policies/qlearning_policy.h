// qlearning_policy.h: the tabular Q-learning stop policy (paper §4.2 "Q-Learning Policy").
//
// An episode is one batch formation: the table decisions (s0, a0), ..., (sk, ak) taken between
// BeginRound() and OnStepExecuted(). The step's reward r (decode tokens / step seconds) is the
// reward of every transition; for i < k the next state is s(i+1), the last decision is terminal:
//   Q(si, ai) += α · [r + γ · max_a' Q(s(i+1), a') − Q(si, ai)]   (i < k)
//   Q(sk, ak) += α · [r − Q(sk, ak)]                                (terminal)
// Updates are applied in decision order (i = 0 first), each reading the table as updated so far
// — what online Q-learning would do had the reward been known at each transition. Q starts at 0.
//
// Decide():
//   * forced Add when b = 0 (not recorded, not counted): dispatching an empty batch is never
//     useful, and a learner allowed to would stall the server while it explores.
//   * learning: ε-greedy with ε decaying linearly from epsilon_start to epsilon_min over
//     epsilon_decay_decisions table decisions (ε(n) = start + (min − start) · min(1, n / decay),
//     n = table decisions so far; decay = 0 means ε = min). Each learning decision draws one
//     uniform from a seeded SplitMix64 and, when exploring, one more for the action. Same seed →
//     same decisions.
//   * frozen (learning() == false): greedy, no draw, no table or counter change.
//   Greedy = argmax_a Q(ŝ, a), ties to Add.
// Discretization as the bandit's (policy_state.h; "authors" by default). Without a prefix
// signal Δ = 0 and w = the waiting count, so the state is (b̂, 0, ŵ).
// A round without an executed step, or a step of zero duration, drops its episode.
//
// Complexity: Decide O(1), allocation-free once the pending buffer has reached the largest round;
// OnStepExecuted O(decisions this round).
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "policies/config_fields.h"
#include "policies/policy_state.h"
#include "policies/stop_policy.h"

namespace feather {

struct QLearningConfig {
  double learning_rate = 0.1;  // α
  double discount = 0.9;       // γ
  double epsilon_start = 1.0;
  double epsilon_min = 0.05;
  uint64_t epsilon_decay_decisions = 20000;
  StateBins state_bins =
      StateBins::kAuthors;  // the scenario's scheduler.state_bins, not a knob here

  // The knobs (scheduler.qlearning.<key> in a scenario; policies/config_fields.h) and the rules
  // between them.
  static constexpr std::string_view kSection = "qlearning";
  [[nodiscard]] static std::span<const ConfigField<QLearningConfig>> Fields();
  [[nodiscard]] std::vector<ConfigRuleProblem> RuleProblems() const;
};

class QLearningPolicy final : public StopPolicy {
 public:
  explicit QLearningPolicy(const QLearningConfig& config = {}, uint64_t seed = 1);

  [[nodiscard]] std::string_view Name() const override { return "qlearning"; }
  void BeginRound() override { pending_cells_.clear(); }
  [[nodiscard]] StopDecision Decide(const StopContext& context) override;
  void OnStepExecuted(const StepFeedback& feedback) override;

  // ε after `decisions` table decisions under `config`.
  [[nodiscard]] static double EpsilonAt(const QLearningConfig& config, uint64_t decisions);
  [[nodiscard]] double epsilon() const { return EpsilonAt(config_, tables_.decisions); }
  [[nodiscard]] double Q(uint32_t state_index, StopDecision action) const {
    return tables_.q[CellIndex(state_index, action)];
  }

  [[nodiscard]] const QLearningConfig& config() const { return config_; }
  [[nodiscard]] const QTables& tables() const { return tables_; }
  [[nodiscard]] uint64_t rng_state() const { return rng_.state; }
  // Replaces configuration, table and generator state (stop_policy_io.h's load, and tests that
  // start from given Q values); drops the pending episode.
  void Restore(const QLearningConfig& config, const QTables& tables, uint64_t rng_state);

 private:
  [[nodiscard]] StopDecision Greedy(uint32_t state_index) const;

  QLearningConfig config_;
  QTables tables_;
  SplitMix64 rng_;
  std::vector<uint32_t> pending_cells_;  // CellIndex of each table decision this episode
};

}  // namespace feather
