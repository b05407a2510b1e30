// converge_policy.h: the `converge` stop policy (issue 15, beyond the paper): no table, no fit,
// two rules on the batch's shape that keep batches homogeneous where cascade attention pays and
// step aside where it cannot.
//
// Why. With a shared prefix of P tokens, a decode step of n requests reads the prefix once under
// cascade attention and n times without it; on the default scenario (5K-token prefixes) that is
// most of the step's time. Cascade needs a prefix common to every request of the step (vLLM's
// rule, base/cascade_rule.h), so one candidate from another group ends it for the whole batch,
// for every step until the last request of either group finishes. The learning policies must
// discover this from a reward; here it is stated. Conversely, where requests do not wait
// (arrival-bound load) or groups are small, holding a candidate back only delays it, so both
// rules need a backlog and a group large enough to cascade.
//
// Decide(), with W = requests waiting (the candidate included), the batch = running + admitted
// this round, G = the batch's largest group of requests sharing their first
// kCascadeMinPrefixTokens tokens (StopContext::largest_groups[0]):
//   1. empty batch                                           → Add
//   2. guard: the batch shares a cascade-worthy prefix (≥ kCascadeMinPrefixTokens leading tokens
//      common to all its requests), the candidate would end it, and W ≥ kMinBacklogRequests
//                                                            → Stop (the batch drains, then the
//      next group starts a batch of its own: the CHT proposes a new group's peers first)
//   3. converge: the batch is mixed, the candidate is outside G, G holds at least
//      kCascadeMinRequests requests, and W ≥ kMinBacklogRequests
//                                                            → Stop (slots go to G's peers only,
//      so the batch converges to G and qualifies for cascade once the others finish)
//   4. otherwise                                             → Add
// A Stop ends the round (stop_policy.h): rule 3 can only hold back, not pick G's peers, and the
// CHT proposes by fewest missing chunks, so convergence takes as many steps as the other groups'
// requests take to finish. kMinBacklogRequests (64) is an assumed constant, the same for every
// scenario (not tuned per scenario): below it the server keeps up with arrivals and a Stop only
// delays. Measured in results/policy-suite/ (the README there gives the figures).
//
// Frozen or learning makes no difference (nothing is learned). Needs the batch shape
// (WantsBatchShape). Complexity: Decide O(1), allocation-free.
#pragma once

#include <cstdint>
#include <string_view>

#include "base/cascade_rule.h"
#include "policies/stop_policy.h"

namespace feather {

class ConvergePolicy final : public StopPolicy {
 public:
  // Requests waiting below which neither rule holds a candidate back (assumed).
  static constexpr uint32_t kMinBacklogRequests = 64;

  [[nodiscard]] std::string_view Name() const override { return "converge"; }
  void BeginRound() override {}
  [[nodiscard]] StopDecision Decide(const StopContext& context) override;
  [[nodiscard]] bool WantsBatchShape() const override { return true; }
  void OnStepExecuted(const StepFeedback& /*feedback*/) override {}
};

}  // namespace feather
