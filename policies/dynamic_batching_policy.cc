// dynamic_batching_policy.cc: see dynamic_batching_policy.h for the two caps and the fit.
#include "policies/dynamic_batching_policy.h"

#include <array>
#include <span>
#include <string>
#include <vector>

namespace feather {

std::span<const ConfigField<DynamicBatchingConfig>> DynamicBatchingConfig::Fields() {
  using C = DynamicBatchingConfig;
  static constexpr std::array<ConfigField<C>, 3> kFields = {{
      {"latency_target_ms", &C::latency_target_ms, ConfigField<C>::Real(0, 1e9, true)},
      {"memory_fraction", &C::memory_fraction, ConfigField<C>::Real(0, 1, true)},
      {"forgetting", &C::forgetting, ConfigField<C>::Real(0, 1, true)},
  }};
  return kFields;
}

std::vector<ConfigRuleProblem> DynamicBatchingConfig::RuleProblems() const { return {}; }

std::optional<double> DynamicBatchingPolicy::PredictStepMs(uint32_t batch_size) const {
  const LatencyFit& f = fit_;
  if (f.min_batch_seen == f.max_batch_seen) return std::nullopt;
  const double det = f.weight_sum * f.n2_sum - f.n_sum * f.n_sum;
  // Relative threshold: forgetting can shrink every sum towards zero together.
  if (!(det > 1e-12 * f.weight_sum * f.n2_sum)) return std::nullopt;
  const double slope = (f.weight_sum * f.nt_sum - f.n_sum * f.t_sum) / det;
  const double intercept = (f.t_sum - slope * f.n_sum) / f.weight_sum;
  return intercept + slope * static_cast<double>(batch_size);
}

StopDecision DynamicBatchingPolicy::Decide(const StopContext& context) {
  if (context.batch_size == 0) return StopDecision::kAdd;
  if (context.kv_total_blocks > 0) {
    const double needed_blocks =
        static_cast<double>(context.kv_used_blocks) + static_cast<double>(context.candidate_blocks);
    if (needed_blocks > config_.memory_fraction * static_cast<double>(context.kv_total_blocks)) {
      return StopDecision::kStop;
    }
  }
  const std::optional<double> predicted_ms = PredictStepMs(context.batch_size + 1);
  if (predicted_ms && *predicted_ms > config_.latency_target_ms) return StopDecision::kStop;
  return StopDecision::kAdd;
}

void DynamicBatchingPolicy::OnStepExecuted(const StepFeedback& feedback) {
  if (!learning() || feedback.step_ns <= 0 || feedback.batch_size == 0) return;
  const auto n = static_cast<double>(feedback.batch_size);
  const double t_ms = static_cast<double>(feedback.step_ns) * 1e-6;
  LatencyFit& f = fit_;
  const double keep = config_.forgetting;
  f.weight_sum = keep * f.weight_sum + 1.0;
  f.n_sum = keep * f.n_sum + n;
  f.n2_sum = keep * f.n2_sum + n * n;
  f.t_sum = keep * f.t_sum + t_ms;
  f.nt_sum = keep * f.nt_sum + n * t_ms;
  if (f.min_batch_seen == 0 || feedback.batch_size < f.min_batch_seen) {
    f.min_batch_seen = feedback.batch_size;
  }
  if (feedback.batch_size > f.max_batch_seen) f.max_batch_seen = feedback.batch_size;
}

void DynamicBatchingPolicy::Restore(const DynamicBatchingConfig& config, const LatencyFit& fit) {
  config_ = config;
  fit_ = fit;
}

}  // namespace feather
