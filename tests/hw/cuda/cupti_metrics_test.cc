// Tests for hw/cuda/cupti_metrics.h: the metric names feather asks CUPTI for, and the parsing of
// evaluated values (good values, every refusal with its message).
#include "hw/cuda/cupti_metrics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

namespace feather::hw::cuda {
namespace {

TEST(CuptiMetricsTest, NamesAreThePerfworksMetrics) {
  ASSERT_EQ(kCuptiMetricNames.size(), 2u);
  EXPECT_STREQ(kCuptiMetricNames[0], "dram__bytes_read.sum");
  EXPECT_STREQ(kCuptiMetricNames[1], "lts__t_sector_hit_rate.pct");
}

TEST(CuptiMetricsTest, ParsesAGoodRange) {
  const double values[] = {1.5e9, 37.5};
  std::string error;
  const auto counters = ParseRangeValues("decode b=64", values, 2, &error);
  ASSERT_TRUE(counters) << error;
  EXPECT_EQ(counters->range, "decode b=64");
  EXPECT_EQ(counters->dram_bytes_read, 1.5e9);
  EXPECT_DOUBLE_EQ(counters->l2_hit_rate, 0.375);
  EXPECT_DOUBLE_EQ(DramFractionOfPlanned(*counters, 3e9), 0.5);
  EXPECT_EQ(DramFractionOfPlanned(*counters, 0), 0.0);
}

TEST(CuptiMetricsTest, RefusesImpossibleValues) {
  struct Case {
    double dram;
    double hit;
    const char* message;
  };
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (const Case& c :
       {Case{nan, 10, "CUPTI range 'r': dram__bytes_read.sum = nan is not a finite number"},
        Case{-1, 10, "CUPTI range 'r': dram__bytes_read.sum = -1 bytes is negative"},
        Case{1, 100.5,
             "CUPTI range 'r': lts__t_sector_hit_rate.pct = 100.5 is outside [0, 100] percent"},
        Case{1, -0.1,
             "CUPTI range 'r': lts__t_sector_hit_rate.pct = -0.1 is outside [0, 100] percent"}}) {
    const double values[] = {c.dram, c.hit};
    std::string error;
    EXPECT_FALSE(ParseRangeValues("r", values, 2, &error));
    EXPECT_EQ(error, c.message);
  }
  const double one[] = {1};
  std::string error;
  EXPECT_FALSE(ParseRangeValues("r", one, 1, &error));
  EXPECT_EQ(error, "CUPTI range 'r': expected 2 metric values, got 1");
}

}  // namespace
}  // namespace feather::hw::cuda
