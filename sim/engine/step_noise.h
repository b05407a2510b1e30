// step_noise.h: seeded step-time noise for the model engine, drawn from the spread a calibration
// measured (DeviceProfile::step_noise), so that a validation predicts a distribution of
// end-to-end metrics instead of a point.
//
// Why. A real engine's step times vary from one execution to the next (another tenant, a
// frequency change, cache state); a learning stop policy rewarded by those times reacts to the
// variation and settles on its own batch sizes, so N real runs of one scenario spread. A model
// run without noise is one point; N model runs with noise drawn from the measured spread give
// the interval a measured mean can be judged against (`feather validate --repeat N`).
//
// Model. Each priced term t of each step is multiplied by an independent log-normal factor
//   f = exp(mu_t + sigma_t · z),  z ~ N(0, 1),  sigma_t² = ln(1 + cv_t²),  mu_t = −sigma_t² / 2,
// so E[f] = 1 and stdev(f) = cv_t, where cv_t is the profile's `step_noise` rel_stdev of the
// term (kv_reuse takes decode_attention's; a term the profile lacks gets no noise). The factor
// is positive (a step never takes negative time) and right-skewed, as measured repetitions are.
// z comes from Box–Muller over SplitMix64 (base/splitmix64.h), not std::normal_distribution,
// whose output the standard does not fix: the same seed gives the same factors with any
// standard library. Terms are drawn in StepTerm order, two normals per pair of uniforms.
//
// Drift. A term's spread has a part the machine holds for a whole run (its speed drifts over
// minutes; the profile's drift_rel_stdev d_t, measured as the spread of calibration's per-pass
// medians): with d_t > 0 the factor is f = g_t · h, where g_t = exp(−s_t²/2 + s_t · z_run),
// s_t² = ln(1 + d_t²), is drawn once per run from one normal z_run shared by the terms (a slower
// machine slows them together; the most spread a run can get from d), and h is the per-step
// factor above with sigma_t² = max(0, ln(1 + cv_t²) − s_t²): a step's marginal spread stays
// cv_t (while d_t ≤ cv_t), and only its correlation along the run is new. With every d_t = 0
// nothing is drawn for the run, so the factors are those of a profile without drift.
//
// Only where asked: the scenario key `step_noise.enabled` (default false) turns it on, so a
// plain `feather run` stays a pure function of the plan. Cost: O(kNumStepTerms) per step, no
// allocation.
#pragma once

#include <array>
#include <cstdint>

#include "base/splitmix64.h"
#include "sim/engine/device_profile.h"
#include "sim/engine/engine.h"

namespace feather {

// The per-term coefficient of variation of `noise` (rel_stdev), indexed by StepTerm; kv_reuse
// takes decode_attention's; 0 for a term it lacks.
[[nodiscard]] std::array<double, kNumStepTerms> StepNoiseCv(const ProfileStepNoise& noise);
// The same for the run-level part (drift_rel_stdev).
[[nodiscard]] std::array<double, kNumStepTerms> StepNoiseDrift(const ProfileStepNoise& noise);

class StepNoise {
 public:
  // `drift` all 0: no run-level factor (and the draws of a profile without drift).
  StepNoise(const std::array<double, kNumStepTerms>& cv, uint64_t seed,
            const std::array<double, kNumStepTerms>& drift = {});

  // The run's factor per term (1 without drift), fixed at construction.
  [[nodiscard]] const std::array<double, kNumStepTerms>& run_factors() const {
    return run_factors_;
  }

  // A factor per term (1 where its cv is 0), drawn as in the file comment, the run's included.
  [[nodiscard]] std::array<double, kNumStepTerms> NextFactors();
  // `timing` with each term scaled by its factor and rounded to whole ns; total = Σ terms.
  [[nodiscard]] StepTiming Apply(const StepTiming& timing);

 private:
  [[nodiscard]] double NextNormal();

  std::array<double, kNumStepTerms> mu_{};
  std::array<double, kNumStepTerms> sigma_{};
  std::array<double, kNumStepTerms> run_factors_{};
  SplitMix64 rng_;
  double spare_normal_ = 0;
  bool has_spare_ = false;
};

}  // namespace feather
