// Tests of calib/cpu_calibration.h: the attention kernel path a CPU calibration records
// (measured_on.kernel_variant) is the tile step the kernels actually run, and the base profile
// records the skinny GEMM rows the engine's products run with and the fastest DRAM read.
#include "calib/cpu_calibration.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "hw/attention_internal.h"
#include "hw/gemm.h"
#include "hw/host_info.h"
#include "sim/io/model_config_yaml.h"

namespace feather::calib {
namespace {

using hw::attention_internal::AttentionIsa;

// The DRAM probe must not fit in the LLC: a 16 MiB probe once read a 32 MiB L3 at twice DRAM's
// bandwidth.
TEST(CpuCalibrationTest, DramProbeArraysOutgrowTheLlc) {
  constexpr size_t kMiB = size_t{1} << 20;
  for (const size_t llc : {size_t{0}, 8 * kMiB, 32 * kMiB, 96 * kMiB, 1152 * kMiB}) {
    EXPECT_GE(DramProbeBytes(llc), 8 * llc) << "llc " << llc;
    EXPECT_GE(DramProbeBytes(llc), 256 * kMiB) << "llc " << llc;
  }
  EXPECT_EQ(DramProbeBytes(32 * kMiB), 256 * kMiB);
  EXPECT_EQ(DramProbeBytes(96 * kMiB), 768 * kMiB);
}

TEST(CpuCalibrationTest, KernelPathNameFollowsTheTileStepInUse) {
  const struct {
    AttentionIsa isa;
    const char* name;
  } cases[] = {{AttentionIsa::kScalar, "scalar"},
               {AttentionIsa::kAvx2, "avx2+fma"},
               {AttentionIsa::kAvx512, "avx512"},
               {AttentionIsa::kAvx512Bf16, "avx512bf16"}};
  int checked = 0;
  for (const auto& c : cases) {
    if (!hw::attention_internal::SetAttentionIsaForTesting(c.isa)) continue;  // CPU lacks it
    EXPECT_EQ(AttentionIsaName(), c.name);
    ++checked;
  }
  hw::attention_internal::SetAttentionIsaForTesting(AttentionIsa::kAuto);
  EXPECT_GE(checked, 1);  // scalar is always there
}

// gemm_skinny_max_tokens is the build's, as the engine runs it (`spec`, never fitted): the
// automatic choice, a forced one, and none with the kernel off or the product not Eigen's.
TEST(CpuCalibrationTest, BaseProfileRecordsTheSkinnyGemmRowsInUse) {
  Probes probes;
  probes.dram.bytes_per_s = 30e9;
  probes.llc.bytes_per_s = 100e9;
  probes.gemm_peak.flops_per_s = 200e9;
  probes.gemm_peak.backend = hw::GemmBackend::kEigen;
  const HostInfo host;
  const uint32_t before = hw::SetGemmSkinnyRows(hw::kGemmSkinnyRowsAuto);
  DeviceProfile p = CpuBaseProfile(probes, host, 2);
  EXPECT_EQ(p.gemm_skinny_max_tokens, hw::GemmSkinnyRows(hw::GemmBackend::kEigen));
  (void)hw::SetGemmSkinnyRows(6);
  p = CpuBaseProfile(probes, host, 2);
  EXPECT_EQ(p.gemm_skinny_max_tokens,
            hw::GemmKernelName(hw::GemmBackend::kEigen) == "blas" ? 0 : 6);
  (void)hw::SetGemmSkinnyRows(0);
  EXPECT_EQ(CpuBaseProfile(probes, host, 2).gemm_skinny_max_tokens, 0);
  (void)hw::SetGemmSkinnyRows(6);
  probes.gemm_peak.backend = hw::GemmBackend::kBlas;
  p = CpuBaseProfile(probes, host, 2);
  EXPECT_EQ(p.gemm_skinny_max_tokens, 0);
  for (size_t i = 0; i < kNumProfileParameters; ++i) {
    if (ProfileParameters()[i].name == "gemm_skinny_max_tokens") {
      EXPECT_EQ(p.origins[i].source, ParameterSource::kSpec);
      EXPECT_NE(p.origins[i].note.find("no skinny GEMM kernel"), std::string::npos);
    }
  }
  // With packed weights the engine has no skinny range: one roofline.
  probes.gemm_peak.backend = hw::GemmBackend::kEigen;
  (void)hw::SetGemmSkinnyRows(6);
  EXPECT_EQ(CpuBaseProfile(probes, host, 2, /*packed_weights=*/true).gemm_skinny_max_tokens, 0);
  (void)hw::SetGemmSkinnyRows(before);
}

// The DRAM probe read between the grid's passes replaces the profile's only when faster, every
// read is kept, and the base profile's note gives their range. Without a weight probe before the
// grid none is taken between passes, and the profile streams weights at the DRAM rate.
TEST(CpuCalibrationTest, DramProbeBetweenPassesKeepsTheFastestRead) {
  Probes probes;
  probes.dram.bytes_per_s = 1;  // slower than any real read
  probes.llc.bytes_per_s = 100e9;
  probes.gemm_peak.flops_per_s = 200e9;
  ProbeBandwidthBetweenPasses(probes, 2, 0);
  ASSERT_EQ(probes.dram_between_passes.size(), 1u);
  EXPECT_GT(probes.dram.bytes_per_s, 1);
  EXPECT_EQ(probes.dram.bytes_per_s, probes.dram_between_passes[0]);
  probes.dram.bytes_per_s = 1e15;  // faster than any real read
  ProbeBandwidthBetweenPasses(probes, 2, 0);
  ASSERT_EQ(probes.dram_between_passes.size(), 2u);
  EXPECT_EQ(probes.dram.bytes_per_s, 1e15);
  const DeviceProfile p = CpuBaseProfile(probes, HostInfo{}, 2);
  for (size_t i = 0; i < kNumProfileParameters; ++i) {
    if (ProfileParameters()[i].name == "dram_bw_bytes_per_s") {
      EXPECT_EQ(p.dram_bw_bytes_per_s, 1e15);
      EXPECT_NE(p.origins[i].note.find("after each of its 2 timed passes"), std::string::npos)
          << p.origins[i].note;
    }
  }
  EXPECT_TRUE(probes.weights_between_passes.empty());
  EXPECT_EQ(p.weight_stream_bw_bytes_per_s, 0);
  EXPECT_EQ(WeightStreamBw(p), p.dram_bw_bytes_per_s);
}

// The weight probe reads an array of exactly the weights' bytes, again between passes (the
// fastest kept), and the base profile records it as the weight-stream bandwidth with the size.
TEST(CpuCalibrationTest, WeightProbeReadsTheWeightsWorkingSet) {
  Probes probes;
  probes.dram.bytes_per_s = 10e9;
  probes.llc.bytes_per_s = 100e9;
  probes.gemm_peak.flops_per_s = 200e9;
  probes.weights.array_bytes = size_t{3} << 20;
  probes.weights.bytes_per_s = 1;  // slower than any real read
  ProbeBandwidthBetweenPasses(probes, 2, 0);
  ASSERT_EQ(probes.weights_between_passes.size(), 1u);
  EXPECT_EQ(probes.weights.array_bytes, size_t{3} << 20);
  EXPECT_EQ(probes.weights.bytes_per_s, probes.weights_between_passes[0]);
  EXPECT_GT(probes.weights.bytes_per_s, 1);
  const DeviceProfile p = CpuBaseProfile(probes, HostInfo{}, 2);
  EXPECT_EQ(p.weight_stream_bw_bytes_per_s, probes.weights.bytes_per_s);
  EXPECT_EQ(WeightStreamBw(p), probes.weights.bytes_per_s);
  for (size_t i = 0; i < kNumProfileParameters; ++i) {
    if (ProfileParameters()[i].name == "weight_stream_bw_bytes_per_s") {
      EXPECT_EQ(p.origins[i].source, ParameterSource::kMeasured);
      EXPECT_NE(p.origins[i].note.find("(3 MiB)"), std::string::npos) << p.origins[i].note;
      EXPECT_NE(p.origins[i].note.find("after each of its 1 timed passes"), std::string::npos)
          << p.origins[i].note;
    }
  }
}

// `calibrate --block-tokens`: the grid's steps on other pages run on an engine of those pages
// (each step's table then holds fewer, longer pages), and a grid that mixes sizes is refused.
TEST(CpuCalibrationTest, TheGridRunsOnTheEngineOfItsPageSize) {
  const ModelConfig model =
      LoadModelConfig(std::string(FEATHER_SOURCE_DIR) + "/tests/hw/data/cpu-tiny.yaml");
  std::vector<GridPoint> grid(2);
  grid[0].spec.decode_requests = 4;
  grid[0].spec.suffix_tokens = 100;
  grid[0].cascade = false;
  grid[0].label = "decode";
  grid[1].spec.decode_requests = 4;
  grid[1].spec.groups = 1;
  grid[1].spec.shared_prefix_tokens = 96;
  grid[1].spec.suffix_tokens = 20;
  grid[1].label = "shared";
  SetGridBlockTokens(grid, 32);
  for (const GridPoint& point : grid) EXPECT_EQ(point.spec.block_tokens, 32u);
  EXPECT_EQ(hw::MakeSyntheticBatch(grid[0].spec).tables[0].size(), 4u);  // ceil(101 / 32)
  // The shared step's prefix is three whole 32-token pages.
  EXPECT_EQ(hw::MakeSyntheticBatch(grid[1].spec).plan.common_prefix_tokens, 96u);
  const uint64_t pool = LargestStepBlocks(grid) + 4;
  const std::vector<StepMeasurement> measured = MeasureCpuGrid(
      grid, model, pool, 1, hw::GemmBackend::kEigen, 1, [] {}, [](int) {});
  ASSERT_EQ(measured.size(), 2u);
  for (const StepMeasurement& m : measured) EXPECT_GT(m.row.measured.total_ns, 0);

  grid[1].spec.block_tokens = 16;
  EXPECT_THROW((void)MeasureCpuGrid(
                   grid, model, pool, 1, hw::GemmBackend::kEigen, 1, [] {}, [](int) {}),
               std::invalid_argument);
}

}  // namespace
}  // namespace feather::calib
