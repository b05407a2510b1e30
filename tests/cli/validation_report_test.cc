// validation_report_test.cc: the pure parts of validation.json (cli/validation_report.h) — the
// golden text of a metric's comparison, each verdict, and the same-plan breakdown by term and
// kind of step computed by hand.
//
// To refresh the golden file after an intended format change:
//   FEATHER_UPDATE_GOLDEN=1 build/release/tests/validation_report_test --gtest_filter='*Golden*'
#include "cli/validation_report.h"

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace feather {
namespace {

using OrderedJson = nlohmann::ordered_json;

const std::string kGolden =
    std::string(FEATHER_SOURCE_DIR) + "/tests/cli/data/validation_metrics.golden.json";

std::string ReadWhole(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// The metrics section as validate writes it, for three measured runs and four noisy model runs
// (throughput: inside the interval; mean TBT: outside it, within its 10 % target; p99 TBT:
// outside, no target) and for a profile without step_noise (no noisy runs: the interval is the
// point).
TEST(ValidationReport, MetricsMatchTheGoldenText) {
  OrderedJson metrics;
  const std::vector<double> model_throughput = {305.0, 311.0, 299.0, 308.0};
  metrics["throughput_tok_s"] = CompareMetric(std::vector<double>{302.5, 297.75, 304.5}, 310.125,
                                              model_throughput, MetricTarget("throughput_tok_s"));
  metrics["mean_tbt_ms"] =
      CompareMetric(std::vector<double>{94.0, 99.0, 96.5}, 91.5,
                    std::vector<double>{90.0, 91.0, 90.5, 91.5}, MetricTarget("mean_tbt_ms"));
  metrics["p99_tbt_ms"] =
      CompareMetric(std::vector<double>{150.0, 160.0, 170.0}, 120.0,
                    std::vector<double>{121.0, 119.0, 120.0, 120.0}, MetricTarget("p99_tbt_ms"));
  metrics["mean_batch_size"] =
      CompareMetric(std::vector<double>{39.0}, 58.0, {}, MetricTarget("mean_batch_size"));
  const std::string actual = metrics.dump(2) + "\n";
  if (std::getenv("FEATHER_UPDATE_GOLDEN") != nullptr) {
    std::ofstream(kGolden, std::ios::binary) << actual;
    GTEST_SKIP() << "golden file rewritten: " << kGolden;
  }
  const std::string expected = ReadWhole(kGolden);
  ASSERT_FALSE(expected.empty()) << kGolden << " is missing";
  EXPECT_EQ(expected, actual) << "(FEATHER_UPDATE_GOLDEN=1 rewrites it if the change is meant)";
}

TEST(ValidationReport, FieldsByHand) {
  const OrderedJson m = CompareMetric(std::vector<double>{100.0, 110.0, 90.0}, 104.0,
                                      std::vector<double>{101.0, 103.0}, 0.05);
  EXPECT_DOUBLE_EQ(m["measured"].get<double>(), 100.0);
  EXPECT_DOUBLE_EQ(m["measured_stdev"].get<double>(), 10.0);
  EXPECT_DOUBLE_EQ(m["measured_spread"].get<double>(), 0.2);
  EXPECT_DOUBLE_EQ(m["signed_error"].get<double>(), 0.04);
  EXPECT_DOUBLE_EQ(m["rel_error"].get<double>(), 0.04);
  EXPECT_DOUBLE_EQ(m["predicted_mean"].get<double>(), 102.0);
  EXPECT_DOUBLE_EQ(m["predicted_stdev"].get<double>(), std::sqrt(2.0));
  EXPECT_DOUBLE_EQ(m["predicted_interval"][0].get<double>(), 102.0 - 2 * std::sqrt(2.0));
  EXPECT_DOUBLE_EQ(m["predicted_interval"][1].get<double>(), 102.0 + 2 * std::sqrt(2.0));
  EXPECT_DOUBLE_EQ(m["mean_rel_error"].get<double>(), 0.02);
  EXPECT_TRUE(m["inside_interval"].get<bool>());  // 102 − 2·1.41 = 99.17 <= 100
  EXPECT_EQ(m["verdict"], "inside_interval");
}

TEST(ValidationReport, EachVerdict) {
  // Inside the interval.
  OrderedJson m = CompareMetric(std::vector<double>{100.0}, 100.0, std::vector<double>{90.0, 110.0},
                                std::nullopt);
  EXPECT_EQ(m["verdict"], "inside_interval");
  EXPECT_TRUE(m["pass"].get<bool>());
  EXPECT_TRUE(m["within_target"].is_null());
  EXPECT_TRUE(m["target_rel_error"].is_null());
  // Outside a narrow interval, within the target.
  m = CompareMetric(std::vector<double>{100.0}, 104.0, std::vector<double>{104.0, 104.0}, 0.05);
  EXPECT_EQ(m["verdict"], "within_target");
  EXPECT_TRUE(m["pass"].get<bool>());
  EXPECT_TRUE(m["within_target"].get<bool>());
  // Outside both.
  m = CompareMetric(std::vector<double>{100.0}, 120.0, std::vector<double>{119.0, 121.0}, 0.05);
  EXPECT_EQ(m["verdict"], "outside");
  EXPECT_FALSE(m["pass"].get<bool>());
  EXPECT_FALSE(m["within_target"].get<bool>());
  // No noisy runs: the interval is the point, and the point is judged by the target.
  m = CompareMetric(std::vector<double>{100.0, 100.0}, 108.0, {}, 0.10);
  EXPECT_EQ(m["predicted_interval"][0].get<double>(), 108.0);
  EXPECT_EQ(m["predicted_interval"][1].get<double>(), 108.0);
  EXPECT_EQ(m["predicted_stdev"].get<double>(), 0.0);
  EXPECT_EQ(m["verdict"], "within_target");
  // A skewed spread: the interval's lower end stops at 0.
  m = CompareMetric(std::vector<double>{100.0}, 100.0, std::vector<double>{10.0, 10.0, 400.0},
                    std::nullopt);
  EXPECT_EQ(m["predicted_interval"][0].get<double>(), 0.0);
  EXPECT_EQ(m["verdict"], "inside_interval");
  EXPECT_EQ(MetricTarget("throughput_tok_s"), 0.05);
  EXPECT_EQ(MetricTarget("mean_tbt_ms"), 0.10);
  EXPECT_FALSE(MetricTarget("p99_tbt_ms").has_value());
}

StepTiming Timing(int64_t gemm, int64_t decode, int64_t overhead) {
  StepTiming t;
  t.term_ns[static_cast<size_t>(StepTerm::kGemm)] = gemm;
  t.term_ns[static_cast<size_t>(StepTerm::kDecodeAttention)] = decode;
  t.term_ns[static_cast<size_t>(StepTerm::kOverhead)] = overhead;
  t.total_ns = gemm + decode + overhead;
  return t;
}

TEST(SamePlanComparison, SharesMapesAndKindsByHand) {
  StepShape decode;
  decode.requests = decode.decode_requests = decode.new_tokens = 4;
  StepShape mixed = decode;
  mixed.prefill_requests = 1;
  mixed.cascade_prefix_tokens = 256;
  SamePlanComparison c;
  // Step 1 (decode): measured 1000 = 800 + 150 + 50, predicted 900 = 800 + 100 + 0.
  c.Add(decode, Timing(800, 150, 50), Timing(800, 100, 0));
  // Step 2 (mixed, cascade): measured 2000 = 1600 + 400, predicted 2200 = 1800 + 400.
  c.Add(mixed, Timing(1600, 400, 0), Timing(1800, 400, 0));
  const OrderedJson r = c.Report();
  EXPECT_EQ(r["steps"].get<uint64_t>(), 2u);
  EXPECT_DOUBLE_EQ(r["step_time_mape"].get<double>(), (0.1 + 0.1) / 2);
  EXPECT_DOUBLE_EQ(r["engine_time_s"]["measured"].get<double>(), 3000e-9);
  const OrderedJson& gemm = r["terms"]["gemm"];
  EXPECT_DOUBLE_EQ(gemm["error_share"].get<double>(), (0.0 + 200.0 / 2000) / 2);
  EXPECT_DOUBLE_EQ(gemm["signed_share"].get<double>(), 0.05);
  EXPECT_DOUBLE_EQ(gemm["mape"].get<double>(), (0.0 + 0.125) / 2);
  EXPECT_EQ(gemm["steps"].get<uint64_t>(), 2u);
  const OrderedJson& attention = r["terms"]["decode_attention"];
  EXPECT_DOUBLE_EQ(attention["error_share"].get<double>(), 0.05 / 2);
  EXPECT_DOUBLE_EQ(attention["mape"].get<double>(), (50.0 / 150) / 2);
  const OrderedJson& overhead = r["terms"]["overhead"];
  EXPECT_DOUBLE_EQ(overhead["signed_share"].get<double>(), -0.05 / 2);
  EXPECT_EQ(overhead["steps"].get<uint64_t>(), 1u);
  EXPECT_EQ(r["terms"]["cascade_prefix"]["steps"].get<uint64_t>(), 0u);
  EXPECT_DOUBLE_EQ(r["by_kind"]["decode"]["no_cascade"]["signed_mean_error"].get<double>(), -0.1);
  EXPECT_DOUBLE_EQ(r["by_kind"]["mixed"]["cascade"]["step_time_mape"].get<double>(), 0.1);
  EXPECT_FALSE(r["by_kind"].contains("prefill"));
  // By shape: both steps have n = 4 (decode) and 4 (mixed, no prefill tokens set): bin 4-7.
  const OrderedJson& decode_bin = r["by_shape"]["decode"]["n=4-7"];
  EXPECT_EQ(decode_bin["steps"].get<uint64_t>(), 1u);
  EXPECT_DOUBLE_EQ(decode_bin["measured_ms"].get<double>(), 1000e-6);
  EXPECT_DOUBLE_EQ(decode_bin["signed_share"]["decode_attention"].get<double>(), -0.05);
  EXPECT_DOUBLE_EQ(decode_bin["signed_share"]["overhead"].get<double>(), -0.05);
  EXPECT_DOUBLE_EQ(r["by_shape"]["mixed"]["n=4-7"]["signed_share"]["gemm"].get<double>(), 0.1);
  EXPECT_EQ(r["by_shape"]["decode"].size(), 1u);
  EXPECT_FALSE(r.contains("noise_floor"));
}

// The noise floor: a perfect model's MAPE against single executions with the measured spread.
TEST(SamePlanComparison, NoiseFloorByHand) {
  StepShape decode;
  decode.decode_requests = decode.new_tokens = 4;
  SamePlanComparison c;
  std::array<double, kNumStepTerms> cv{};
  cv[static_cast<size_t>(StepTerm::kGemm)] = 0.1;
  cv[static_cast<size_t>(StepTerm::kDecodeAttention)] = 0.2;
  c.SetNoise(cv);
  // Predicted 1000 = gemm 600 + decode 400: spreads 60 and 80, together 100.
  c.Add(decode, Timing(600, 400, 0), Timing(600, 400, 0));
  const OrderedJson floor = c.Report()["noise_floor"];
  const double k = std::sqrt(2 / 3.14159265358979323846);
  EXPECT_NEAR(floor["step_time_mape"].get<double>(), k * 0.1, 1e-12);
  EXPECT_NEAR(floor["terms"]["gemm"].get<double>(), k * 0.06, 1e-12);
  EXPECT_NEAR(floor["terms"]["decode_attention"].get<double>(), k * 0.08, 1e-12);
  EXPECT_EQ(floor["terms"]["overhead"].get<double>(), 0.0);
  EXPECT_EQ(KindOf(decode), StepKind::kDecode);
  StepShape prefill;
  prefill.prefill_requests = 1;
  EXPECT_EQ(KindOf(prefill), StepKind::kPrefill);
}

}  // namespace
}  // namespace feather
