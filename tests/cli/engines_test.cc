// engines_test.cc: the "cpu" engine factory (cli/engines.h) applies the prefetch lookahead and
// the skinny GEMM rows the run's profile was calibrated with, and leaves the kernels' settings
// alone for a profile that does not record them.
#include "cli/engines.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "hw/cpu_engine.h"
#include "hw/decode_attention.h"
#include "hw/gemm.h"
#include "sim/io/scenario.h"
#include "sim/io/scenario_run.h"

namespace feather {
namespace {

const std::string kSource = FEATHER_SOURCE_DIR;

PreparedRun TinyCpuRun() {
  Scenario s = LoadScenarioText("engine: cpu\nmodel: " + kSource +
                                    "/tests/hw/data/cpu-tiny.yaml\nprofile: " + kSource +
                                    "/results/profiles/cpu.yaml\nworkload: {requests: 2}\n"
                                    "serving: {kv_cache_blocks: 64}\n",
                                "tiny.yaml", ".");
  return PrepareRun(s);
}

TEST(CpuEngineFactoryTest, AppliesTheProfilesPrefetchLookahead) {
  RegisterBuiltinEngines();
  PreparedRun run = TinyCpuRun();
  ASSERT_TRUE(run.profile.measured_on.has_value());
  run.profile.measured_on->decode_prefetch_bytes = 2048;
  hw::SetDecodePrefetchBytes(0);
  const std::unique_ptr<Engine> engine = MakeEngine(run);
  EXPECT_EQ(hw::DecodePrefetchBytes(), 2048u);

  run.profile.measured_on->decode_prefetch_bytes = 0;  // not recorded: left as it is
  hw::SetDecodePrefetchBytes(8192);
  const std::unique_ptr<Engine> other = MakeEngine(run);
  EXPECT_EQ(hw::DecodePrefetchBytes(), 8192u);
  hw::SetDecodePrefetchBytes(0);
}

// A profile calibrated on packed weights runs packed; one that records row-major, or nothing
// (calibrated before packing existed), runs row-major.
TEST(CpuEngineFactoryTest, HoldsTheWeightsAsTheProfileWasMeasuredWith) {
  RegisterBuiltinEngines();
  PreparedRun run = TinyCpuRun();
  ASSERT_TRUE(run.profile.measured_on.has_value());
  const bool can_pack = hw::DefaultGemmBackend() == hw::GemmBackend::kEigen;
  for (const char* weights : {"packed", "row-major", ""}) {
    run.profile.measured_on->gemm_weights = weights;
    const std::unique_ptr<Engine> engine = MakeEngine(run);
    const auto* cpu = dynamic_cast<const hw::CpuEngine*>(engine.get());
    ASSERT_NE(cpu, nullptr);
    EXPECT_EQ(cpu->packed_weights(), can_pack && std::string(weights) == "packed") << weights;
  }
}

TEST(CpuEngineFactoryTest, RunsTheSkinnyGemmRowsTheProfileWasMeasuredWith) {
  RegisterBuiltinEngines();
  PreparedRun run = TinyCpuRun();
  ASSERT_TRUE(run.profile.measured_on.has_value());
  const uint32_t before = hw::SetGemmSkinnyRows(hw::kGemmSkinnyRowsAuto);
  run.profile.gemm_skinny_max_tokens = 0;  // calibrated with Eigen's product: the kernel off
  (void)MakeEngine(run);
  EXPECT_EQ(hw::GemmSkinnyRows(hw::GemmBackend::kEigen), 0u);

  run.profile.gemm_skinny_max_tokens = 4;
  (void)MakeEngine(run);
  EXPECT_EQ(hw::GemmSkinnyRows(hw::GemmBackend::kEigen),
            hw::GemmKernelName(hw::GemmBackend::kEigen) == "blas" ? 0u : 4u);

  run.profile.measured_on.reset();  // not a calibrated profile: the setting is left
  (void)hw::SetGemmSkinnyRows(6);
  (void)MakeEngine(run);
  EXPECT_EQ(hw::GemmSkinnyRows(hw::GemmBackend::kEigen),
            hw::GemmKernelName(hw::GemmBackend::kEigen) == "blas" ? 0u : 6u);
  (void)hw::SetGemmSkinnyRows(before);
}

}  // namespace
}  // namespace feather
