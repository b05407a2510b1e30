// Tests of calib/cpu_calibration.h: the attention kernel path a CPU calibration records
// (measured_on.kernel_variant) is the tile step the kernels actually run.
#include "calib/cpu_calibration.h"

#include <gtest/gtest.h>

#include "hw/attention_internal.h"

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

}  // namespace
}  // namespace feather::calib
