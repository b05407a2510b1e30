// ratio_fit_test.cc: the joint ratio fit (calib/ratio_fit.h) recovers known parameters from
// ratios a known profile produced (on the paper's §3 batches), treats inequality rows as one
// sided, marks what it fitted `published`, and rejects bad parameter lists.
#include "calib/ratio_fit.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "base/input_text.h"
#include "sim/io/device_profile_yaml.h"
#include "sim/io/model_config_yaml.h"

namespace feather::calib {
namespace {

using ::testing::HasSubstr;
const std::string kSource = FEATHER_SOURCE_DIR;

struct Fixture {
  DeviceProfile base = LoadDeviceProfile(kSource + "/results/profiles/spec/rtx6000-ada.yaml");
  std::vector<RatioRow> rows = ParseRatioRowsCsv(
      ReadTextFile(kSource + "/results/published/paper-s3-rtx6000-ada.csv", "rows"), "rows");
  std::vector<ModelConfig> models;
  Fixture() {
    for (const RatioRow& row : rows) {
      models.push_back(ParseModelConfig(
          ReadTextFile(kSource + "/scenarios/models/" + row.model + ".yaml", "model"), row.model));
    }
  }
  // Every row becomes an `about` row measuring what `truth` predicts.
  void MeasureWith(const DeviceProfile& truth) {
    for (size_t i = 0; i < rows.size(); ++i) {
      rows[i].relation = RatioRelation::kAbout;
      rows[i].measured = CheckRatio(rows[i], StepPricer(truth, models[i])).predicted;
    }
  }
};

TEST(RatioFitTest, RecoversKnownParametersFromTheirRatios) {
  Fixture f;
  // Reuse high enough that the flash-decoding batches are bound by L2 (else no row sees it).
  f.base.reuse_hit_max = 1;
  f.base.reuse_window_ctas = 4544;
  DeviceProfile truth = f.base;
  truth.l2_bw_bytes_per_s = 9e12;
  truth.cascade_layer_ns = 20'000;
  f.MeasureWith(truth);
  const std::vector<std::string> free = {"l2_bw_bytes_per_s", "cascade_layer_ns"};
  const RatioFit fit = FitRatioRows(f.base, f.rows, f.models, free, "synthetic");
  EXPECT_NEAR(fit.profile.l2_bw_bytes_per_s / 9e12, 1, 0.01);
  EXPECT_NEAR(fit.profile.cascade_layer_ns / 20'000, 1, 0.01);
  EXPECT_LT(fit.mean_abs_error, 1e-3);
  EXPECT_EQ(fit.consistent_rows, f.rows.size());
  ASSERT_EQ(fit.parameters.size(), 2u);
  for (const ParameterFit& p : fit.parameters) {
    EXPECT_TRUE(p.fitted) << p.name;
    const auto params = ProfileParameters();
    for (size_t i = 0; i < params.size(); ++i) {
      if (params[i].name != p.name) continue;
      EXPECT_EQ(fit.profile.origins[i].source, ParameterSource::kPublished);
      EXPECT_THAT(fit.profile.origins[i].note, HasSubstr("synthetic"));
      EXPECT_THAT(fit.profile.origins[i].note, HasSubstr("exp1-f0.002-vs-homogeneous"));
    }
  }
  // The fitted profile writes and reads back.
  EXPECT_EQ(ParseDeviceProfile(DeviceProfileToYaml(fit.profile), "fit.yaml"), fit.profile);
}

TEST(RatioFitTest, SatisfiedInequalitiesPullNothing) {
  Fixture f;
  f.MeasureWith(f.base);
  // Every row "at least" a ratio far below what the base predicts: the base is a solution, and
  // the fit has no reason to move (zero residuals everywhere).
  for (RatioRow& row : f.rows) {
    row.relation = RatioRelation::kAtLeast;
    row.measured *= 0.5;
  }
  const std::vector<std::string> free = {"l2_bw_bytes_per_s"};
  const RatioFit fit = FitRatioRows(f.base, f.rows, f.models, free, "x");
  EXPECT_EQ(fit.consistent_rows, f.rows.size());
  EXPECT_EQ(fit.about_rows, 0u);
}

TEST(RatioFitTest, KeepsThePapersDirectionsOnItsOwnRows) {
  // The paper's §3 rows as shipped: four `about` figures and six inequalities. The committed
  // rtx6000-ada fit frees these four; L2 bandwidths near 6 TB/s keep all ten rows, and a fit
  // that weighs a broken direction like an approximate figure gave up Exp 6 (0.93 < 1).
  Fixture f;
  const std::vector<std::string> free = {"l2_bw_bytes_per_s", "reuse_hit_max",
                                         "reuse_window_ctas", "cascade_layer_ns"};
  const RatioFit fit = FitRatioRows(f.base, f.rows, f.models, free, "paper");
  for (size_t i = 0; i < fit.checks.size(); ++i) {
    EXPECT_TRUE(fit.checks[i].consistent) << f.rows[i].id << " predicted " << fit.checks[i].predicted;
  }
  EXPECT_EQ(fit.consistent_rows, f.rows.size());
}

TEST(RatioFitTest, L2IsNeverFittedBelowDram) {
  // Rows a profile with an L2 slower than its DRAM would produce: the fit stops at the DRAM
  // bandwidth, where a read that hits L2 costs what a miss does.
  Fixture f;
  f.base.reuse_hit_max = 1;
  f.base.reuse_window_ctas = 4544;
  DeviceProfile truth = f.base;
  truth.l2_bw_bytes_per_s = 0.3 * f.base.dram_bw_bytes_per_s;
  f.MeasureWith(truth);
  const std::vector<std::string> free = {"l2_bw_bytes_per_s"};
  const RatioFit fit = FitRatioRows(f.base, f.rows, f.models, free, "x");
  EXPECT_GE(fit.profile.l2_bw_bytes_per_s, f.base.dram_bw_bytes_per_s);
  EXPECT_LT(fit.profile.l2_bw_bytes_per_s, 1.01 * f.base.dram_bw_bytes_per_s);
}

TEST(RatioFitTest, BadParameterListsAreErrors) {
  Fixture f;
  auto fails = [&](std::vector<std::string> free, const std::string& what) {
    try {
      (void)FitRatioRows(f.base, f.rows, f.models, free, "x");
    } catch (const std::invalid_argument& error) {
      EXPECT_THAT(error.what(), HasSubstr(what));
      return;
    }
    ADD_FAILURE() << "no error for " << what;
  };
  fails({"no_such_parameter"}, "no profile parameter");
  fails({"dram_bw_bytes_per_s"}, "never fitted");
  fails({}, "no parameter");
  std::vector<std::string> many(f.rows.size() + 1, "l2_bw_bytes_per_s");
  fails(many, "at most as many");
  EXPECT_THROW((void)FitRatioRows(f.base, {}, {}, std::vector<std::string>{"l2_bw_bytes_per_s"}, "x"),
               std::invalid_argument);
}

}  // namespace
}  // namespace feather::calib
