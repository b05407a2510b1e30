// always_add_policy.cc: see always_add_policy.h.
#include "policies/always_add_policy.h"

namespace feather {

StopDecision AlwaysAddPolicy::Decide(const StopContext& /*context*/) { return StopDecision::kAdd; }

void AlwaysAddPolicy::OnStepExecuted(const StepFeedback& /*feedback*/) {}

}  // namespace feather
