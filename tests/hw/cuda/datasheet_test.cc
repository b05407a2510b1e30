// Tests for hw/cuda/datasheet.h: device-name matching (most specific row first) and the probe
// band check.
#include "hw/cuda/datasheet.h"

#include <gtest/gtest.h>

namespace feather::hw::cuda {
namespace {

TEST(DatasheetTest, MatchesTheMostSpecificRow) {
  EXPECT_EQ(FindDatasheet("NVIDIA H100 80GB HBM3")->dram_gb_per_s, 3350);
  EXPECT_EQ(FindDatasheet("NVIDIA H100 PCIe")->dram_gb_per_s, 2000);
  EXPECT_EQ(FindDatasheet("NVIDIA H100 NVL")->dram_gb_per_s, 3900);
  EXPECT_EQ(FindDatasheet("NVIDIA H200")->dram_gb_per_s, 4800);
  EXPECT_EQ(FindDatasheet("NVIDIA A100-SXM4-80GB")->dram_gb_per_s, 2039);
  EXPECT_EQ(FindDatasheet("NVIDIA A100-SXM4-40GB")->dram_gb_per_s, 1555);
  EXPECT_EQ(FindDatasheet("NVIDIA L40S")->dram_gb_per_s, 864);
  EXPECT_EQ(FindDatasheet("NVIDIA L40")->bf16_dense_tflops, 181);
  EXPECT_EQ(FindDatasheet("NVIDIA L4")->dram_gb_per_s, 300);
  EXPECT_FALSE(FindDatasheet("NVIDIA GeForce GTX 1080"));
}

TEST(DatasheetTest, BandCheck) {
  EXPECT_EQ(CheckAgainstDatasheet("copy GB/s", 3000, 3350, kBandwidthFloor), "");
  EXPECT_EQ(CheckAgainstDatasheet("copy GB/s", 1000, 3350, kBandwidthFloor),
            "copy GB/s 1000.0 is 30 % of the datasheet's 3350.0 (expected 60-105 %)");
  EXPECT_NE(CheckAgainstDatasheet("copy GB/s", 4000, 3350, kBandwidthFloor), "");
  EXPECT_NE(CheckAgainstDatasheet("x", 1, 0, kBandwidthFloor), "");
}

}  // namespace
}  // namespace feather::hw::cuda
