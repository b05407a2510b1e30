// validation_report.h: the pieces of `feather validate`'s validation.json that are pure
// functions of numbers: one metric's comparison of measured runs against predicted runs with its
// verdict, and the same-plan comparison of the model with the real engine step by step, by term
// and by kind of step. The command (validate_command.h) runs the engines and feeds these.
//
// One metric (CompareMetric). The real side ran N times (`measured_runs`); the model ran once
// without noise (`predicted`, the point prediction) and M times with seeded step-time noise
// drawn from the profile's measured spread (`predicted_runs`, sim/engine/step_noise.h; empty
// when the profile has no step_noise section or M < 2). Reported:
//   measured, measured_stdev, measured_spread, measured_runs   mean, sample stdev (n − 1; 0 for
//                                one run), (max − min) / mean, each run
//   predicted, rel_error, signed_error   the point prediction and its error against the mean
//   predicted_mean, predicted_stdev, predicted_interval, predicted_runs   over the noisy runs:
//                                the interval is mean ± 2 · stdev (about 95 % for a normal
//                                spread), its lower end clipped at 0 (every metric is
//                                non-negative); without noisy runs mean = the point, stdev 0 and
//                                the interval is [point, point]
//   mean_rel_error               |predicted_mean − measured| / measured
//   target_rel_error             the target for the metric (throughput 5 %, mean TBT
//                                10 %), null where there is none
//   inside_interval, within_target (null without a target), verdict: "inside_interval" when the
//                                measured mean lies in the predicted interval, else
//                                "within_target" when mean_rel_error <= the target, else
//                                "outside"; pass = verdict != "outside"
// O(N + M).
//
// Same plans (SamePlanComparison). Every step a real engine executed is also priced by the
// model on the identical plan. Per step the absolute relative error |p − m| / m of the total;
// per term t the mean of |p_t − m_t| / m (the term's share of the step error, m the measured
// total: these shares bound the step error from above and say which term carries it), the
// signed mean of (p_t − m_t) / m (bias), and the term MAPE |p_t − m_t| / m_t over the steps
// where the term was measured; the step MAPE by kind of step: decode (every request decodes),
// prefill (none does), mixed, each split by cascade; and by shape: per kind, steps binned by
// new tokens n in powers of two (n = 1, 2–3, 4–7, …, 2048+), each bin with its step MAPE, signed
// mean error and every term's signed share, so a reader sees which shapes carry the error and
// through which term. With the profile's measured step noise (SetNoise: per-term cv, as
// StepNoiseCv gives it), also the noise floor: the MAPE a perfect model would still show
// against single executions whose terms vary by those cvs (a normal spread: E|z| = sqrt(2/π)),
// per step sqrt(2/π) · sqrt(Σ (cv_t · p_t)²) / p and per term sqrt(2/π) · cv_t · p_t / p, both
// averaged over the steps (p the predicted step, p_t its terms). Calibration fits medians of R
// repetitions, so its hold-out error does not contain this; a same-plan error near the floor is
// the machine's noise, not the model. O(terms) per step, no allocation.
#pragma once

#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string_view>

#include "sim/engine/engine.h"
#include "sim/engine/model_engine.h"

namespace feather {

[[nodiscard]] nlohmann::ordered_json CompareMetric(std::span<const double> measured_runs,
                                                   double predicted,
                                                   std::span<const double> predicted_runs,
                                                   std::optional<double> target_rel_error);

// The targets: throughput_tok_s 0.05, mean_tbt_ms 0.10; nullopt for other metrics.
[[nodiscard]] std::optional<double> MetricTarget(std::string_view metric);

// Kinds of step for the same-plan breakdown.
enum class StepKind : uint8_t { kDecode, kPrefill, kMixed, kCount };
[[nodiscard]] StepKind KindOf(const StepShape& shape);
[[nodiscard]] std::string_view StepKindName(StepKind kind);

class SamePlanComparison {
 public:
  // The per-term cv of the machine's step noise (sim/engine/step_noise.h StepNoiseCv); without
  // it the report has no noise_floor.
  void SetNoise(const std::array<double, kNumStepTerms>& cv) { noise_cv_ = cv; }
  void Add(const StepShape& shape, const StepTiming& measured, const StepTiming& predicted);
  [[nodiscard]] uint64_t steps() const { return steps_; }
  // {"steps", "step_time_mape", "engine_time_s": {measured, predicted}, "terms": {NAME:
  //  {measured_s, predicted_s, error_share, signed_share, mape, steps}}, "by_kind": {KIND:
  //  {cascade|no_cascade: {steps, step_time_mape, signed_mean_error}}}, "by_shape": {KIND:
  //  {"n=LO-HI": {steps, step_time_mape, signed_mean_error, measured_ms, signed_share: {TERM:
  //  …}}}}} (only non-empty kinds and bins; measured_ms the bin's mean measured step),
  //  "noise_floor": {step_time_mape, terms: {TERM: share}} (after SetNoise)
  [[nodiscard]] nlohmann::ordered_json Report() const;

 private:
  struct Group {
    uint64_t steps = 0;
    double abs_rel_error_sum = 0;
    double signed_rel_error_sum = 0;
  };
  uint64_t steps_ = 0;
  double abs_rel_error_sum_ = 0;
  double measured_ns_ = 0;
  double predicted_ns_ = 0;
  std::array<double, kNumStepTerms> measured_term_ns_{};
  std::array<double, kNumStepTerms> predicted_term_ns_{};
  std::array<double, kNumStepTerms> error_share_sum_{};
  std::array<double, kNumStepTerms> signed_share_sum_{};
  std::array<double, kNumStepTerms> term_ape_sum_{};
  std::array<uint64_t, kNumStepTerms> term_steps_{};
  std::array<std::array<Group, 2>, static_cast<size_t>(StepKind::kCount)> groups_{};
  static constexpr size_t kSizeBins = 12;  // n = 1, 2–3, …, 1024–2047, 2048+
  struct ShapeBin {
    Group group;
    double measured_ns = 0;
    std::array<double, kNumStepTerms> signed_share_sum{};
  };
  std::array<std::array<ShapeBin, kSizeBins>, static_cast<size_t>(StepKind::kCount)> shapes_{};
  std::optional<std::array<double, kNumStepTerms>> noise_cv_;
  double floor_sum_ = 0;
  std::array<double, kNumStepTerms> floor_share_sum_{};
};

}  // namespace feather
