// Tests of calib/cpu_calibration.h: the attention kernel path a CPU calibration records
// (measured_on.kernel_variant) is the tile step the kernels actually run.
#include "calib/cpu_calibration.h"

#include <gtest/gtest.h>

#include "hw/attention_internal.h"

namespace feather::calib {
namespace {

using hw::attention_internal::AttentionIsa;

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
