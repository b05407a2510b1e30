// heuristic_policy.cc: see heuristic_policy.h for the rules and the floor's reading.
#include "policies/heuristic_policy.h"

#include "policies/policy_state.h"

namespace feather {

StopDecision HeuristicPolicy::Decide(const StopContext& context) {
  const Observation o = Observe(context);
  const bool add = o.batch_size == 0 ||
                   o.tip_loss_chunks <= static_cast<int64_t>(config_.max_loss_chunks) ||
                   (o.tip_loss_chunks <= static_cast<int64_t>(config_.relaxed_loss_chunks) &&
                    o.peers >= config_.relaxed_min_peers) ||
                   o.batch_size < floor_;
  if (!add) return StopDecision::kStop;
  if (floor_ < config_.floor_cap) ++floor_;
  return StopDecision::kAdd;
}

void HeuristicPolicy::Restore(const HeuristicConfig& config, uint32_t floor) {
  config_ = config;
  floor_ = floor;
}

}  // namespace feather
