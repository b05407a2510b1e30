// heuristic_policy.h: the paper's rule-based stop policy (§4.2 "Heuristic Policy"), with the
// constants of the authors' public code (DESIGN.md, "Facts from the authors' public code").
//
// Decide() for a candidate with tip loss Δ = tip before − tip after (chunks) and w peers:
//   1. b = 0 (empty batch)                          → Add (a dispatched empty batch is useless)
//   2. Δ ≤ max_loss_chunks (5)                      → Add (covers the paper's "free additions")
//   3. Δ ≤ relaxed_loss_chunks (7) and w ≥ relaxed_min_peers (10) → Add (loss amortized by peers)
//   4. b < floor                                    → Add (small batches under-use the GPU)
//   5. otherwise                                    → Stop
// The floor is policy state that persists across rounds: it starts at 1 and grows by one on every
// Add (by any rule), capped at floor_cap (10). Reading chosen because the paper says "when the
// batch is small, it tolerates higher loss" and b counts the running requests: a floor reset to
// 1 every round would be below b in almost every round of continuous batching, i.e. never apply.
// Once warmed up (after floor_cap − 1 admissions) rule 4 reads "admit while b < 10".
//
// Without a prefix signal (non-CHT selectors) Δ = 0, so rule 2 admits everything: the heuristic
// then behaves as always-add. The heuristic does not learn: learning() has no effect, and the
// floor grows whether or not the policy is frozen (it is part of the rule, not a learned table).
//
// Complexity: every operation O(1), allocation-free.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "policies/config_fields.h"
#include "policies/stop_policy.h"

namespace feather {

struct HeuristicConfig {
  uint32_t max_loss_chunks = 5;
  uint32_t relaxed_loss_chunks = 7;
  uint32_t relaxed_min_peers = 10;
  uint32_t floor_cap = 10;

  // The knobs (scheduler.heuristic.<key> in a scenario; policies/config_fields.h) and the rules
  // between them.
  static constexpr std::string_view kSection = "heuristic";
  [[nodiscard]] static std::span<const ConfigField<HeuristicConfig>> Fields();
  [[nodiscard]] std::vector<ConfigRuleProblem> RuleProblems() const;
};

class HeuristicPolicy final : public StopPolicy {
 public:
  explicit HeuristicPolicy(const HeuristicConfig& config = {}) : config_(config) {}

  [[nodiscard]] std::string_view Name() const override { return "heuristic"; }
  void BeginRound() override {}
  [[nodiscard]] StopDecision Decide(const StopContext& context) override;
  void OnStepExecuted(const StepFeedback& /*feedback*/) override {}

  [[nodiscard]] const HeuristicConfig& config() const { return config_; }
  [[nodiscard]] uint32_t floor() const { return floor_; }
  // Replaces configuration and floor (stop_policy_io.h's load).
  void Restore(const HeuristicConfig& config, uint32_t floor);

 private:
  HeuristicConfig config_;
  uint32_t floor_ = 1;
};

}  // namespace feather
