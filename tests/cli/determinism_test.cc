// determinism_test.cc: the same scenario and seed give the same results. `feather run` twice
// (scheduler time `zero`, so wall-clock measurements do not enter) must write byte-identical
// summary.json and results.h5, and every dataset read back must be equal row by row; this holds
// for every stop policy, the learning and random ones included, for a radix workload under LPM
// and for trace replay. A different seed must give a different run (the test can fail).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "sim/io/run_output.h"
#include "tests/cli/cli_test_support.h"

namespace feather {
namespace {

namespace fs = std::filesystem;

std::string ReadBytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// Every column of results.h5, row by row, with the dataset's name in the message.
void ExpectSameDatasets(const fs::path& a, const fs::path& b) {
  const RunRecords ra = ReadResultsH5(a.string());
  const RunRecords rb = ReadResultsH5(b.string());
  ASSERT_EQ(ra.requests.size(), rb.requests.size());
  ASSERT_EQ(ra.steps.size(), rb.steps.size());
  ASSERT_GT(ra.requests.size(), 0u);
  ASSERT_GT(ra.steps.size(), 0u);
#define FEATHER_EXPECT_COLUMN(table, field)                                                \
  for (size_t i = 0; i < ra.table.size(); ++i) {                                           \
    ASSERT_EQ(ra.table[i].field, rb.table[i].field) << "/" #table "/" #field " row " << i; \
  }
  FEATHER_EXPECT_COLUMN(requests, arrival_ns)
  FEATHER_EXPECT_COLUMN(requests, first_token_ns)
  FEATHER_EXPECT_COLUMN(requests, finish_ns)
  FEATHER_EXPECT_COLUMN(requests, prompt_tokens)
  FEATHER_EXPECT_COLUMN(requests, output_tokens)
  FEATHER_EXPECT_COLUMN(requests, cached_tokens)
  FEATHER_EXPECT_COLUMN(requests, preemptions)
  FEATHER_EXPECT_COLUMN(requests, prefix_group)
  FEATHER_EXPECT_COLUMN(steps, start_ns)
  FEATHER_EXPECT_COLUMN(steps, step_ns)
  FEATHER_EXPECT_COLUMN(steps, scheduler_ns)
  FEATHER_EXPECT_COLUMN(steps, batch_size)
  FEATHER_EXPECT_COLUMN(steps, decode_tokens)
  FEATHER_EXPECT_COLUMN(steps, prefill_tokens)
  FEATHER_EXPECT_COLUMN(steps, admitted)
  FEATHER_EXPECT_COLUMN(steps, waiting)
  FEATHER_EXPECT_COLUMN(steps, common_prefix_tokens)
  FEATHER_EXPECT_COLUMN(steps, kv_used_blocks)
  FEATHER_EXPECT_COLUMN(steps, cascade_used)
  FEATHER_EXPECT_COLUMN(steps, term_ns)
#undef FEATHER_EXPECT_COLUMN
  const RunOutputMeta ma = ReadResultsH5Meta(a.string());
  const RunOutputMeta mb = ReadResultsH5Meta(b.string());
  EXPECT_EQ(ma.scenario, mb.scenario);
  EXPECT_EQ(ma.provenance, mb.provenance);
  EXPECT_EQ(ma.selector, mb.selector);
  EXPECT_EQ(ma.stop_policy, mb.stop_policy);
}

class DeterminismTest : public ::testing::TestWithParam<std::vector<std::string>> {
 protected:
  void SetUp() override {
    std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::replace(name.begin(), name.end(), '/', '_');
    dir_ = fs::path(::testing::TempDir()) / ("feather_determinism_" + name);
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // `feather run` with the case's settings into dir_/name; returns the output directory.
  fs::path Run(const std::string& name, std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"run", "--out", (dir_ / name).string()};
    for (const std::string& set : GetParam()) args.insert(args.end(), {"--set", set});
    for (const std::string& set : extra) args.insert(args.end(), {"--set", set});
    const test::RunResult run = test::RunFeather(args);
    EXPECT_EQ(run.exit_code, 0) << run.err;
    return dir_ / name;
  }

  fs::path dir_;
};

TEST_P(DeterminismTest, SameSeedGivesIdenticalSummaryAndDatasets) {
  const fs::path a = Run("a");
  const fs::path b = Run("b");
  const std::string summary = ReadBytes(a / "summary.json");
  ASSERT_FALSE(summary.empty());
  EXPECT_EQ(summary, ReadBytes(b / "summary.json"));
  EXPECT_EQ(ReadBytes(a / "results.h5"), ReadBytes(b / "results.h5"));
  ExpectSameDatasets(a / "results.h5", b / "results.h5");

  const fs::path c = Run("c", {"seed=2"});
  EXPECT_NE(summary, ReadBytes(c / "summary.json"));
  EXPECT_NE(ReadBytes(a / "results.h5"), ReadBytes(c / "results.h5"));
}

const std::vector<std::string> kSmall = {"workload.requests=300", "scheduler_time=zero",
                                         "workload.sharing.prefix_tokens=500"};

std::vector<std::string> With(std::vector<std::string> extra) {
  std::vector<std::string> sets = kSmall;
  sets.insert(sets.end(), extra.begin(), extra.end());
  return sets;
}

INSTANTIATE_TEST_SUITE_P(
    Policies, DeterminismTest,
    ::testing::Values(With({}),  // CHT + bandit
                      With({"scheduler.stop=qlearning"}),
                      With({"scheduler.stop=heuristic", "scheduler.selector=fcfs"}),
                      With({"scheduler.stop=dynamic-batching", "scheduler.selector=oracle"}),
                      With({"scheduler.selector=lpm", "scheduler.stop=always",
                            "workload.sharing={kind: radix, levels: 3, branching: 3, "
                            "level_tokens: 100}"}),
                      With({"workload.arrival={kind: piecewise, phases: [{duration_s: 1, rate: "
                            "50}, {duration_s: 1, rate: 200}]}",
                            "workload.prompt_tokens={kind: lognormal, mean: 80, sigma: 0.8, "
                            "min: 1, max: 400}"})));

// Trace replay ignores the seed, so only the identity half applies.
TEST(TraceDeterminismTest, SameTraceGivesIdenticalOutputs) {
  const fs::path dir = fs::path(::testing::TempDir()) / "feather_determinism_trace";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string trace = std::string(FEATHER_SOURCE_DIR) + "/tests/sim/data/small_trace.jsonl";
  auto run = [&](const std::string& name) {
    const test::RunResult r =
        test::RunFeather({"run", "--out", (dir / name).string(), "--set", "scheduler_time=zero",
                          "--set", "workload.trace={path: " + trace + ", block_tokens: 4}"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return dir / name;
  };
  const fs::path a = run("a");
  const fs::path b = run("b");
  EXPECT_EQ(ReadBytes(a / "summary.json"), ReadBytes(b / "summary.json"));
  EXPECT_EQ(ReadBytes(a / "results.h5"), ReadBytes(b / "results.h5"));
  ExpectSameDatasets(a / "results.h5", b / "results.h5");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace feather
