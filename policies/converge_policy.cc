// converge_policy.cc: see converge_policy.h for the two rules.
#include "policies/converge_policy.h"

namespace feather {

StopDecision ConvergePolicy::Decide(const StopContext& c) {
  if (c.batch_size == 0 || c.waiting < kMinBacklogRequests) return StopDecision::kAdd;
  static_assert(StopContext::kPrefixGroupDepths[0] == kCascadeMinPrefixTokens);
  if (c.batch_common_prefix_tokens >= kCascadeMinPrefixTokens) {
    return c.candidate_common_prefix_tokens >= kCascadeMinPrefixTokens ? StopDecision::kAdd
                                                                       : StopDecision::kStop;
  }
  const StopContext::PrefixGroup& g = c.largest_groups[0];
  if (!g.candidate_in && g.requests >= kCascadeMinRequests) return StopDecision::kStop;
  return StopDecision::kAdd;
}

}  // namespace feather
