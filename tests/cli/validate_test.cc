// validate_test.cc: `feather validate` end to end on the toy CPU model (tests/hw/data/cpu-tiny.yaml):
// the layout of validation.json (the contract in cli/validate_command.h), the aggregation of
// repeated measured runs, and the refusal of a bad --repeat. Timings do not matter here; the
// figures in results/validation/ are made with the full-size scenarios.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "tests/cli/cli_test_support.h"

namespace feather {
namespace {

namespace fs = std::filesystem;

const std::string kSource = FEATHER_SOURCE_DIR;

std::vector<std::string> TinyValidateArgs(const fs::path& out, const std::string& repeat) {
  return {"validate",
          kSource + "/scenarios/validation/default.yaml",
          "--profile",
          kSource + "/results/profiles/cpu.yaml",
          "--out",
          out.string(),
          "--repeat",
          repeat,
          "--json",
          "--allow-foreign-profile",  // these tests check function on any machine
          "--set",
          "model=" + kSource + "/tests/hw/data/cpu-tiny.yaml",
          "--set",
          "workload.requests=16",
          "--set",
          "workload.sharing.prefix_tokens=64",
          "--set",
          "workload.output_tokens=6",
          "--set",
          "serving.kv_cache_blocks=2048",
          "--set",
          "scheduler_time=zero"};
}

nlohmann::json ReadJson(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return nlohmann::json::parse(text.str());
}

// A profile calibrated on another machine is refused before anything runs (issue 20), and
// accepted with --allow-foreign-profile.
TEST(ValidateCommandTest, AProfileOfAnotherMachineIsRefused) {
  const fs::path dir = fs::path(::testing::TempDir()) / "feather_validate_foreign";
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ifstream in(kSource + "/results/profiles/cpu.yaml");
  std::stringstream text;
  text << in.rdbuf();
  std::string yaml = text.str();
  const size_t at = yaml.find("  cpu_model: ");
  ASSERT_NE(at, std::string::npos);
  yaml.replace(at, yaml.find('\n', at) - at, "  cpu_model: \"Imaginary CPU 9000\"");
  std::ofstream(dir / "other.yaml") << yaml;
  std::vector<std::string> args = TinyValidateArgs(dir / "out", "1");
  args[3] = (dir / "other.yaml").string();
  args.erase(std::find(args.begin(), args.end(), "--allow-foreign-profile"));
  const test::RunResult run = test::RunFeather(args);
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_THAT(run.err, ::testing::HasSubstr("measured on Imaginary CPU 9000"));
  EXPECT_THAT(run.err, ::testing::HasSubstr("--allow-foreign-profile"));
  EXPECT_FALSE(fs::exists(dir / "out"));
  fs::remove_all(dir);
}

TEST(ValidateCommandTest, RepeatedMeasuredRunsAreAveragedAndKept) {
  const fs::path out = fs::path(::testing::TempDir()) / "feather_validate_repeat";
  fs::remove_all(out);
  setenv("OMP_WAIT_POLICY", "passive", 1);  // see cpu_engine_test.cc: functional, not timed
  const test::RunResult run = test::RunFeather(TinyValidateArgs(out, "2"));
  ASSERT_EQ(run.exit_code, 0) << run.err;

  const nlohmann::json validation = ReadJson(out / "validation.json");
  EXPECT_EQ(nlohmann::json::parse(run.out), validation);  // --json prints what it wrote
  const std::vector<std::string> expected_runs = {"measured-1", "measured-2"};
  EXPECT_EQ(validation["runs"]["measured"].get<std::vector<std::string>>(), expected_runs);
  EXPECT_EQ(validation["runs"]["predicted"], "predicted");
  for (const char* name : {"measured-1", "measured-2", "predicted"}) {
    EXPECT_TRUE(fs::exists(out / name / "summary.json")) << name;
    EXPECT_TRUE(fs::exists(out / name / "results.h5")) << name;
  }
  EXPECT_FALSE(fs::exists(out / "measured"));

  const std::vector<std::string> metrics = {"throughput_tok_s", "mean_tbt_ms", "p99_tbt_ms",
                                            "mean_batch_size", "mean_ttft_ms"};
  ASSERT_EQ(validation["metrics"].size(), metrics.size());
  const nlohmann::json first = ReadJson(out / "measured-1" / "summary.json");
  const nlohmann::json second = ReadJson(out / "measured-2" / "summary.json");
  const nlohmann::json predicted = ReadJson(out / "predicted" / "summary.json");
  for (const std::string& name : metrics) {
    SCOPED_TRACE(name);
    const nlohmann::json& m = validation["metrics"][name];
    const double a = first[name].get<double>();
    const double b = second[name].get<double>();
    const std::vector<double> expected_values = {a, b};
    EXPECT_EQ(m["measured_runs"].get<std::vector<double>>(), expected_values);
    const double mean = (a + b) / 2;
    EXPECT_DOUBLE_EQ(m["measured"].get<double>(), mean);
    EXPECT_DOUBLE_EQ(m["predicted"].get<double>(), predicted[name].get<double>());
    const double signed_error = (predicted[name].get<double>() - mean) / mean;
    EXPECT_DOUBLE_EQ(m["signed_error"].get<double>(), signed_error);
    EXPECT_DOUBLE_EQ(m["rel_error"].get<double>(), std::fabs(signed_error));
    EXPECT_DOUBLE_EQ(m["measured_spread"].get<double>(), std::fabs(a - b) / mean);
  }
  // Same-plan totals cover the steps of both measured runs.
  EXPECT_EQ(validation["same_plans"]["steps"].get<uint64_t>(),
            first["steps"].get<uint64_t>() + second["steps"].get<uint64_t>());
  fs::remove_all(out);
}

TEST(ValidateCommandTest, OneRunKeepsTheMeasuredDirectoryName) {
  const fs::path out = fs::path(::testing::TempDir()) / "feather_validate_once";
  fs::remove_all(out);
  setenv("OMP_WAIT_POLICY", "passive", 1);
  const test::RunResult run = test::RunFeather(TinyValidateArgs(out, "1"));
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const nlohmann::json validation = ReadJson(out / "validation.json");
  EXPECT_EQ(validation["runs"]["measured"].get<std::vector<std::string>>(),
            std::vector<std::string>{"measured"});
  EXPECT_TRUE(fs::exists(out / "measured" / "summary.json"));
  EXPECT_EQ(validation["metrics"]["throughput_tok_s"]["measured_spread"].get<double>(), 0.0);
  fs::remove_all(out);
}

TEST(ValidateCommandTest, RefusesARepeatBelowOne) {
  const fs::path out = fs::path(::testing::TempDir()) / "feather_validate_zero";
  fs::remove_all(out);
  const test::RunResult run = test::RunFeather(TinyValidateArgs(out, "0"));
  EXPECT_NE(run.exit_code, 0);
  EXPECT_NE(run.err.find("--repeat"), std::string::npos) << run.err;
  EXPECT_FALSE(fs::exists(out / "validation.json"));
}

}  // namespace
}  // namespace feather
