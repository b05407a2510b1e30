// step_noise_test.cc: the model engine's seeded step-time noise (sim/engine/step_noise.h) —
// properties over seeds (the factors average 1 and spread as the profile says, per term),
// determinism, the cv table, and the model engine with noise on and off.
#include "sim/engine/step_noise.h"

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "sim/engine/model_engine.h"
#include "sim/io/device_profile_yaml.h"
#include "sim/io/model_config_yaml.h"

namespace feather {
namespace {

const std::string kSource = FEATHER_SOURCE_DIR;

constexpr size_t kGemm = static_cast<size_t>(StepTerm::kGemm);
constexpr size_t kDecode = static_cast<size_t>(StepTerm::kDecodeAttention);
constexpr size_t kReuse = static_cast<size_t>(StepTerm::kKvReuse);
constexpr size_t kOverhead = static_cast<size_t>(StepTerm::kOverhead);

ProfileStepNoise NoiseOf(double gemm, double decode, double overhead) {
  ProfileStepNoise noise;
  noise.note = "test";
  noise.steps = 1;
  noise.repetitions = 1;
  noise.terms = {{"gemm", gemm, -0.1, 0.1, 1},
                 {"decode_attention", decode, -0.1, 0.1, 1},
                 {"overhead", overhead, -0.1, 0.1, 1}};
  return noise;
}

// StepTermFromName inverts StepTermName for every term and rejects other text (StepNoiseCv,
// StepNoiseDrift and calibration's step_noise map profile term names through it).
TEST(StepTermFromName, InvertsStepTermName) {
  for (size_t t = 0; t < kNumStepTerms; ++t) {
    const auto term = static_cast<StepTerm>(t);
    EXPECT_EQ(StepTermFromName(StepTermName(term)), term) << StepTermName(term);
  }
  EXPECT_EQ(StepTermFromName("unknown"), std::nullopt);
  EXPECT_EQ(StepTermFromName("Gemm"), std::nullopt);
  EXPECT_EQ(StepTermFromName(""), std::nullopt);
}

TEST(StepNoiseCv, MapsTermsAndGivesKvReuseTheDecodeSpread) {
  const std::array<double, kNumStepTerms> cv = StepNoiseCv(NoiseOf(0.03, 0.12, 0.4));
  EXPECT_EQ(cv[kGemm], 0.03);
  EXPECT_EQ(cv[kDecode], 0.12);
  EXPECT_EQ(cv[kReuse], 0.12);
  EXPECT_EQ(cv[kOverhead], 0.4);
  EXPECT_EQ(cv[static_cast<size_t>(StepTerm::kCascadePrefix)], 0.0);
  EXPECT_EQ(cv[static_cast<size_t>(StepTerm::kPrefillAttention)], 0.0);
}

// Property over seeds: for each seed, 20,000 draws; the factors' mean is 1 and their stdev the
// term's cv, within what 20,000 samples allow (a log-normal of cv 0.4 has a heavier tail, so its
// stdev gets a wider band); a term without noise is exactly 1.
TEST(StepNoise, FactorsAverageOneAndSpreadAsTheProfileSaysOverSeeds) {
  const std::array<double, kNumStepTerms> cv = StepNoiseCv(NoiseOf(0.03, 0.12, 0.4));
  constexpr int kDraws = 20000;
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    StepNoise noise(cv, seed);
    std::array<double, kNumStepTerms> sum{}, squares{};
    for (int i = 0; i < kDraws; ++i) {
      const std::array<double, kNumStepTerms> f = noise.NextFactors();
      for (size_t t = 0; t < kNumStepTerms; ++t) {
        ASSERT_GT(f[t], 0.0);
        sum[t] += f[t];
        squares[t] += f[t] * f[t];
      }
    }
    for (size_t t = 0; t < kNumStepTerms; ++t) {
      const double mean = sum[t] / kDraws;
      const double stdev = std::sqrt(squares[t] / kDraws - mean * mean);
      if (cv[t] == 0) {
        EXPECT_EQ(mean, 1.0) << t;
        EXPECT_NEAR(stdev, 0.0, 1e-6) << t;
        continue;
      }
      // Standard error of the mean: cv / sqrt(n); 5 of them.
      EXPECT_NEAR(mean, 1.0, 5 * cv[t] / std::sqrt(kDraws)) << t;
      EXPECT_NEAR(stdev / cv[t], 1.0, cv[t] > 0.2 ? 0.08 : 0.04) << t;
    }
  }
}

// Drift (a run-level factor): over 400 seeded runs of 2,000 steps, each run's mean factor is its
// run factor within the per-step noise's standard error; the run factors average 1 and spread
// as drift_rel_stdev says, and one normal moves every drifting term the same way; a step's
// marginal spread, pooled over the runs, is still the term's cv.
TEST(StepNoise, DriftIsOneFactorPerRunAndKeepsTheMarginalSpread) {
  ProfileStepNoise profile = NoiseOf(0.08, 0.12, 0.3);
  profile.terms[0].drift_rel_stdev = 0.05;  // gemm
  profile.terms[1].drift_rel_stdev = 0.10;  // decode_attention (and kv_reuse)
  const std::array<double, kNumStepTerms> cv = StepNoiseCv(profile);
  const std::array<double, kNumStepTerms> drift = StepNoiseDrift(profile);
  EXPECT_EQ(drift[kGemm], 0.05);
  EXPECT_EQ(drift[kReuse], 0.10);
  EXPECT_EQ(drift[kOverhead], 0.0);
  constexpr int kRuns = 400;
  constexpr int kSteps = 2000;
  std::array<double, kNumStepTerms> run_sum{}, run_squares{}, all_sum{}, all_squares{};
  for (uint64_t seed = 1; seed <= kRuns; ++seed) {
    StepNoise noise(cv, seed, drift);
    const std::array<double, kNumStepTerms> run = noise.run_factors();
    EXPECT_EQ(run[kOverhead], 1.0);
    // The same z for every drifting term: log g_t / s_t + s_t / 2 is that z.
    const auto z_of = [&](size_t t) {
      const double s = std::sqrt(std::log1p(drift[t] * drift[t]));
      return std::log(run[t]) / s + s / 2;
    };
    EXPECT_NEAR(z_of(kGemm), z_of(kDecode), 1e-9);
    std::array<double, kNumStepTerms> sum{};
    for (int i = 0; i < kSteps; ++i) {
      const std::array<double, kNumStepTerms> f = noise.NextFactors();
      for (size_t t = 0; t < kNumStepTerms; ++t) {
        sum[t] += f[t];
        all_sum[t] += f[t];
        all_squares[t] += f[t] * f[t];
      }
    }
    for (const size_t t : {kGemm, kDecode, kOverhead}) {
      // Per-step part: stdev ≤ cv; 5 standard errors of a 2,000-step mean.
      EXPECT_NEAR(sum[t] / kSteps / run[t], 1.0, 5 * cv[t] / std::sqrt(kSteps)) << t;
      run_sum[t] += run[t];
      run_squares[t] += run[t] * run[t];
    }
  }
  for (const size_t t : {kGemm, kDecode}) {
    const double mean = run_sum[t] / kRuns;
    const double stdev = std::sqrt(run_squares[t] / kRuns - mean * mean);
    EXPECT_NEAR(mean, 1.0, 5 * drift[t] / std::sqrt(kRuns)) << t;
    EXPECT_NEAR(stdev / drift[t], 1.0, 0.15) << t;  // 400 runs: ~3.5 % standard error
    // Marginal: var f = (1 + d²)(1 + step variance) − 1 = cv².
    const double n = double{kRuns} * kSteps;
    const double all_mean = all_sum[t] / n;
    EXPECT_NEAR(all_squares[t] / n - all_mean * all_mean, cv[t] * cv[t], 0.15 * cv[t] * cv[t]) << t;
  }
}

// A profile without drift draws exactly what it drew before drift existed (the default argument
// and an all-zero drift are the same), so earlier validations reproduce.
TEST(StepNoise, ZeroDriftDrawsTheFactorsOfAProfileWithoutIt) {
  const std::array<double, kNumStepTerms> cv = StepNoiseCv(NoiseOf(0.05, 0.1, 0.2));
  StepNoise plain(cv, 11), zero(cv, 11, std::array<double, kNumStepTerms>{});
  for (int i = 0; i < 50; ++i) EXPECT_EQ(plain.NextFactors(), zero.NextFactors());
  std::array<double, kNumStepTerms> ones{};
  ones.fill(1.0);
  EXPECT_EQ(plain.run_factors(), ones);
}

TEST(StepNoise, SameSeedSameFactorsOtherSeedOtherFactors) {
  const std::array<double, kNumStepTerms> cv = StepNoiseCv(NoiseOf(0.05, 0.1, 0.2));
  StepNoise a(cv, 7), b(cv, 7), c(cv, 8);
  bool differs = false;
  for (int i = 0; i < 100; ++i) {
    const auto fa = a.NextFactors();
    const auto fc = c.NextFactors();
    EXPECT_EQ(fa, b.NextFactors());
    differs = differs || fa != fc;
  }
  EXPECT_TRUE(differs);
}

TEST(StepNoise, ApplyScalesTermsAndKeepsTotalTheSum) {
  StepNoise noise(StepNoiseCv(NoiseOf(0.1, 0.1, 0.1)), 3);
  StepTiming timing;
  timing.term_ns[kGemm] = 1'000'000;
  timing.term_ns[kDecode] = 200'000;
  timing.term_ns[kOverhead] = 10'000;
  timing.total_ns = 1'210'000;
  timing.cascade_used = true;
  const StepTiming noisy = noise.Apply(timing);
  int64_t sum = 0;
  for (const int64_t ns : noisy.term_ns) sum += ns;
  EXPECT_EQ(noisy.total_ns, sum);
  EXPECT_NE(noisy.term_ns[kGemm], timing.term_ns[kGemm]);
  EXPECT_EQ(noisy.term_ns[kReuse], 0);  // 0 stays 0
  EXPECT_TRUE(noisy.cascade_used);
}

// The model engine: noise only when asked, seeded, a profile without step_noise refused, and
// the scheduler's estimate (PriceDecodeOnly) noiseless.
TEST(StepNoise, ModelEngineDrawsOnlyWhenAskedAndReproducibly) {
  DeviceProfile profile = LoadDeviceProfile(kSource + "/results/profiles/rtx6000-ada.yaml");
  const ModelConfig model = LoadModelConfig(kSource + "/scenarios/models/llama-3-8b.yaml");
  EXPECT_THROW((void)ModelEngine(profile, model, {.step_noise = true}), std::invalid_argument);
  profile.step_noise = NoiseOf(0.05, 0.1, 0.3);

  std::vector<StepRequest> requests;
  for (RequestId id = 0; id < 16; ++id) requests.push_back({id, 1000, 1, false, {}});
  BatchPlan plan;
  plan.requests = requests;
  plan.decode_requests = 16;
  plan.decode_kv_tokens = 16 * 1001;
  plan.decode_kv_unique_tokens = 16 * 1001;

  ModelEngine plain(profile, model);
  const StepTiming point = plain.Execute(plan);
  EXPECT_EQ(plain.Execute(plan).total_ns, point.total_ns);  // no noise: pure

  ModelEngine a(profile, model, {.step_noise = true, .step_noise_seed = 5});
  ModelEngine b(profile, model, {.step_noise = true, .step_noise_seed = 5});
  ModelEngine c(profile, model, {.step_noise = true, .step_noise_seed = 6});
  std::vector<int64_t> from_a, from_c;
  for (int i = 0; i < 10; ++i) {
    from_a.push_back(a.Execute(plan).total_ns);
    EXPECT_EQ(b.Execute(plan).total_ns, from_a.back());
    from_c.push_back(c.Execute(plan).total_ns);
    EXPECT_EQ(a.PriceDecodeOnly(plan), point.total_ns);
  }
  EXPECT_NE(from_a, from_c);
  EXPECT_NE(from_a[0], from_a[1]);
}

}  // namespace
}  // namespace feather
