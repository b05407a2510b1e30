// dynamic_batching_policy.h: the "memory-aware and latency-constrained dynamic batching"
// baseline of the paper's evaluation: the batch grows until KV memory or a step-time target
// says stop. It ignores prefix signals entirely.
//
// Decide() for a candidate joining a batch of b requests:
//   * b = 0 → Add (progress: a lone request that does not fit is the KV manager's business).
//   * memory cap: Stop if kv_used_blocks + candidate_blocks > memory_fraction · kv_total_blocks
//     (skipped when kv_total_blocks = 0, i.e. the caller does not report memory).
//   * latency cap: Stop if the fitted step time at b + 1 exceeds latency_target_ms.
//   * otherwise Add.
// The step-time model is an online least-squares line t_ms ≈ intercept + slope · n over the
// (batch size n, step time) pairs of the executed steps, with exponential forgetting: before
// adding a point every accumulated sum is multiplied by `forgetting` (1 = plain least squares;
// the default 0.99 weights roughly the last 100 steps, since step time drifts as contexts grow).
// Until two distinct batch sizes have been seen (or the fit is degenerate) the latency cap
// admits. Frozen (learning() == false): the fit is not updated.
//
// Complexity: every operation O(1), allocation-free.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "policies/config_fields.h"
#include "policies/stop_policy.h"

namespace feather {

struct DynamicBatchingConfig {
  double latency_target_ms = 50.0;  // step-time (TBT) target
  double memory_fraction = 0.95;    // KV-use ceiling, fraction of the pool
  double forgetting = 0.99;         // per-step decay of the fit's past points, in (0, 1]

  // The knobs (scheduler.dynamic_batching.<key> in a scenario; policies/config_fields.h) and the
  // rules between them.
  static constexpr std::string_view kSection = "dynamic_batching";
  [[nodiscard]] static std::span<const ConfigField<DynamicBatchingConfig>> Fields();
  [[nodiscard]] std::vector<ConfigRuleProblem> RuleProblems() const;
};

// Weighted sums of the least-squares fit (n = batch size, t = step time in ms).
struct LatencyFit {
  double weight_sum = 0;
  double n_sum = 0;
  double n2_sum = 0;
  double t_sum = 0;
  double nt_sum = 0;
  uint32_t min_batch_seen = 0;  // 0 = no point yet
  uint32_t max_batch_seen = 0;
};

class DynamicBatchingPolicy final : public StopPolicy {
 public:
  explicit DynamicBatchingPolicy(const DynamicBatchingConfig& config = {}) : config_(config) {}

  [[nodiscard]] std::string_view Name() const override { return "dynamic-batching"; }
  void BeginRound() override {}
  [[nodiscard]] StopDecision Decide(const StopContext& context) override;
  void OnStepExecuted(const StepFeedback& feedback) override;

  // Fitted step time at `batch_size`, or nullopt before two distinct batch sizes were seen.
  [[nodiscard]] std::optional<double> PredictStepMs(uint32_t batch_size) const;

  [[nodiscard]] const DynamicBatchingConfig& config() const { return config_; }
  [[nodiscard]] const LatencyFit& fit() const { return fit_; }
  // Replaces configuration and fit (stop_policy_io.h's load).
  void Restore(const DynamicBatchingConfig& config, const LatencyFit& fit);

 private:
  DynamicBatchingConfig config_;
  LatencyFit fit_;
};

}  // namespace feather
