// Tests of the CUDA target's command-line entry points on a machine without a GPU (this
// project's): `feather selfcheck --target cuda`, `calibrate --target cuda`, `bench experiments
// --target cuda`, `validate --engine cuda` and a scenario's `engine: cuda` each exit 2 with one
// line naming the reason and write nothing; the self-check stamp gate refuses a missing or bad
// stamp with the file named. On a GPU machine the no-device tests skip (the self-check itself is
// exercised by tests/hw/cuda/device_test.cc there).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>

#include "cli/selfcheck_command.h"
#include "hw/cuda/device.h"
#include "tests/cli/cli_test_support.h"

namespace feather {
namespace {

namespace fs = std::filesystem;
using test::RunFeather;
using test::RunResult;
using ::testing::HasSubstr;

class CudaTargetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (hw::cuda::QueryCudaDevice().available) GTEST_SKIP() << "a CUDA device is present";
    dir_ = fs::temp_directory_path() / ("feather_cuda_target_" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  static void ExpectOneLineExitTwo(const RunResult& run, const std::string& prefix) {
    EXPECT_EQ(run.exit_code, 2) << run.err;
    EXPECT_EQ(std::count(run.err.begin(), run.err.end(), '\n'), 1) << run.err;
    EXPECT_THAT(run.err, HasSubstr(prefix));
    EXPECT_TRUE(run.err.find("no CUDA device") != std::string::npos ||
                run.err.find("built without CUDA") != std::string::npos ||
                run.err.find("not available in this build") != std::string::npos)
        << run.err;
  }

  fs::path dir_;
};

TEST_F(CudaTargetTest, SelfcheckSaysThereIsNoDevice) {
  const fs::path stamp = dir_ / "stamp.json";
  const RunResult run = RunFeather({"selfcheck", "--target", "cuda", "--stamp", stamp.string()});
  ExpectOneLineExitTwo(run, "feather selfcheck --target cuda: ");
  EXPECT_FALSE(fs::exists(stamp));
  const RunResult cpu = RunFeather({"selfcheck", "--target", "cpu"});
  EXPECT_EQ(cpu.exit_code, 2);
  EXPECT_THAT(cpu.err, HasSubstr("--target must be cuda"));
}

TEST_F(CudaTargetTest, CalibrateExperimentsValidateAndEngineRefuse) {
  const fs::path out = dir_ / "p.yaml";
  ExpectOneLineExitTwo(
      RunFeather({"calibrate", "--target", "cuda", "--quick", "--out", out.string()}),
      "feather calibrate --target cuda: ");
  EXPECT_FALSE(fs::exists(out));
  ExpectOneLineExitTwo(RunFeather({"bench", "experiments", "--target", "cuda", "--quick", "--out",
                                   dir_.string() + "/x"}),
                       "feather bench experiments --target cuda: ");
  EXPECT_FALSE(fs::exists(dir_ / "x"));
  const std::string scenario = std::string(FEATHER_SOURCE_DIR) + "/scenarios/default.yaml";
  ExpectOneLineExitTwo(RunFeather({"validate", scenario, "--profile", "cpu", "--engine", "cuda",
                                   "--out", (dir_ / "v").string()}),
                       "feather validate --engine cuda: ");
  EXPECT_FALSE(fs::exists(dir_ / "v"));
  const RunResult engine =
      RunFeather({"run", scenario, "--out", (dir_ / "r").string(), "--set", "engine=cuda"});
  ExpectOneLineExitTwo(engine, "engine 'cuda'");
  EXPECT_FALSE(fs::exists(dir_ / "r"));
}

TEST_F(CudaTargetTest, StampGateNamesTheFile) {
  const fs::path missing = dir_ / "none.json";
  EXPECT_THAT(SelfcheckStampGate(missing.string()),
              HasSubstr("no self-check stamp at " + missing.string()));
  const fs::path bad = dir_ / "bad.json";
  std::ofstream(bad) << "{\"passed\": true}";
  EXPECT_EQ(SelfcheckStampGate(bad.string()),
            bad.string() + ": field 'device_name': expected a string");
  EXPECT_FALSE(CudaTargetGate().empty());
}

}  // namespace
}  // namespace feather
