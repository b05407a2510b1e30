// Tests for the `feather` binary as a user runs it: subcommands, JSON output, exit codes and
// messages. FEATHER_BINARY (set by tests/CMakeLists.txt) is the path of the built executable.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <array>
#include <cerrno>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/cli/cli_test_support.h"

namespace feather {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::StartsWith;

using test::RunFeather;
using test::RunResult;

TEST(CliTest, VersionPrintsNameAndBuild) {
  const RunResult run = RunFeather({"version"});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.out, StartsWith("feather "));
  EXPECT_THAT(run.out, HasSubstr("git "));
  EXPECT_THAT(run.err, IsEmpty());
}

TEST(CliTest, InfoJsonHasEveryProvenanceKey) {
  const RunResult run = RunFeather({"info", "--json"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const nlohmann::json info = nlohmann::json::parse(run.out, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(info.is_discarded()) << run.out;
  const char* const keys[] = {"hostname",
                              "cpu_model",
                              "logical_cpus",
                              "usable_cpus",
                              "l1d_cache_bytes",
                              "l2_cache_bytes",
                              "l3_cache_bytes",
                              "memory_bytes",
                              "os",
                              "kernel",
                              "arch",
                              "compiler",
                              "build_type",
                              "git_rev",
                              "feather_version",
                              "sanitized",
                              "cuda_compiler_present",
                              "date_utc",
                              "attention_isa",
                              "gemm_kernel"};
  for (const char* key : keys) {
    EXPECT_TRUE(info.contains(key)) << key;
  }
  EXPECT_GE(info.value("logical_cpus", 0), 1);
}

TEST(CliTest, InfoTextIsReadable) {
  const RunResult run = RunFeather({"info"});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("hostname"));
  EXPECT_THAT(run.out, HasSubstr("build type"));
}

TEST(CliTest, HelpExitsZero) {
  const RunResult run = RunFeather({"--help"});
  EXPECT_EQ(run.exit_code, 0);
  EXPECT_THAT(run.out, HasSubstr("bench"));
  EXPECT_THAT(run.out, HasSubstr("info"));
}

TEST(CliTest, UnknownSubcommandIsUsageError) {
  const RunResult run = RunFeather({"frobnicate"});
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_THAT(run.err, HasSubstr("frobnicate"));
  EXPECT_THAT(run.out, IsEmpty());
}

TEST(CliTest, MissingSubcommandIsUsageError) {
  const RunResult run = RunFeather({});
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_THAT(run.err, Not(IsEmpty()));
}

TEST(CliTest, UnknownFlagIsUsageError) {
  const RunResult run = RunFeather({"bench", "cht-ops", "--no-such-flag"});
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_THAT(run.err, HasSubstr("--no-such-flag"));
}

TEST(CliTest, BadValuesAreUsageErrors) {
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"bench", "cht-ops", "--requests", "-5"},
           {"bench", "cht-ops", "--requests", "many"},
           {"bench", "cht-ops", "--chunk-tokens", "0"},
           {"bench", "sched-overhead", "--selectors", "fcfs,nope"},
           {"bench", "sched-overhead", "--waiting", "10,x"},
       }) {
    const RunResult run = RunFeather(args);
    EXPECT_EQ(run.exit_code, 2) << args.back();
    EXPECT_THAT(run.err, Not(IsEmpty())) << args.back();
    EXPECT_THAT(run.out, IsEmpty()) << args.back();
  }
}

TEST(CliTest, CommandErrorIsOneLineOnStderr) {
  const RunResult run =
      RunFeather({"bench", "cht-ops", "--prompt-tokens", "100", "--prefix-tokens", "200"});
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_THAT(run.err, StartsWith("feather: error: "));
  EXPECT_THAT(run.err, HasSubstr("--prefix-tokens"));
  EXPECT_EQ(run.err.find('\n'), run.err.size() - 1) << run.err;
}

TEST(CliTest, BenchChtOpsJsonHasOperations) {
  const RunResult run = RunFeather({"bench", "cht-ops", "--json", "--requests", "40",
                                    "--prompt-tokens", "300", "--prefix-tokens", "200", "--groups",
                                    "2", "--chunk-tokens", "50", "--max-batch", "8"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const nlohmann::json result = nlohmann::json::parse(run.out, nullptr, false);
  ASSERT_FALSE(result.is_discarded()) << run.out;
  ASSERT_TRUE(result.contains("operations")) << run.out;
  ASSERT_TRUE(result["operations"].is_object());
  for (const auto& [name, op] : result["operations"].items()) {
    EXPECT_TRUE(op.contains("calls")) << name;
    EXPECT_TRUE(op.contains("mean_ns")) << name;
    EXPECT_TRUE(op.contains("total_ns")) << name;
  }
}

TEST(CliTest, BenchChtOpsTableListsOperations) {
  const RunResult run =
      RunFeather({"bench", "cht-ops", "--requests", "40", "--prompt-tokens", "300",
                  "--prefix-tokens", "200", "--groups", "2", "--max-batch", "8"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("operation"));
  EXPECT_THAT(run.out, HasSubstr("mean_ns"));
  EXPECT_THAT(run.out, HasSubstr("peak RSS"));
}

}  // namespace
}  // namespace feather
