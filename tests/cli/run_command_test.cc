// run_command_test.cc: `feather run` and `feather pretrain` end to end through the binary:
// the output contract (summary.json keys, results.h5), byte-identical reruns, bad input (exit 2,
// file:line:key, no output directory), and a pretrained policy loaded frozen.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

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
using ::testing::HasSubstr;
using test::RunFeather;
using test::RunResult;

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

class RunCommandTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) /
           ("feather_run_" + std::string(::testing::UnitTest::GetInstance()
                                             ->current_test_info()
                                             ->name()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A small, deterministic version of the default scenario.
  static std::vector<std::string> Small(std::vector<std::string> args) {
    for (const char* set : {"workload.requests=300", "scheduler_time=zero"}) {
      args.push_back("--set");
      args.push_back(set);
    }
    return args;
  }

  fs::path dir_;
};

TEST_F(RunCommandTest, WritesTheContractFields) {
  const RunResult run = RunFeather(Small({"run", "--out", (dir_ / "a").string()}));
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("throughput"));
  const auto summary = nlohmann::json::parse(ReadFile(dir_ / "a" / "summary.json"));
  for (const char* key :
       {"requests_finished", "output_tokens", "duration_s", "throughput_tok_s", "mean_tbt_ms",
        "p99_tbt_ms", "mean_ttft_ms", "mean_batch_size", "scheduler_cpu_s", "engine_busy_s",
        "preemptions", "evictions", "scenario"}) {
    EXPECT_TRUE(summary.contains(key)) << key;
  }
  EXPECT_EQ(summary["requests_finished"], 300);
  EXPECT_EQ(summary["scenario"]["workload"]["requests"], 300);
  EXPECT_EQ(summary["scenario"]["scheduler"]["selector"], "cht");
  EXPECT_GT(summary["scenario"]["resolved"]["kv_cache_blocks"].get<uint64_t>(), 0u);
  EXPECT_TRUE(fs::exists(dir_ / "a" / "results.h5"));
}

TEST_F(RunCommandTest, SameSeedGivesByteIdenticalSummary) {
  ASSERT_EQ(RunFeather(Small({"run", "--out", (dir_ / "a").string()})).exit_code, 0);
  ASSERT_EQ(RunFeather(Small({"run", "--out", (dir_ / "b").string()})).exit_code, 0);
  const std::string a = ReadFile(dir_ / "a" / "summary.json");
  EXPECT_FALSE(a.empty());
  EXPECT_EQ(a, ReadFile(dir_ / "b" / "summary.json"));
  // A different seed is a different run.
  ASSERT_EQ(RunFeather(Small({"run", "--out", (dir_ / "c").string(), "--set", "seed=2"}))
                .exit_code,
            0);
  EXPECT_NE(a, ReadFile(dir_ / "c" / "summary.json"));
}

TEST_F(RunCommandTest, BadScenarioExitsTwoWithFileLineKeyAndWritesNothing) {
  const fs::path scenario = dir_ / "bad.yaml";
  std::ofstream(scenario) << "seed: 1\nworkload:\n  requests: 10\n  arival: {rate: 5}\n";
  const fs::path out = dir_ / "out";
  const RunResult run = RunFeather({"run", scenario.string(), "--out", out.string()});
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_THAT(run.err, HasSubstr(scenario.string() + ":4: workload.arival: unknown key"));
  EXPECT_FALSE(fs::exists(out));
}

TEST_F(RunCommandTest, BadOverrideAndUnbuiltEngineExitTwo) {
  const fs::path out = dir_ / "out";
  const RunResult bad = RunFeather({"run", "--out", out.string(), "--set", "seed=-3"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_THAT(bad.err, HasSubstr("--set: seed"));
  const RunResult engine = RunFeather({"run", "--out", out.string(), "--set", "engine=cuda"});
  EXPECT_EQ(engine.exit_code, 2);
  EXPECT_THAT(engine.err, HasSubstr("engine 'cuda'"));
  EXPECT_FALSE(fs::exists(out));
}

TEST_F(RunCommandTest, PretrainedPolicyLoadsFrozen) {
  const std::string scenario = std::string(FEATHER_SOURCE_DIR) + "/scenarios/default.yaml";
  const fs::path policy = dir_ / "bandit.json";
  const RunResult train = RunFeather(Small(
      {"pretrain", scenario, "--steps", "400", "--out", policy.string()}));
  ASSERT_EQ(train.exit_code, 0) << train.err;
  EXPECT_THAT(train.out, HasSubstr("saved bandit policy"));
  const std::string saved = ReadFile(policy);
  ASSERT_FALSE(saved.empty());
  const RunResult frozen = RunFeather(Small(
      {"run", scenario, "--out", (dir_ / "frozen").string(), "--set",
       "scheduler.policy.load=" + policy.string(), "--set", "scheduler.policy.learning=false"}));
  ASSERT_EQ(frozen.exit_code, 0) << frozen.err;
  EXPECT_EQ(saved, ReadFile(policy));  // a frozen run never writes the policy
  // Loading a policy of another kind is refused.
  const RunResult wrong = RunFeather(Small(
      {"run", scenario, "--out", (dir_ / "wrong").string(), "--set", "scheduler.stop=qlearning",
       "--set", "scheduler.policy.load=" + policy.string()}));
  EXPECT_EQ(wrong.exit_code, 2);
  EXPECT_FALSE(fs::exists(dir_ / "wrong"));
}

}  // namespace
}  // namespace feather
