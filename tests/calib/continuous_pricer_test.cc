// continuous_pricer_test.cc: ContinuousPricer gives StepPricer's terms before rounding — every
// term within 0.5 ns of StepPricer's on decode (shared and not), cascade, prefill and mixed
// shapes, for two different profiles.
#include "calib/continuous_pricer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "sim/model_engine.h"
#include "tests/calib/calib_test_rows.h"

namespace feather::calib {
namespace {

TEST(ContinuousPricer, MatchesStepPricerBeforeRounding) {
  const ModelConfig model = testing::TinyModel();
  const std::vector<MeasuredStep> rows =
      testing::MakeRows(testing::TruthProfile(), model, testing::RowMix{});
  size_t cascade_rows = 0, reuse_rows = 0;
  for (const DeviceProfile& profile : {testing::TruthProfile(), testing::PerturbedBase()}) {
    const StepPricer rounded(profile, model);
    const ContinuousPricer continuous(profile, model);
    for (const MeasuredStep& row : rows) {
      const StepTiming timing = rounded.Price(row.shape);
      const auto terms = continuous.Terms(row.shape);
      for (size_t t = 0; t < kNumStepTerms; ++t) {
        EXPECT_LE(std::abs(terms[t] - static_cast<double>(timing.term_ns[t])), 0.5)
            << StepTermName(static_cast<StepTerm>(t));
      }
      cascade_rows += row.shape.cascade() ? 1 : 0;
      reuse_rows += terms[static_cast<size_t>(StepTerm::kKvReuse)] > 0 ? 1 : 0;
    }
  }
  EXPECT_GT(cascade_rows, 0u);
  EXPECT_GT(reuse_rows, 0u);
  EXPECT_EQ(ContinuousPricer(testing::TruthProfile(), model).Terms(StepShape{})[0], 0);
}

}  // namespace
}  // namespace feather::calib
