// mpc_policy_test.cc: the model-predictive stop policy (policies/mpc_policy.h): its online fit
// recovers a known step-time law, and its decisions follow from the predictions.
#include "policies/mpc_policy.h"

#include <cmath>
#include <cstdint>
#include <random>

#include <gtest/gtest.h>

namespace feather {
namespace {

// A step-time law of the fitted form, in ms: t = 12 + 0.02·n + 4e-4·U + 5e-5·(reads − U).
constexpr double kC0 = 12, kC1 = 0.02, kC2 = 4e-4, kC3 = 5e-5;

double LawMs(uint32_t n, double reads, double unique) {
  return kC0 + kC1 * n + kC2 * unique + kC3 * (reads - unique);
}

// Feeds `steps` decode steps of random shapes (some cascading) priced by the law.
void Train(MpcPolicy& policy, int steps, uint64_t seed) {
  std::mt19937_64 rng(seed);
  for (int i = 0; i < steps; ++i) {
    const auto n = static_cast<uint32_t>(8 + rng() % 480);
    const uint32_t prefix = (rng() % 2 == 0) ? 0 : 16 * static_cast<uint32_t>(rng() % 300);
    const uint64_t own = 50 + rng() % 400;
    const uint64_t kv = n * (prefix + own);
    const uint64_t groups = 1 + rng() % 5;
    const uint64_t unique = std::min<uint64_t>(kv, groups * prefix + n * own);
    const bool cascade = prefix >= 256 && groups == 1 && rng() % 4 != 0;
    StepFeedback f;
    f.decode_requests = n;
    f.batch_size = n;
    f.decode_kv_tokens = kv;
    f.decode_kv_unique_tokens = cascade ? prefix + n * own : unique;
    f.common_prefix_tokens = groups == 1 ? prefix : 0;
    f.cascade_used = cascade;
    const double reads =
        static_cast<double>(kv) - (cascade ? static_cast<double>(n - 1) * prefix : 0.0);
    f.decode_ns = static_cast<int64_t>(
        LawMs(n, reads, static_cast<double>(f.decode_kv_unique_tokens)) * 1e6);
    f.step_ns = f.decode_ns;
    policy.OnStepExecuted(f);
  }
}

MpcConfig PlainLeastSquares() {
  MpcConfig c;
  c.forgetting = 1.0;
  c.ridge = 0;
  return c;
}

TEST(MpcPolicy, TheFitRecoversTheStepTimeLaw) {
  MpcPolicy policy(PlainLeastSquares());
  Train(policy, 400, 7);
  const auto c = policy.Coefficients();
  ASSERT_TRUE(c.has_value());
  EXPECT_NEAR((*c)[0], kC0, 0.05);
  EXPECT_NEAR((*c)[1], kC1, 1e-4);
  EXPECT_NEAR((*c)[2], kC2, 1e-6);
  EXPECT_NEAR((*c)[3], kC3, 1e-6);
  // The prediction applies the cascade rule: a 300-request batch over a 4,000-token prefix.
  const double with = *policy.PredictDecodeMs(300, 300 * 4100, 4000 + 300 * 100, 4000);
  const double without = *policy.PredictDecodeMs(300, 300 * 4100, 4000 + 300 * 100, 0);
  EXPECT_NEAR(with, LawMs(300, 300 * 4100 - 299.0 * 4000, 4000 + 300 * 100), 0.01);
  EXPECT_NEAR(without, LawMs(300, 300 * 4100, 4000 + 300 * 100), 0.01);
  EXPECT_LT(with, without);
}

// Differential: the tied fit (one price per KV read) against least squares of t on (1, n, reads)
// solved here by Cramer's rule from the steps' sums, for a law whose repeated reads cost less
// than distinct ones (so the tied fit is a compromise, not the law).
TEST(MpcPolicy, TheTiedFitIsTheLeastSquaresFitOnReads) {
  MpcPolicy policy(PlainLeastSquares());
  EXPECT_FALSE(policy.TiedReadCoefficients().has_value());  // no steps yet
  std::mt19937_64 rng(11);
  double a[3][3] = {}, b[3] = {};
  for (int i = 0; i < 300; ++i) {
    const auto n = static_cast<uint32_t>(8 + rng() % 480);
    const uint64_t own = 50 + rng() % 400, prefix = 1000 + rng() % 4000, groups = 1 + rng() % 50;
    StepFeedback f;
    f.decode_requests = f.batch_size = n;
    f.decode_kv_tokens = n * (prefix + own);
    f.decode_kv_unique_tokens = std::min<uint64_t>(f.decode_kv_tokens, groups * prefix + n * own);
    const auto reads = static_cast<double>(f.decode_kv_tokens);
    const auto unique = static_cast<double>(f.decode_kv_unique_tokens);
    const double t = kC0 + 0.5 * n + kC2 * unique + kC3 * (reads - unique);
    f.decode_ns = f.step_ns = static_cast<int64_t>(std::llround(t * 1e6));
    policy.OnStepExecuted(f);
    const double x[3] = {1.0, static_cast<double>(n), reads};
    for (int r = 0; r < 3; ++r) {
      b[r] += x[r] * static_cast<double>(f.decode_ns) * 1e-6;
      for (int c = 0; c < 3; ++c) a[r][c] += x[r] * x[c];
    }
  }
  const auto det = [](const double m[3][3]) {
    return m[0][0] * (m[1][1] * m[2][2] - m[1][2] * m[2][1]) -
           m[0][1] * (m[1][0] * m[2][2] - m[1][2] * m[2][0]) +
           m[0][2] * (m[1][0] * m[2][1] - m[1][1] * m[2][0]);
  };
  double expected[3];
  for (int k = 0; k < 3; ++k) {
    double m[3][3];
    for (int r = 0; r < 3; ++r) {
      for (int c = 0; c < 3; ++c) m[r][c] = c == k ? b[r] : a[r][c];
    }
    expected[k] = det(m) / det(a);
    ASSERT_GT(expected[k], 0) << "the law was chosen so that every term stays positive";
  }
  const auto tied = policy.TiedReadCoefficients();
  ASSERT_TRUE(tied.has_value());
  for (int k = 0; k < 3; ++k) EXPECT_NEAR((*tied)[k], expected[k], 1e-6 * expected[k] + 1e-9);
  EXPECT_EQ((*tied)[3], (*tied)[2]);
  // It prices a step as the four-term prediction does with those coefficients.
  EXPECT_NEAR(policy.PredictDecodeMsWith(*tied, 100, 510000, 60000, 0),
              expected[0] + expected[1] * 100 + expected[2] * 510000, 1e-9);
}

TEST(MpcPolicy, AddsUntilTheFitCanDecide) {
  MpcPolicy policy;
  StopContext c;
  c.batch_size = 400;
  c.batch_kv_tokens = 400 * 5100;
  c.batch_unique_kv_tokens = 5000 + 400 * 100;
  c.batch_common_prefix_tokens = 5000;
  c.candidate_tokens = 5100;
  c.candidate_common_prefix_tokens = 0;  // would end cascade
  EXPECT_EQ(policy.Decide(c), StopDecision::kAdd);
  Train(policy, 8, 1);  // fewer than min_steps (16)
  EXPECT_EQ(policy.Decide(c), StopDecision::kAdd);
  Train(policy, 40, 2);
  EXPECT_EQ(policy.Decide(c), StopDecision::kStop);
  c.batch_size = 0;
  EXPECT_EQ(policy.Decide(c), StopDecision::kAdd);  // an empty batch always takes one
}

class TrainedMpc : public testing::Test {
 protected:
  void SetUp() override { Train(policy_, 200, 3); }
  MpcPolicy policy_;
};

TEST_F(TrainedMpc, KeepsAHomogeneousBatchOfOnePrefix) {
  StopContext c;
  c.batch_size = 400;
  c.batch_kv_tokens = 400 * 5100;
  c.batch_unique_kv_tokens = 5000 + 400 * 100;
  c.batch_common_prefix_tokens = 5000;
  c.largest_groups[0] = {400, 5000, false};
  c.candidate_tokens = 5100;
  c.candidate_cached_tokens = 5000;
  // A member of the prefix keeps cascade: the batch grows.
  c.candidate_common_prefix_tokens = 5000;
  c.largest_groups[0].candidate_in = true;
  EXPECT_EQ(policy_.Decide(c), StopDecision::kAdd);
  // A request of another prefix would end cascade for 400 requests: stop.
  c.candidate_common_prefix_tokens = 0;
  c.largest_groups[0].candidate_in = false;
  c.candidate_cached_tokens = 0;
  EXPECT_EQ(policy_.Decide(c), StopDecision::kStop);
  // Once the batch has drained to a few requests, sharing the weights wins: hand over.
  c.batch_size = 6;
  c.batch_kv_tokens = 6 * 5100;
  c.batch_unique_kv_tokens = 5000 + 6 * 100;
  c.largest_groups[0].requests = 6;
  EXPECT_EQ(policy_.Decide(c), StopDecision::kAdd);
}

TEST_F(TrainedMpc, WithoutSharingTheBatchGrows) {
  StopContext c;
  c.batch_size = 300;
  c.batch_kv_tokens = 300 * 5100;
  c.batch_unique_kv_tokens = 300 * 5100;
  c.largest_groups[0] = {1, 5100, false};  // every request its own prefix
  c.candidate_tokens = 5100;
  EXPECT_EQ(policy_.Decide(c), StopDecision::kAdd);
}

TEST_F(TrainedMpc, AMixedBatchConvergesToItsLargestGroup) {
  // 500 requests of 5 prefixes, 100 each, no cascade: a request of a minority prefix is held
  // back, since the largest group alone (100 requests with cascade) would decode faster.
  StopContext c;
  c.batch_size = 499;
  c.batch_kv_tokens = 499 * 5100;
  c.batch_unique_kv_tokens = 5 * 5000 + 499 * 100;
  c.batch_common_prefix_tokens = 0;
  c.largest_groups[0] = {100, 5000, false};
  c.candidate_tokens = 5100;
  c.candidate_cached_tokens = 5000;
  EXPECT_EQ(policy_.Decide(c), StopDecision::kStop);
  c.largest_groups[0].candidate_in = true;  // a member of the largest group joins
  EXPECT_EQ(policy_.Decide(c), StopDecision::kAdd);
}

TEST_F(TrainedMpc, ADeeperGroupCountsWhereTheShallowOneHoldsTheCandidate) {
  // Radix-shaped sharing: all 400 share 2,000 tokens, 300 of them 4,000. A candidate of the
  // other branch stays in the 256- to 1K-token groups but leaves the 2K-token one.
  StopContext c;
  c.batch_size = 400;
  c.batch_kv_tokens = 400 * 4100;
  c.batch_unique_kv_tokens = 4000 + 2000 + 400 * 100;
  c.batch_common_prefix_tokens = 2000;
  c.largest_groups[0] = {400, 2000, true};
  c.largest_groups[1] = {400, 2000, true};
  c.largest_groups[2] = {400, 2000, true};
  c.largest_groups[3] = {300, 4000, false};
  c.candidate_tokens = 4100;
  c.candidate_cached_tokens = 4000;
  c.candidate_common_prefix_tokens = 2000;
  const StopDecision with_depth = policy_.Decide(c);
  c.largest_groups[3] = {};
  EXPECT_EQ(policy_.Decide(c), StopDecision::kAdd);  // keeps the 2,000-token cascade
  EXPECT_EQ(with_depth, StopDecision::kStop);         // 300 over 4,000 tokens decode faster
}

TEST_F(TrainedMpc, FrozenKeepsItsFitAndDecidesTheSame) {
  policy_.set_learning(false);
  const DecodeTimeFit before = policy_.fit();
  Train(policy_, 50, 9);
  EXPECT_EQ(policy_.fit().observed, before.observed);
  EXPECT_EQ(policy_.fit().xty, before.xty);
}

TEST(MpcPolicy, MixedStepsTeachOnlyWhenTheirDecodePartIsPriced) {
  MpcPolicy policy;
  StepFeedback f;
  f.decode_requests = 10;
  f.prefill_tokens = 2000;
  f.decode_kv_tokens = 10000;
  f.decode_kv_unique_tokens = 10000;
  f.step_ns = 50'000'000;
  f.decode_ns = -1;  // an engine that cannot split the step
  policy.OnStepExecuted(f);
  EXPECT_EQ(policy.fit().observed, 0u);
  f.prefill_tokens = 0;  // a decode-only step teaches with its whole time
  policy.OnStepExecuted(f);
  EXPECT_EQ(policy.fit().observed, 1u);
  f.prefill_tokens = 2000;
  f.decode_ns = 20'000'000;  // priced apart
  policy.OnStepExecuted(f);
  EXPECT_EQ(policy.fit().observed, 2u);
}

TEST(MpcConfig, KnobsAreRangeChecked) {
  MpcConfig c;
  c.forgetting = 0;
  c.margin = 1.5;
  EXPECT_EQ(ConfigProblems(c).size(), 2u);
}

}  // namespace
}  // namespace feather
