// Tests for hw/cuda/cuda_variables.h: each FEATHER_CUDA_* variable's values, its default, and the
// refusal of anything else. Each is read once per process, so every case runs in a fresh child.
#include "hw/cuda/cuda_variables.h"

#include <gtest/gtest.h>

#include <cstdlib>

namespace feather::hw::cuda {
namespace {

TEST(CudaVariablesDeathTest, AttentionChoosesDecodeOrGeneralAndRejectsOthers) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        unsetenv("FEATHER_CUDA_ATTENTION");
        std::exit(DecodeKernelFromEnvironment() ? 3 : 4);
      },
      ::testing::ExitedWithCode(3), "");
  EXPECT_EXIT(
      {
        setenv("FEATHER_CUDA_ATTENTION", "general", 1);
        std::exit(DecodeKernelFromEnvironment() ? 3 : 4);
      },
      ::testing::ExitedWithCode(4), "");
  EXPECT_EXIT(
      {
        setenv("FEATHER_CUDA_ATTENTION", "decode", 1);
        (void)DecodeKernelFromEnvironment();
      },
      ::testing::ExitedWithCode(2), "FEATHER_CUDA_ATTENTION=decode: unknown");
}

TEST(CudaVariablesDeathTest, WeightsChooseFp32OrBf16AndRejectOthers) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        unsetenv("FEATHER_CUDA_WEIGHTS");
        std::exit(Bf16WeightsFromEnvironment() ? 3 : 4);
      },
      ::testing::ExitedWithCode(4), "");
  EXPECT_EXIT(
      {
        setenv("FEATHER_CUDA_WEIGHTS", "bf16", 1);
        std::exit(Bf16WeightsFromEnvironment() ? 3 : 4);
      },
      ::testing::ExitedWithCode(3), "");
  EXPECT_EXIT(
      {
        setenv("FEATHER_CUDA_WEIGHTS", "fp16", 1);
        (void)Bf16WeightsFromEnvironment();
      },
      ::testing::ExitedWithCode(2), "FEATHER_CUDA_WEIGHTS=fp16: unknown");
}

TEST(CudaVariablesDeathTest, ChoicesNameBothVariables) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        setenv("FEATHER_CUDA_WEIGHTS", "bf16", 1);
        setenv("FEATHER_CUDA_ATTENTION", "general", 1);
        std::exit(CudaKernelChoices() == "weights bf16, attention general" ? 3 : 4);
      },
      ::testing::ExitedWithCode(3), "");
  EXPECT_EXIT(
      {
        unsetenv("FEATHER_CUDA_WEIGHTS");
        unsetenv("FEATHER_CUDA_ATTENTION");
        std::exit(CudaKernelChoices() == "weights fp32, attention auto" ? 3 : 4);
      },
      ::testing::ExitedWithCode(3), "");
}

}  // namespace
}  // namespace feather::hw::cuda
