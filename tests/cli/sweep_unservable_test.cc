// sweep_unservable_test.cc: a sweep point whose `feather run` exits 3 (requests that can never be
// served, sim/serving/simulator.h) is a failed point: reported with the run's stderr line, no table, and
// retried by a rerun rather than taken as finished from the summary.json it wrote; once the
// scenario allows it (limits.allow_unservable) the table counts them in requests_unservable.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tests/cli/cli_test_support.h"

namespace feather {
namespace {

namespace fs = std::filesystem;
using test::ReadFile;
using test::RunFeather;
using test::RunResult;
using ::testing::HasSubstr;
using ::testing::Not;

const std::string kBase = std::string(FEATHER_SOURCE_DIR) + "/tests/cli/data/sweep_base.yaml";


class SweepUnservableTest : public test::TempDirTest {
 protected:
  SweepUnservableTest() : TempDirTest("sweep_unservable") {}

  // Prompts of 620-2,600 tokens; an 80-block (1,280-token) cache cannot hold the longer ones.
  fs::path WriteSweep(const std::string& extra_set) {
    const fs::path file = dir_ / "sweep.yaml";
    std::ofstream(file) << "base: " << kBase << "\n"
                        << "set: {workload.prompt_tokens: {kind: uniform, min: 20, max: 2000}"
                        << extra_set << "}\n"
                        << "vary:\n"
                        << "  serving.kv_cache_blocks: [80, 100000]\n";
    return file;
  }
};

TEST_F(SweepUnservableTest, APointThatExitsThreeFailsUntilTheScenarioAllowsIt) {
  const fs::path out = dir_ / "out";
  const RunResult run = RunFeather({"sweep", WriteSweep("").string(), "--out", out.string()});
  EXPECT_EQ(run.exit_code, 1) << run.err;
  EXPECT_THAT(run.err, HasSubstr("point kv_cache_blocks=80 failed (exit code 3): feather: "));
  EXPECT_THAT(run.err, HasSubstr("of 150 requests can never be served"));
  EXPECT_THAT(run.err, HasSubstr("no table written"));
  EXPECT_TRUE(fs::exists(out / "points" / "kv_cache_blocks=80" / "summary.json"));
  EXPECT_FALSE(fs::exists(out / "table.csv"));

  // A rerun retries the failed point (its summary.json does not make it finished).
  const RunResult again = RunFeather({"sweep", WriteSweep("").string(), "--out", out.string()});
  EXPECT_EQ(again.exit_code, 1) << again.err;
  EXPECT_THAT(again.err, HasSubstr("1 of 2 points already finished (skipped); 1 to run"));
  EXPECT_THAT(again.err, HasSubstr("point kv_cache_blocks=80 failed (exit code 3)"));
  EXPECT_FALSE(fs::exists(out / "table.csv"));

  // Allowed by the scenario: both points finish and the table says how many were rejected.
  const RunResult allowed = RunFeather(
      {"sweep", WriteSweep(", limits.allow_unservable: true").string(), "--out", out.string()});
  ASSERT_EQ(allowed.exit_code, 0) << allowed.err;
  EXPECT_THAT(allowed.err, Not(HasSubstr("failed")));
  std::istringstream csv(ReadFile(out / "table.csv"));
  std::string header, small, large;
  std::getline(csv, header);
  std::getline(csv, small);
  std::getline(csv, large);
  std::vector<std::string> columns;
  std::istringstream header_cells(header);
  for (std::string cell; std::getline(header_cells, cell, ',');) columns.push_back(cell);
  const auto column = std::find(columns.begin(), columns.end(), "requests_unservable");
  ASSERT_NE(column, columns.end()) << header;
  const auto cell = [&](const std::string& row) {
    std::istringstream cells(row);
    std::string value;
    for (auto it = columns.begin(); it <= column; ++it) std::getline(cells, value, ',');
    return value;
  };
  EXPECT_NE(cell(small), "0") << small;
  EXPECT_EQ(cell(large), "0") << large;
}

}  // namespace
}  // namespace feather
