// qlearning_policy.h: the tabular Q-learning stop policy (paper §4.2 "Q-Learning Policy"), with
// the credit assignment of issue 15 item 2.
//
// The task is continuing, not one episode per batch formation. Each table decision (s, a) moves
// to the next table decision's state s'. Within a round no time passes and nothing is earned:
// an Add followed by another decision of the same round is updated toward max_a' Q(s', a'). The
// last decision of a round (its Stop, or its last Add when the selector ran dry or a limit was
// hit) is followed by the steps that execute before the next table decision; it earns their
// decode throughput r_j (decode requests / the step's decode-only time, StepDecodeRate), so
//   Q(s, a) += α · [Σ_j γ^j · r_j + γ^m · max_a' Q(s', a') − Q(s, a)]
// over the m steps in between, the first being the step the decision's round executes as. The
// paper's reward is decode throughput; the earlier form (one step's whole throughput repeated at
// every transition of a round, the round's last decision terminal) credited an admission with
// its own prefill and never with the steps it then decodes in, and gave every Add the bootstrap
// a terminal Stop lacks, so a pretrained table learned always-add. Here the consequence of an
// admission arrives where it happens: the admitted request decodes next to the batch in the
// steps that follow, and through the bootstrap a decision that ends cascade pays for the slower
// steps after it. The admission's prefill is not charged: every request is prefilled once,
// whatever the policy does. Steps without decode (prefill only) earn nothing and are not
// discounted.
//
// Decide():
//   * forced Add (not recorded, not counted) when b = 0 (an empty batch never helps), or when
//     the addition is free: Δ = 0 under a non-zero shared tip (the bandit's rule), or, with the
//     cascade bins, a candidate that keeps the batch's cascade prefix.
//   * learning: ε-greedy with ε decaying linearly from epsilon_start to epsilon_min over
//     epsilon_decay_decisions table decisions (ε(n) = start + (min − start) · min(1, n / decay),
//     n = table decisions so far; decay = 0 means ε = min). Each learning decision draws one
//     uniform from a seeded SplitMix64 and, when exploring, one more for the action. Same seed →
//     same decisions.
//   * frozen (learning() == false): greedy, no draw, no table or counter change.
//   Greedy = argmax_a Q(ŝ, a), ties to Add.
//   * hold (scheduler.qlearning.hold, cascade bins only): a Stop in a mixed batch (no
//     cascade-worthy prefix common to all its requests) of a candidate outside the batch's
//     largest group G (requests sharing their first kCascadeMinPrefixTokens tokens), with G's
//     requests in the batch plus its waiting peers at least kCascadeMinRequests (what cascade
//     needs: G can get there), is an option in the sense of Sutton, Precup and Singh (1999): it
//     holds the batch for G. While the batch stays mixed and G that large, every candidate
//     outside G is stopped and every one in G added (G grows by its waiting peers), without a
//     table decision; the hold ends when the batch qualifies for cascade (or G and its waiting
//     peers fall below the bound). Bounds measured (frozen from default / online bandit on the
//     default scenario, seeds 1-3, scheduler_time zero): G's batch requests alone >= 8: 0.946 /
//     0.965 / 0.965x; with its waiting peers (this rule): 0.980 / 0.985 / 0.982x, no-sharing
//     1.00x FCFS; G's batch requests >= 2: 0.948 / 0.991 / 0.994x, but that table ran no-sharing at
//     0.24x FCFS in the policy suite. The Stop's transition then spans
//     the whole hold: its return sums the decode throughput of every step until the next table
//     decision, as for any round's last decision. Why: a mixed batch converges to one group only if
//     its other groups' requests are refused for as many steps as they take to finish (hundreds),
//     so one Stop in a mixed batch, followed by Adds that undo it, earns nothing; the table's
//     decisions were then nearly all in mixed states, between actions whose returns differed by
//     noise, and a frozen table ran at 0.87x the online bandit on the default scenario
//     (results/policy-suite/). Learning or frozen, the hold acts the same.
// Discretization as the bandit's (policy_state.h): scheduler.state_bins, "authors" by default;
// "cascade" gives the state the batch's cascade status, its KV occupancy and the prefill backlog.
// A round without an executed step drops its decisions (their transitions are not updated).
// The last decision's transition, waiting for the next decision's state, is not part of the
// saved tables (stop_policy_io.h): a loaded policy starts without one.
//
// Complexity: Decide O(1), OnStepExecuted O(1); allocation-free.
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
  bool hold = false;  // a Stop in a mixed batch holds it for its largest group (above)
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
  void BeginRound() override { in_round_ = false; }
  [[nodiscard]] StopDecision Decide(const StopContext& context) override;
  [[nodiscard]] bool WantsBatchShape() const override {
    return config_.state_bins == StateBins::kCascade;
  }
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
  // start from given Q values); drops the transitions in flight and any hold.
  void Restore(const QLearningConfig& config, const QTables& tables, uint64_t rng_state);

 private:
  [[nodiscard]] StopDecision Greedy(uint32_t state_index) const;
  // Whether a Stop of this observation starts a hold, and whether a hold goes on through it.
  [[nodiscard]] bool MayHold(const Observation& o) const;
  [[nodiscard]] bool HoldGoesOn(const Observation& o) const;
  [[nodiscard]] double MaxQ(uint32_t state_index) const;
  void Update(uint32_t cell, double target);

  QLearningConfig config_;
  QTables tables_;
  SplitMix64 rng_;
  // The last table decision, whose transition waits for the next decision's state: made this
  // round (in_round_), or an earlier round's last one with the steps' discounted rewards since
  // (awaiting_).
  uint32_t last_cell_ = 0;
  bool in_round_ = false;
  bool awaiting_ = false;
  double return_ = 0.0;         // Σ γ^j r_j of the steps since the awaiting decision
  double return_discount_ = 1;  // γ^m
  bool holding_ = false;        // a hold is in force (config_.hold)
};

}  // namespace feather
