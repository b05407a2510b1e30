// always_add_policy.h: the "no RL" stop policy — admit every candidate the selector proposes, so
// the batch grows until the selector runs dry (or the serving loop's own caps stop it). This is
// vLLM's and SGLang's behaviour, the baseline every other stop policy is compared against.
//
// Complexity: every operation O(1); no state, so learning() has no effect.
#pragma once

#include <string_view>

#include "policies/stop_policy.h"

namespace feather {

class AlwaysAddPolicy final : public StopPolicy {
 public:
  AlwaysAddPolicy() = default;

  [[nodiscard]] std::string_view Name() const override { return "always"; }
  void BeginRound() override {}
  [[nodiscard]] StopDecision Decide(const StopContext& context) override;
  void OnStepExecuted(const StepFeedback& feedback) override;
};

}  // namespace feather
