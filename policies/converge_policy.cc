// converge_policy.cc: see converge_policy.h for the rules and the gate.
#include "policies/converge_policy.h"

#include <algorithm>
#include <optional>

namespace feather {

uint32_t ConvergePolicy::MixedBatchRequests(const StopContext& c) {
  const uint64_t n = c.batch_size;
  uint64_t limit = n + c.waiting;  // the candidate is among the waiting
  if (c.max_batch_requests > 0) limit = std::min<uint64_t>(limit, c.max_batch_requests);
  if (c.kv_total_blocks > 0 && c.kv_block_tokens > 0 && n > 0) {
    // Free KV over what one more request takes: the batch's distinct tokens per request (its
    // own tokens and its share of its group's prefix) and a block to decode into.
    const uint64_t free_tokens =
        (c.kv_total_blocks - std::min(c.kv_total_blocks, c.kv_used_blocks)) * c.kv_block_tokens;
    limit = std::min(limit, n + free_tokens / (c.batch_unique_kv_tokens / n + c.kv_block_tokens));
  }
  return static_cast<uint32_t>(std::max<uint64_t>(limit, n + 1));
}

void ConvergePolicy::OnStepExecuted(const StepFeedback& f) {
  if (!gated_) return;
  all_steps_.OnStepExecuted(f);
  (f.cascade_used ? cascade_steps_ : plain_steps_).OnStepExecuted(f);
}

std::optional<double> ConvergePolicy::MixedRate(
    const std::array<double, DecodeTimeFit::kTerms>& prices, const StopContext& c,
    uint32_t big) const {
  const uint32_t n = c.batch_size;
  const uint64_t added = big - n;
  // The added requests are taken to hold distinct tokens as the batch's do on average (their
  // own and their share of a group prefix), plus the candidate's uncached tokens once.
  const uint64_t own = c.candidate_tokens - std::min(c.candidate_tokens, c.candidate_cached_tokens);
  const double t = all_steps_.PredictDecodeMsWith(
      prices, big, c.batch_kv_tokens + added * c.candidate_tokens,
      c.batch_unique_kv_tokens + added * (c.batch_unique_kv_tokens / n) + own,
      /*common_prefix_tokens=*/0);
  if (!(t > 0)) return std::nullopt;
  return static_cast<double>(big) / t;
}

bool ConvergePolicy::Deepen(const StopContext& c) {
  // Rule 1b (converge_policy.h): the deepest group of the batch that can cascade, lies within
  // the first depth's largest group and has waiting peers; a candidate outside it is skipped.
  if (c.largest_groups[0].requests < kCascadeMinRequests || !c.largest_groups[0].candidate_in) {
    return false;
  }
  for (size_t d = c.largest_groups.size(); d-- > 1;) {
    const StopContext::PrefixGroup& g = c.largest_groups[d];
    if (g.requests < kCascadeMinRequests || !g.nested || g.waiting == 0) continue;
    return !g.candidate_in;
  }
  return false;
}

StopDecision ConvergePolicy::Decide(const StopContext& c) {
  const uint32_t n = c.batch_size;
  if (n == 0 || c.waiting < kMinBacklogRequests) return StopDecision::kAdd;
  static_assert(StopContext::kPrefixGroupDepths[0] == kCascadeMinPrefixTokens);
  const StopContext::PrefixGroup& g = c.largest_groups[0];
  const bool homogeneous = c.batch_common_prefix_tokens >= kCascadeMinPrefixTokens;
  const bool add = homogeneous ? c.candidate_common_prefix_tokens >= kCascadeMinPrefixTokens
                               : g.candidate_in || g.requests < kCascadeMinRequests;
  if (add) return Deepen(c) ? StopDecision::kSkip : StopDecision::kAdd;
  // Rule 2 (a homogeneous batch: Stop) or 3 (a mixed one, converging to G: Skip, so that the
  // round goes on to G's waiting peers), unless the gate opens: the batch kept to its group,
  // refilled from the group's waiting requests, decoding with cascade, against the mixed batch
  // that admitting leads to.
  const StopDecision hold = homogeneous ? StopDecision::kStop : StopDecision::kSkip;
  if (!gated_) return hold;
  const auto pooled = all_steps_.TiedReadCoefficients();
  if (!pooled) return hold;
  // Each batch at the prices of the steps of its kind, once those have min_steps steps.
  const auto kept_prices = cascade_steps_.TiedReadCoefficients().value_or(*pooled);
  const auto mixed_prices = plain_steps_.TiedReadCoefficients().value_or(*pooled);
  const uint32_t big = MixedBatchRequests(c);
  const uint32_t m = homogeneous ? n : g.requests;
  const uint32_t prefix = homogeneous ? c.batch_common_prefix_tokens : g.prefix_tokens;
  const uint32_t kept = std::max(m, std::min(big, m + g.waiting));
  const double avg = static_cast<double>(c.batch_kv_tokens) / n;
  const double unique = prefix + std::max(0.0, avg - prefix) * kept;
  const double t = all_steps_.PredictDecodeMsWith(
      kept_prices, kept, static_cast<uint64_t>(avg * kept), static_cast<uint64_t>(unique), prefix);
  if (!(t > 0)) return hold;
  const std::optional<double> mixed = MixedRate(mixed_prices, c, big);
  return mixed && *mixed > kept / t ? StopDecision::kAdd : hold;
}

}  // namespace feather
