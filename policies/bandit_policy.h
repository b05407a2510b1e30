// bandit_policy.h: the UCB contextual bandit stop policy (paper §4.2 "Contextual Bandit"), with
// the rules of the authors' public code.
//
// Decide():
//   * forced Add when b = 0, or when Δ = 0 and the batch has a non-zero shared tip (a free
//     addition). Forced decisions are not table decisions: they are neither recorded nor credited
//     and do not count in S (the authors' code returns before consulting the table).
//   * otherwise, in the discretized state ŝ (policy_state.h), Add iff UCB(ŝ, Add) ≥ UCB(ŝ, Stop),
//       UCB(ŝ, a) = reward_sum(ŝ, a) / n(ŝ, a) + c · sqrt(ln(S + 1) / n(ŝ, a)),
//     S = decisions credited so far (ln(S + 1), the code's steps + 1, is defined at S = 0). An
//     unseen pair scores +∞; two unseen pairs tie and the tie goes to Add (as does any tie).
// OnStepExecuted(): reward r = decode tokens / step seconds is credited to every table decision
// taken since BeginRound (n += 1, reward_sum += r, S += 1). A round without an executed step
// (BeginRound again) or a step of zero duration drops its pending decisions uncredited.
//
// Frozen (learning() == false): no recording, no table change. The choice is greedy on the mean
// reward: Add iff mean(Add) ≥ mean(Stop); an action never tried loses to one that was tried; with
// neither tried, Add. (UCB's +∞ for unseen pairs would make a frozen policy explore forever.)
//
// Without a prefix signal (non-CHT selectors) Δ = 0 with no tip, so only b = 0 is forced and the
// table state is (b̂, Δ̂ of 0, ŵ from the waiting count).
//
// Complexity: Decide O(1), allocation-free once the pending buffer has reached the largest round
// (it is pre-reserved); OnStepExecuted O(decisions this round).
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "policies/config_fields.h"
#include "policies/policy_state.h"
#include "policies/stop_policy.h"

namespace feather {

struct BanditConfig {
  double exploration = 200.0;  // c
  StateBins state_bins =
      StateBins::kAuthors;  // the scenario's scheduler.state_bins, not a knob here

  // The knobs (scheduler.bandit.<key> in a scenario; policies/config_fields.h) and the rules
  // between them.
  static constexpr std::string_view kSection = "bandit";
  [[nodiscard]] static std::span<const ConfigField<BanditConfig>> Fields();
  [[nodiscard]] std::vector<ConfigRuleProblem> RuleProblems() const;
};

class BanditPolicy final : public StopPolicy {
 public:
  explicit BanditPolicy(const BanditConfig& config = {});

  [[nodiscard]] std::string_view Name() const override { return "bandit"; }
  void BeginRound() override { pending_cells_.clear(); }
  [[nodiscard]] StopDecision Decide(const StopContext& context) override;
  void OnStepExecuted(const StepFeedback& feedback) override;

  // UCB score of one cell given the current S (+∞ when unseen).
  [[nodiscard]] double Ucb(uint32_t state_index, StopDecision action) const;

  [[nodiscard]] const BanditConfig& config() const { return config_; }
  [[nodiscard]] const BanditTables& tables() const { return tables_; }
  // Replaces configuration and tables (stop_policy_io.h's load); drops pending decisions.
  void Restore(const BanditConfig& config, const BanditTables& tables);

 private:
  BanditConfig config_;
  BanditTables tables_;
  std::vector<uint32_t> pending_cells_;  // CellIndex of each table decision this round
};

}  // namespace feather
