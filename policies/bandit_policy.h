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
// taken since BeginRound (n += 1, reward_sum += r, S += 1).
//
// Two stop names build this class:
//   bandit          reward = tokens the step sampled / the step's reward time
//                   (scheduler.reward_time: the whole step, or its decode requests alone);
//                   c = scheduler.bandit.exploration, bins = scheduler.state_bins.
//   bandit-authors  the authors' public code exactly, pinned whatever the scenario's knobs or
//                   the defaults say: reward = requests in the executed step (its final batch
//                   size, prefill chunks included) / the whole step's execution time, c = 200,
//                   the authors' bins (policy_state.h). BanditConfig::Authors().
//   bandit-delayed  the same table and UCB rule, with delayed credit (issue 15 item 2): the step
//                   reward sees an admitted prompt's prefill in the rewarded step and never the
//                   steps the request then decodes in, so it learns to stop wherever admission
//                   means prefill. Here each table decision of the round executed as step t waits
//                   for the window of steps t+1 .. t+K (K = scheduler.bandit.credit_steps), the
//                   first K steps in which the admitted requests decode next to the batch; then
//                     r = Σ decode requests / (Σ decode-only ns + charge)   over the window,
//                   decode-only ns being StepFeedback::decode_ns (the step's decode part alone;
//                   unpriced steps count whole), charge = for an Add its share of step t's
//                   prefill time (prefill ns / the round's admissions, forced ones included),
//                   for a Stop 0. So an admission pays its prefill once, spread over K decode
//                   steps, and a Stop is credited with the decode throughput the batch then runs
//                   at without the candidate. Other rounds' prefills are nobody's charge in the
//                   window. Delayed credit and UCB: a cell never credited but with a decision in
//                   flight scores −∞ (not +∞), so an untried action is tried once and then waits
//                   for its credit instead of being repeated for K steps. Decisions still in
//                   flight at the end of a run are never credited; Restore() drops them.
//                   c and bins follow the knobs, as for `bandit`.
// The two rewards differ when a step holds a prefill chunk that samples no token (chunked
// prefill of a long prompt): `bandit` does not count that request, the authors' code does. A round without an executed step
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
// (it is pre-reserved); OnStepExecuted O(decisions this round) (bandit-delayed: amortized, the
// window sums come from running totals kept in two (K+1)-entry rings; the in-flight FIFO is
// compacted in place, allocation-free once it has reached its largest size).
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "policies/config_fields.h"
#include "policies/policy_state.h"
#include "policies/stop_policy.h"

namespace feather {

// What a step's reward counts; chosen by the stop name, not a scenario knob.
enum class BanditReward : uint8_t {
  kDecodeThroughput,  // bandit: decode_tokens / step_ns
  kAuthors,           // bandit-authors: batch_size / whole_step_ns
  kDelayed,           // bandit-delayed: decode throughput of the next credit_steps steps
};

struct BanditConfig {
  double exploration = 200.0;  // c
  // The scenario's scheduler.state_bins, not a knob here.
  StateBins state_bins = StateBins::kAuthors;
  BanditReward reward = BanditReward::kDecodeThroughput;  // set by the stop name, not a knob
  // bandit-delayed: K, the steps after a round over which its decisions are credited (the
  // admitted requests' first K decode steps). The other two rewards ignore it.
  uint32_t credit_steps = 128;

  // bandit-authors: c = 200, the authors' bins, the authors' reward. Literal constants, so a
  // change of the defaults above leaves it where it is.
  [[nodiscard]] static constexpr BanditConfig Authors() {
    BanditConfig c;
    c.exploration = 200.0;
    c.state_bins = StateBins::kAuthors;
    c.reward = BanditReward::kAuthors;
    return c;
  }

  // The knobs (scheduler.bandit.<key> in a scenario; policies/config_fields.h) and the rules
  // between them.
  static constexpr std::string_view kSection = "bandit";
  [[nodiscard]] static std::span<const ConfigField<BanditConfig>> Fields();
  [[nodiscard]] std::vector<ConfigRuleProblem> RuleProblems() const;
};

class BanditPolicy final : public StopPolicy {
 public:
  explicit BanditPolicy(const BanditConfig& config = {});

  [[nodiscard]] std::string_view Name() const override {
    switch (config_.reward) {
      case BanditReward::kAuthors:
        return "bandit-authors";
      case BanditReward::kDelayed:
        return "bandit-delayed";
      case BanditReward::kDecodeThroughput:
        break;
    }
    return "bandit";
  }
  void BeginRound() override;
  [[nodiscard]] StopDecision Decide(const StopContext& context) override;
  // The cascade bins read the batch shape.
  [[nodiscard]] bool WantsBatchShape() const override {
    return config_.state_bins == StateBins::kCascade;
  }
  void OnStepExecuted(const StepFeedback& feedback) override;

  // UCB score of one cell given the current S (+∞ when unseen; bandit-delayed: −∞ when never
  // credited but a decision of it is in flight).
  [[nodiscard]] double Ucb(uint32_t state_index, StopDecision action) const;

  [[nodiscard]] const BanditConfig& config() const { return config_; }
  [[nodiscard]] const BanditTables& tables() const { return tables_; }
  // Replaces configuration and tables (stop_policy_io.h's load); drops pending decisions. The
  // reward kind (the policy's name) is kept from the current configuration.
  void Restore(const BanditConfig& config, const BanditTables& tables);

 private:
  void CreditDelayed(const StepFeedback& feedback);
  void ResetDelayed();

  BanditConfig config_;
  BanditTables tables_;
  std::vector<uint32_t> pending_cells_;  // CellIndex of each table decision this round
  uint32_t adds_this_round_ = 0;         // Decide() answers kAdd this round, forced ones included

  // bandit-delayed. Steps are numbered from 0 in OnStepExecuted order; a round's decisions wait
  // in `in_flight_` (FIFO from `in_flight_head_`) until the K-th step after their own, then are
  // credited from running sums kept for the last K + 1 steps (ring buffers indexed step % (K+1)).
  struct InFlight {
    uint64_t step = 0;  // the step of the decision's round
    uint32_t cell = 0;
    double charge_ns = 0.0;  // the admission's share of its round's prefill time (Add only)
  };
  uint64_t steps_ = 0;
  // Decisions in flight per cell: a cell never credited but with a decision in flight scores
  // −∞, not +∞ (it has been tried once; trying it again before its credit lands would repeat an
  // untested action for K steps).
  std::array<uint32_t, kNumCells> in_flight_count_{};
  std::vector<InFlight> in_flight_;
  size_t in_flight_head_ = 0;
  std::vector<double> cum_tokens_;  // decode tokens of steps 0..s, at s % (K+1)
  std::vector<double> cum_ns_;      // decode ns of steps 0..s, at s % (K+1)
};

}  // namespace feather
