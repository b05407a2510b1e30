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

class StepNoise {
 public:
  StepNoise(const std::array<double, kNumStepTerms>& cv, uint64_t seed);

  // A factor per term (1 where its cv is 0), drawn as in the file comment.
  [[nodiscard]] std::array<double, kNumStepTerms> NextFactors();
  // `timing` with each term scaled by its factor and rounded to whole ns; total = Σ terms.
  [[nodiscard]] StepTiming Apply(const StepTiming& timing);

 private:
  [[nodiscard]] double NextNormal();

  std::array<double, kNumStepTerms> mu_{};
  std::array<double, kNumStepTerms> sigma_{};
  SplitMix64 rng_;
  double spare_normal_ = 0;
  bool has_spare_ = false;
};

}  // namespace feather
