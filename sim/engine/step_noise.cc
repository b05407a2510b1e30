// step_noise.cc: log-normal step-time noise (see step_noise.h).
#include "sim/engine/step_noise.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <optional>

namespace feather {

namespace {

std::array<double, kNumStepTerms> PerTerm(const ProfileStepNoise& noise,
                                          double ProfileTermNoise::*field) {
  std::array<double, kNumStepTerms> values{};
  for (const ProfileTermNoise& term : noise.terms) {
    if (const std::optional<StepTerm> t = StepTermFromName(term.term)) {
      values[static_cast<size_t>(*t)] = term.*field;
    }
  }
  // A real engine cannot time kv_reuse apart from decode attention (ProfileFitTermNames).
  values[static_cast<size_t>(StepTerm::kKvReuse)] =
      values[static_cast<size_t>(StepTerm::kDecodeAttention)];
  return values;
}

}  // namespace

std::array<double, kNumStepTerms> StepNoiseCv(const ProfileStepNoise& noise) {
  return PerTerm(noise, &ProfileTermNoise::rel_stdev);
}

std::array<double, kNumStepTerms> StepNoiseDrift(const ProfileStepNoise& noise) {
  return PerTerm(noise, &ProfileTermNoise::drift_rel_stdev);
}

StepNoise::StepNoise(const std::array<double, kNumStepTerms>& cv, uint64_t seed,
                     const std::array<double, kNumStepTerms>& drift)
    : rng_{SplitMix64Hash(seed)} {
  run_factors_.fill(1.0);
  const bool drifts = std::any_of(drift.begin(), drift.end(), [](double d) { return d > 0; });
  const double z_run = drifts ? NextNormal() : 0.0;
  has_spare_ = false;  // the run's draw uses a pair of uniforms alone
  for (size_t t = 0; t < kNumStepTerms; ++t) {
    const double run_variance = std::log1p(drift[t] * drift[t]);
    if (run_variance > 0) {
      run_factors_[t] = std::exp(-run_variance / 2 + std::sqrt(run_variance) * z_run);
    }
    const double variance = std::max(0.0, std::log1p(cv[t] * cv[t]) - run_variance);
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
    factors[t] =
        run_factors_[t] * (sigma_[t] > 0 ? std::exp(mu_[t] + sigma_[t] * NextNormal()) : 1.0);
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
