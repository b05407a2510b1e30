// step_noise.cc: log-normal step-time noise (see step_noise.h).
#include "sim/engine/step_noise.h"

#include <cmath>
#include <numbers>

namespace feather {

std::array<double, kNumStepTerms> StepNoiseCv(const ProfileStepNoise& noise) {
  std::array<double, kNumStepTerms> cv{};
  for (const ProfileTermNoise& term : noise.terms) {
    for (size_t t = 0; t < kNumStepTerms; ++t) {
      if (StepTermName(static_cast<StepTerm>(t)) == term.term) cv[t] = term.rel_stdev;
    }
  }
  // A real engine cannot time kv_reuse apart from decode attention (ProfileFitTermNames).
  cv[static_cast<size_t>(StepTerm::kKvReuse)] = cv[static_cast<size_t>(StepTerm::kDecodeAttention)];
  return cv;
}

StepNoise::StepNoise(const std::array<double, kNumStepTerms>& cv, uint64_t seed)
    : rng_{SplitMix64Hash(seed)} {
  for (size_t t = 0; t < kNumStepTerms; ++t) {
    const double variance = std::log1p(cv[t] * cv[t]);
    sigma_[t] = std::sqrt(variance);
    mu_[t] = -variance / 2;
  }
}

double StepNoise::NextNormal() {
  if (has_spare_) {
    has_spare_ = false;
    return spare_normal_;
  }
  const double u1 = 1.0 - rng_.NextUnit();  // (0, 1]: log is finite
  const double u2 = rng_.NextUnit();
  const double radius = std::sqrt(-2.0 * std::log(u1));
  const double angle = 2.0 * std::numbers::pi * u2;
  spare_normal_ = radius * std::sin(angle);
  has_spare_ = true;
  return radius * std::cos(angle);
}

std::array<double, kNumStepTerms> StepNoise::NextFactors() {
  std::array<double, kNumStepTerms> factors{};
  for (size_t t = 0; t < kNumStepTerms; ++t) {
    factors[t] = sigma_[t] > 0 ? std::exp(mu_[t] + sigma_[t] * NextNormal()) : 1.0;
  }
  return factors;
}

StepTiming StepNoise::Apply(const StepTiming& timing) {
  const std::array<double, kNumStepTerms> factors = NextFactors();
  StepTiming noisy = timing;
  noisy.total_ns = 0;
  for (size_t t = 0; t < kNumStepTerms; ++t) {
    noisy.term_ns[t] = std::llround(static_cast<double>(timing.term_ns[t]) * factors[t]);
    noisy.total_ns += noisy.term_ns[t];
  }
  return noisy;
}

}  // namespace feather
