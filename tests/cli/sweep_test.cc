// sweep_test.cc: `feather sweep`: expansion and naming of sweep files (unit), validation errors
// (exit 2, FILE:LINE: KEY, nothing written), a tiny sweep end to end, resuming after the sweep
// is killed (SIGKILL and SIGTERM) gives the uninterrupted table byte for byte, and shards
// 1/3 + 2/3 + 3/3 merged give the single-machine table byte for byte.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cli/sweep_spec.h"
#include "policies/selector_factory.h"
#include "policies/stop_policy_factory.h"
#include "cli/sweep_table.h"
#include "base/input_error.h"
#include "tests/cli/cli_test_support.h"

namespace feather {
namespace {

namespace fs = std::filesystem;
using test::RunFeather;
using test::RunResult;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

const std::string kBase = std::string(FEATHER_SOURCE_DIR) + "/tests/cli/data/sweep_base.yaml";

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

void WriteFile(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

std::vector<std::string> Names(const SweepSpec& spec) {
  std::vector<std::string> names;
  for (const SweepPoint& p : spec.points) names.push_back(p.name);
  return names;
}

// ---- Expansion and naming (no scenario loading) ----------------------------------------------

SweepSpec Expand(const std::string& text) {
  return LoadSweepText("base: " + kBase + "\n" + text, "sweep.yaml", ".", false);
}

TEST(SweepSpecTest, VaryIsACartesianProductWithTheLastKeyFastest) {
  const SweepSpec spec = Expand(
      "vary:\n"
      "  scheduler.stop: [always, bandit]\n"
      "  workload.arrival.rate: [10, 20, 50]\n");
  EXPECT_THAT(Names(spec),
              ElementsAre("stop=always,rate=10", "stop=always,rate=20", "stop=always,rate=50",
                          "stop=bandit,rate=10", "stop=bandit,rate=20", "stop=bandit,rate=50"));
  EXPECT_THAT(spec.swept_keys, ElementsAre("scheduler.stop", "workload.arrival.rate"));
  EXPECT_THAT(spec.points[4].overrides,
              ElementsAre("scheduler.stop=bandit", "workload.arrival.rate=20"));
  EXPECT_EQ(spec.name, "sweep");
}

TEST(SweepSpecTest, PointsTimesVaryWithFixedOverridesFirst) {
  const SweepSpec spec = Expand(
      "name: my sweep\n"
      "set: {workload.requests: 100}\n"
      "points:\n"
      "  - {scheduler.selector: fcfs, scheduler.stop: always}\n"
      "  - {scheduler.selector: cht, scheduler.stop: bandit}\n"
      "vary: {workload.sharing.groups: [1, 5]}\n");
  EXPECT_EQ(spec.name, "my_sweep");
  EXPECT_THAT(
      Names(spec),
      ElementsAre("selector=fcfs,stop=always,groups=1", "selector=fcfs,stop=always,groups=5",
                  "selector=cht,stop=bandit,groups=1", "selector=cht,stop=bandit,groups=5"));
  EXPECT_THAT(spec.points[3].overrides,
              ElementsAre("workload.requests=100", "scheduler.selector=cht",
                          "scheduler.stop=bandit", "workload.sharing.groups=5"));
}

TEST(SweepSpecTest, ZippedKeysVaryTogether) {
  const SweepSpec spec = Expand(
      "vary:\n"
      "  scheduler.selector, scheduler.stop: [[fcfs, always], [cht, bandit]]\n"
      "  workload.arrival.rate: [5, 10]\n");
  EXPECT_THAT(Names(spec),
              ElementsAre("selector=fcfs,stop=always,rate=5", "selector=fcfs,stop=always,rate=10",
                          "selector=cht,stop=bandit,rate=5", "selector=cht,stop=bandit,rate=10"));
  EXPECT_THAT(spec.swept_keys,
              ElementsAre("scheduler.selector", "scheduler.stop", "workload.arrival.rate"));
  EXPECT_THROW((void)Expand("vary:\n  scheduler.selector, scheduler.stop: [[fcfs]]\n"), InputError);
}

TEST(SweepSpecTest, NoVaryNoPointsIsOneBasePoint) {
  const SweepSpec spec = Expand("");
  EXPECT_THAT(Names(spec), ElementsAre("base"));
  EXPECT_TRUE(spec.points[0].overrides.empty());
}

TEST(SweepSpecTest, KeysSharingTheirLastComponentAreNamedInFull) {
  const SweepSpec spec = Expand(
      "vary:\n"
      "  workload.arrival.rate: [5]\n"
      "  scheduler.rate: [1]\n");
  EXPECT_THAT(Names(spec), ElementsAre("workload.arrival.rate=5,scheduler.rate=1"));
}

TEST(SweepSpecTest, MapValuesBecomeFlowYamlAndSafeNames) {
  const SweepSpec spec = Expand(
      "vary:\n"
      "  workload.output_tokens: [{kind: uniform, min: 5, max: 30}, 7]\n");
  ASSERT_EQ(spec.points.size(), 2u);
  EXPECT_EQ(spec.points[0].name, "output_tokens=kind_uniform_min_5_max_30");
  EXPECT_EQ(spec.points[0].overrides[0], "workload.output_tokens={kind: uniform, min: 5, max: 30}");
  EXPECT_EQ(spec.points[1].name, "output_tokens=7");
}

TEST(SweepSpecTest, LongAndCollidingNamesGetAHashSuffix) {
  const std::string long_value(200, 'x');
  const SweepSpec spec = Expand("vary:\n  name: [" + long_value + ", 'a/b', 'a:b']\n");
  ASSERT_EQ(spec.points.size(), 3u);
  EXPECT_LE(spec.points[0].name.size(), kMaxPointNameChars);
  EXPECT_THAT(spec.points[0].name, HasSubstr("~"));
  // "a/b" and "a:b" both sanitize to a_b: each gets its own suffix.
  EXPECT_NE(spec.points[1].name, spec.points[2].name);
  EXPECT_THAT(spec.points[1].name, HasSubstr("name=a_b~"));
  for (const SweepPoint& p : spec.points) {
    EXPECT_EQ(p.name.find('/'), std::string::npos) << p.name;
  }
}

TEST(SweepSpecTest, SanitizeNameKeepsOnlySafeCharacters) {
  EXPECT_EQ(SanitizeName("stop=bandit,rate=100"), "stop=bandit,rate=100");
  EXPECT_EQ(SanitizeName("a b/c::d"), "a_b_c_d");
  EXPECT_EQ(SanitizeName(".hidden"), "_.hidden");
  EXPECT_EQ(SanitizeName(""), "_");
}

TEST(SweepSpecTest, ShardsTakeEveryNthPoint) {
  EXPECT_EQ(ParseShard("2/3"), (std::pair<uint32_t, uint32_t>{2, 3}));
  for (const char* bad : {"0/3", "4/3", "3", "a/b", "1/0", "1/3x", ""}) {
    EXPECT_THROW((void)ParseShard(bad), std::invalid_argument) << bad;
  }
  EXPECT_THAT(ShardPoints(7, 1, 3), ElementsAre(0u, 3u, 6u));
  EXPECT_THAT(ShardPoints(7, 2, 3), ElementsAre(1u, 4u));
  EXPECT_THAT(ShardPoints(7, 3, 3), ElementsAre(2u, 5u));
  EXPECT_THAT(ShardPoints(2, 3, 3), ElementsAre());
}

TEST(SweepSpecTest, StructuralProblemsAreAllReportedWithLines) {
  try {
    const std::string text = "base: " + kBase + "\n" +       // line 1
                             "vary:\n"                       // line 2
                             "  workload.arrival.rate: 5\n"  // line 3: not a list
                             "points: []\n"                  // line 4: empty
                             "colour: red\n";                // line 5: unknown
    (void)LoadSweepText(text, "sweep.yaml", ".", false);
    FAIL() << "expected an InputError";
  } catch (const InputError& error) {
    const std::string what = error.what();
    EXPECT_THAT(what, HasSubstr("sweep.yaml:3: vary.workload.arrival.rate: expected a non-empty "
                                "list"));
    EXPECT_THAT(what, HasSubstr("sweep.yaml:4: points:"));
    EXPECT_THAT(what, HasSubstr("sweep.yaml:5: colour: unknown key"));
  }
}

TEST(SweepSpecTest, RepeatedPointsAreAProblem) {
  EXPECT_THROW((void)Expand("points:\n  - {seed: 1}\n  - {seed: 1}\n"), InputError);
}

// ---- Table ------------------------------------------------------------------------------------

// Every shipped sweep file expands and every one of its points loads as a scenario.
TEST(SweepSpecTest, EveryShippedSweepIsValid) {
  const fs::path dir = fs::path(FEATHER_SOURCE_DIR) / "scenarios" / "sweeps";
  const bool have_traces =
      fs::exists(fs::path(FEATHER_SOURCE_DIR) / "../shared/traces/conversation_trace.jsonl");
  int checked = 0;
  for (const auto& entry : fs::recursive_directory_iterator(dir)) {
    if (entry.path().extension() != ".yaml") continue;
    if (!have_traces && entry.path().stem().string().find("trace") != std::string::npos) continue;
    SCOPED_TRACE(entry.path().string());
    SweepSpec spec;
    EXPECT_NO_THROW(spec = LoadSweepFile(entry.path().string()));
    EXPECT_FALSE(spec.points.empty());
    ++checked;
  }
  EXPECT_GE(checked, 10);
}

// The policy generalisation suite (scripts/policy-suite.sh; never run in CI): every file loads,
// every point names its scenario, runs the model engine with measured scheduler time, and every
// scenario goes through every shipped selector and stop policy.
TEST(SweepSpecTest, PolicySuiteLoadsAndCoversEveryScheduler) {
  const fs::path dir = fs::path(FEATHER_SOURCE_DIR) / "scenarios" / "suites" / "policies";
  const bool have_traces =
      fs::exists(fs::path(FEATHER_SOURCE_DIR) / "../shared/traces/conversation_trace.jsonl");
  int checked = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() != ".yaml" || entry.path().stem() == "base") continue;
    if (!have_traces && entry.path().stem().string().find("trace") != std::string::npos) continue;
    SCOPED_TRACE(entry.path().string());
    SweepSpec spec;
    ASSERT_NO_THROW(spec = LoadSweepFile(entry.path().string()));
    ASSERT_FALSE(spec.points.empty());
    std::map<std::string, std::set<std::string>> selectors, stops;
    for (const SweepPoint& point : spec.points) {
      const nlohmann::json& s = point.scenario;
      const std::string name = s.value("name", "");
      EXPECT_NE(name, "") << point.name;
      EXPECT_EQ(s.value("engine", ""), "model") << point.name;
      EXPECT_EQ(s.value("scheduler_time", ""), "measured") << point.name;
      selectors[name].insert(s["scheduler"].value("selector", ""));
      stops[name].insert(s["scheduler"].value("stop", ""));
    }
    for (const auto& [name, seen] : selectors) {
      for (std::string_view sel : SelectorNames()) {
        EXPECT_TRUE(seen.contains(std::string(sel))) << name << " lacks selector " << sel;
      }
      for (std::string_view stop : StopPolicyNames()) {
        EXPECT_TRUE(stops[name].contains(std::string(stop))) << name << " lacks stop " << stop;
      }
    }
    ++checked;
  }
  EXPECT_GE(checked, have_traces ? 2 : 1);
}

TEST(SweepTableTest, ColumnsAndCsvQuoting) {
  std::vector<SweepTableRow> rows(2);
  rows[0] = {"rate=5",
             {{"workload.arrival.rate", "5"}},
             nlohmann::ordered_json::parse(
                 R"({"requests": 10, "throughput_tok_s": 1.5, "step_time_s_by_term": {"gemm": 2},
                     "selector": "cht", "stop": "bandit",
                     "scenario": {"model": "llama-3-8b", "profile": "a/b/rtx.yaml",
                                  "scheduler": {"reward_time": "decode-only"}}})")};
  rows[1] = {"rate=x,y",
             {{"workload.arrival.rate", "x,y"}},
             nlohmann::ordered_json::parse(R"({"requests": 12, "selector": "fcfs",
                                               "stop": "always"})")};
  const SweepTable table = BuildSweepTable({"workload.arrival.rate"}, rows);
  EXPECT_EQ(SweepTableCsv(table),
            "point,workload.arrival.rate,scheduler,selector,stop,model,profile,requests,"
            "throughput_tok_s,step_time_s_by_term.gemm\n"
            "rate=5,5,cht+bandit+decode-only,cht,bandit,llama-3-8b,rtx,10,1.5,2\n"
            "\"rate=x,y\",\"x,y\",fcfs+always,fcfs,always,,,12,,\n");
}

TEST(SweepTableTest, ASweptKeyNamedLikeADerivedColumnIsOneColumn) {
  std::vector<SweepTableRow> rows(1);
  rows[0] = {"model=qwen",
             {{"model", "qwen"}},
             nlohmann::ordered_json::parse(R"({"requests": 1, "selector": "cht", "stop": "bandit",
                                               "scenario": {"model": "/m/qwen.yaml"}})")};
  EXPECT_EQ(SweepTableCsv(BuildSweepTable({"model"}, rows)),
            "point,model,scheduler,selector,stop,profile,requests\n"
            "model=qwen,qwen,cht+bandit,cht,bandit,,1\n");
}

// ---- End to end through the binary ------------------------------------------------------------

class SweepCommandTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) /
           ("feather_sweep_" +
            std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A sweep of `rates.size() × 2` points on the small base scenario.
  fs::path WriteSweep(const std::string& rates = "[20, 80]", const std::string& extra = "") {
    const fs::path file = dir_ / "tiny.yaml";
    WriteFile(file, "base: " + kBase + "\n" + extra +
                        "vary:\n"
                        "  scheduler.stop: [always, bandit]\n"
                        "  workload.arrival.rate: " +
                        rates + "\n");
    return file;
  }

  fs::path dir_;
};

TEST_F(SweepCommandTest, RunsEveryPointAndWritesTheTable) {
  const fs::path sweep = WriteSweep();
  const fs::path out = dir_ / "out";
  const RunResult run = RunFeather({"sweep", sweep.string(), "--out", out.string(), "--jobs", "2"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("4 points"));
  for (const char* p : {"stop=always,rate=20", "stop=always,rate=80", "stop=bandit,rate=20",
                        "stop=bandit,rate=80"}) {
    EXPECT_TRUE(fs::exists(out / "points" / p / "summary.json")) << p;
    EXPECT_TRUE(fs::exists(out / "points" / p / "results.h5")) << p;
  }
  EXPECT_FALSE(fs::exists(out / "logs"));
  const std::string csv = ReadFile(out / "table.csv");
  std::istringstream lines(csv);
  std::string header, first;
  std::getline(lines, header);
  std::getline(lines, first);
  EXPECT_THAT(header, HasSubstr("point,scheduler.stop,workload.arrival.rate,scheduler,"));
  EXPECT_THAT(header, HasSubstr("throughput_tok_s"));
  EXPECT_THAT(header, HasSubstr("mean_batch_size"));
  EXPECT_THAT(first, HasSubstr("stop=always,rate=20\",always,20,cht+always,"));
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 5);
  EXPECT_TRUE(fs::exists(out / "table.h5"));
  const auto meta = nlohmann::json::parse(ReadFile(out / "sweep.json"));
  EXPECT_EQ(meta["points"].size(), 4u);
  EXPECT_THAT(meta["provenance"]["command"].get<std::string>(), HasSubstr("sweep"));

  // A rerun runs nothing and rewrites the same table.
  const RunResult again =
      RunFeather({"sweep", sweep.string(), "--out", out.string(), "--jobs", "2"});
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_THAT(again.err, HasSubstr("4 of 4 points already finished"));
  EXPECT_THAT(again.out, HasSubstr("0 run, 4 already finished"));
  EXPECT_EQ(ReadFile(out / "table.csv"), csv);

  // --list names the points without running anything.
  const RunResult list = RunFeather({"sweep", sweep.string(), "--list", "--shard", "2/2"});
  ASSERT_EQ(list.exit_code, 0) << list.err;
  EXPECT_THAT(list.out, HasSubstr("stop=always,rate=80  --set scheduler.stop=always"));
  EXPECT_THAT(list.out, Not(HasSubstr("stop=always,rate=20")));

  // feather plot's own errors, which need no Python: a folder without a table, no interpreter.
  const RunResult no_table = RunFeather({"plot", dir_.string()});
  EXPECT_EQ(no_table.exit_code, 2);
  EXPECT_THAT(no_table.err, HasSubstr("has no table.csv"));
  const RunResult no_python =
      RunFeather({"plot", out.string(), "--python", (dir_ / "no-such-python").string()});
  EXPECT_EQ(no_python.exit_code, 2);
  EXPECT_THAT(no_python.err, HasSubstr("needs Python 3 with matplotlib"));
}

// `feather sweep --set` overrides every point after the file (scheduler_time=zero for tables
// that must compare byte for byte); its own problems are reported against --set.
TEST_F(SweepCommandTest, CommandLineSetsApplyToEveryPointLast) {
  const fs::path sweep = WriteSweep("[20]", "set: {seed: 9}\n");
  const fs::path out = dir_ / "out";
  const RunResult run = RunFeather({"sweep", sweep.string(), "--out", out.string(), "--set",
                                    "seed=4", "--set", "scheduler_time=zero"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  int points = 0;
  for (const auto& entry : fs::directory_iterator(out / "points")) {
    const nlohmann::json summary =
        nlohmann::json::parse(ReadFile(entry.path() / "summary.json"));
    EXPECT_EQ(summary["scenario"]["seed"], 4);
    EXPECT_EQ(summary["scenario"]["scheduler_time"], "zero");
    EXPECT_EQ(summary["scheduler_cpu_s"], 0.0);
    ++points;
  }
  EXPECT_EQ(points, 2);
  const RunResult bad = RunFeather({"sweep", sweep.string(), "--list", "--set", "seed=-3"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_THAT(bad.err, HasSubstr("--set: seed: "));
}

// A point folder holding a summary.json of 100,000 nested brackets (not feather's) is neither a
// crash (the recursive dump of its scenario overflowed the stack) nor replaced: that point fails.
TEST_F(SweepCommandTest, ADeeplyNestedSummaryIsNotACrash) {
  const fs::path out = dir_ / "out";
  const fs::path sweep = WriteSweep("[20]");
  ASSERT_EQ(RunFeather({"sweep", sweep.string(), "--out", out.string()}).exit_code, 0);
  fs::path point;
  for (const auto& entry : fs::directory_iterator(out / "points")) point = entry.path();
  const std::string bomb =
      "{\"scenario\": " + std::string(100000, '[') + std::string(100000, ']') + "}";
  WriteFile(point / "summary.json", bomb);
  const RunResult run = RunFeather({"sweep", sweep.string(), "--out", out.string()});
  EXPECT_EQ(run.exit_code, 1) << run.err;
  EXPECT_THAT(run.err, HasSubstr("does not hold a feather run"));
  EXPECT_EQ(ReadFile(point / "summary.json"), bomb);
}

TEST_F(SweepCommandTest, AStaleFinishedPointRunsAgain) {
  const fs::path out = dir_ / "out";
  ASSERT_EQ(RunFeather({"sweep", WriteSweep("[20]").string(), "--out", out.string()}).exit_code, 0);
  // Same point names, another scenario: the finished points no longer count.
  const fs::path changed = WriteSweep("[20]", "set: {seed: 9}\n");
  const RunResult run = RunFeather({"sweep", changed.string(), "--out", out.string()});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("2 run, 0 already finished"));
}

TEST_F(SweepCommandTest, BadValuesAreReportedAtTheSweepFileLineAndNothingIsWritten) {
  const fs::path sweep = dir_ / "bad.yaml";
  WriteFile(sweep, "base: " + kBase + "\n" +               // 1
                       "set:\n"                            // 2
                       "  scheduler.selector: nonesuch\n"  // 3
                       "vary:\n"                           // 4
                       "  workload.arrival.rate:\n"        // 5
                       "    - 10\n"                        // 6
                       "    - -5\n"                        // 7
                       "  workload.no_such_key: [1]\n");   // 8
  const fs::path out = dir_ / "out";
  const RunResult run = RunFeather({"sweep", sweep.string(), "--out", out.string()});
  EXPECT_EQ(run.exit_code, 2);
  const std::string file = sweep.string();
  // Each problem under the key path of the sweep file: its section, then the scenario key.
  EXPECT_THAT(run.err, HasSubstr(file + ":3: set.scheduler.selector:"));
  EXPECT_THAT(run.err, HasSubstr(file + ":7: vary.workload.arrival.rate:"));
  EXPECT_THAT(run.err, HasSubstr(file + ":8: vary.workload.no_such_key: unknown key"));
  EXPECT_THAT(run.err, Not(HasSubstr("--set")));
  EXPECT_FALSE(fs::exists(out));

  // A missing base file is named at the `base` line.
  WriteFile(sweep, "name: x\nbase: missing.yaml\n");
  const RunResult missing = RunFeather({"sweep", sweep.string(), "--out", out.string()});
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_THAT(missing.err, HasSubstr(file + ":2: base: no such scenario file"));
  EXPECT_FALSE(fs::exists(out));

  // Bad options.
  const RunResult shard = RunFeather({"sweep", WriteSweep().string(), "--shard", "4/3"});
  EXPECT_EQ(shard.exit_code, 2);
  EXPECT_THAT(shard.err, HasSubstr("--shard"));
}

TEST_F(SweepCommandTest, ShardsMergedEqualTheSingleMachineTable) {
  const fs::path sweep = WriteSweep("[20, 50, 80]");  // 6 points: 2 per shard
  const fs::path single = dir_ / "single";
  ASSERT_EQ(RunFeather({"sweep", sweep.string(), "--out", single.string()}).exit_code, 0);

  // Each shard in its own folder (separate machines), merged afterwards.
  std::vector<std::string> merge = {"sweep", "--merge"};
  for (const char* shard : {"1/3", "2/3", "3/3"}) {
    const fs::path out = dir_ / ("shard" + std::string(1, shard[0]));
    const RunResult run =
        RunFeather({"sweep", sweep.string(), "--shard", shard, "--out", out.string()});
    ASSERT_EQ(run.exit_code, 0) << run.err;
    EXPECT_THAT(run.out, HasSubstr("not finished yet"));
    EXPECT_FALSE(fs::exists(out / "table.csv"));
    merge.push_back(out.string());
  }
  // Merging only the first folder reports what is missing.
  const RunResult partial = RunFeather({"sweep", "--merge", (dir_ / "shard1").string()});
  EXPECT_EQ(partial.exit_code, 1);
  EXPECT_THAT(partial.err, HasSubstr("4 of 6 points have no summary.json"));
  const RunResult merged = RunFeather(merge);
  ASSERT_EQ(merged.exit_code, 0) << merged.err;
  EXPECT_EQ(ReadFile(dir_ / "shard1" / "table.csv"), ReadFile(single / "table.csv"));
  EXPECT_EQ(ReadFile(dir_ / "shard1" / "table.h5"), ReadFile(single / "table.h5"));

  // Shards sharing one folder (a cluster file system): the last one writes the table.
  const fs::path shared = dir_ / "shared";
  for (const char* shard : {"2/3", "3/3", "1/3"}) {
    ASSERT_EQ(
        RunFeather({"sweep", sweep.string(), "--shard", shard, "--out", shared.string()}).exit_code,
        0);
  }
  EXPECT_EQ(ReadFile(shared / "table.csv"), ReadFile(single / "table.csv"));
  EXPECT_EQ(ReadFile(shared / "table.h5"), ReadFile(single / "table.h5"));
}

// Starts feather asynchronously with stdout and stderr into `log`.
pid_t StartFeather(const std::vector<std::string>& args, const fs::path& log) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  std::vector<std::string> storage = {FEATHER_BINARY};
  storage.insert(storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : storage) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  const int error = posix_spawn(&pid, FEATHER_BINARY, &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  return error == 0 ? pid : -1;
}

// Installed point directories with a summary.json (not `feather run`'s DIR.partial-<pid>).
size_t FinishedPoints(const fs::path& points) {
  size_t n = 0;
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(points, error)) {
    const std::string name = entry.path().filename().string();
    if (name.find(".partial-") != std::string::npos || name.find(".old-") != std::string::npos) {
      continue;
    }
    if (fs::exists(entry.path() / "summary.json")) ++n;
  }
  return n;
}

// Every entry of points/ is a complete point directory (no half-written ones, no temp dirs).
void ExpectOnlyCompletePoints(const fs::path& points) {
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(points, error)) {
    EXPECT_TRUE(fs::exists(entry.path() / "summary.json")) << entry.path();
    EXPECT_TRUE(fs::exists(entry.path() / "results.h5")) << entry.path();
  }
}

class SweepInterruptTest : public SweepCommandTest, public ::testing::WithParamInterface<int> {};

TEST_P(SweepInterruptTest, KilledMidwayAndRerunGivesTheUninterruptedTable) {
  const int signal = GetParam();
  // Larger points, one at a time, so that the sweep is still busy after the first one.
  const fs::path sweep = WriteSweep("[20, 40, 60, 80]",
                                    "set: {workload.requests: 1500, workload.output_tokens: 60}\n");
  const fs::path full = dir_ / "full";
  ASSERT_EQ(RunFeather({"sweep", sweep.string(), "--out", full.string(), "--jobs", "1"}).exit_code,
            0);

  const fs::path out = dir_ / "killed";
  const pid_t pid = StartFeather({"sweep", sweep.string(), "--out", out.string(), "--jobs", "1"},
                                 dir_ / "killed.log");
  ASSERT_GT(pid, 0);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (FinishedPoints(out / "points") < 1 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_EQ(kill(pid, signal), 0);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  if (signal == SIGKILL) {
    ASSERT_TRUE(WIFSIGNALED(status));
  } else {
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 128 + signal) << ReadFile(dir_ / "killed.log");
    EXPECT_THAT(ReadFile(dir_ / "killed.log"), HasSubstr("rerun the same command to resume"));
  }
  const size_t finished = FinishedPoints(out / "points");
  EXPECT_GE(finished, 1u);
  EXPECT_LT(finished, 8u) << "the sweep finished before it was killed: make the points larger";
  EXPECT_FALSE(fs::exists(out / "table.csv"));
  if (signal != SIGKILL) ExpectOnlyCompletePoints(out / "points");

  // The point that was running got SIGTERM when the sweep died (SIGKILL) or forwarded
  // (SIGTERM), and leaves no directory; the rerun resumes and ends with the same table.
  const RunResult rerun =
      RunFeather({"sweep", sweep.string(), "--out", out.string(), "--jobs", "1"});
  ASSERT_EQ(rerun.exit_code, 0) << rerun.err;
  EXPECT_THAT(rerun.err, HasSubstr("points already finished"));
  ExpectOnlyCompletePoints(out / "points");
  EXPECT_EQ(ReadFile(out / "table.csv"), ReadFile(full / "table.csv"));
  EXPECT_EQ(ReadFile(out / "table.h5"), ReadFile(full / "table.h5"));
}

INSTANTIATE_TEST_SUITE_P(Signals, SweepInterruptTest, ::testing::Values(SIGKILL, SIGTERM),
                         [](const ::testing::TestParamInfo<int>& param_info) {
                           return param_info.param == SIGKILL ? std::string("SIGKILL")
                                                              : std::string("SIGTERM");
                         });

TEST_F(SweepCommandTest, AFailingPointIsReportedAndTheOthersStillRun) {
  // A malformed trace passes validation (the file exists) and fails when its point runs.
  const fs::path sweep = dir_ / "fail.yaml";
  WriteFile(sweep, "base: " + kBase +
                       "\n"
                       "points:\n"
                       "  - {seed: 1}\n"
                       "  - {workload.trace: {path: " +
                       (dir_ / "broken.jsonl").string() + "}}\n");
  WriteFile(dir_ / "broken.jsonl", "{\"timestamp\": 0}\n");
  const fs::path out = dir_ / "out";
  const RunResult run = RunFeather({"sweep", sweep.string(), "--out", out.string()});
  EXPECT_EQ(run.exit_code, 1) << run.err;
  EXPECT_THAT(run.err, HasSubstr("failed (exit code 2)"));
  EXPECT_THAT(run.err, HasSubstr("no table written"));
  EXPECT_TRUE(fs::exists(out / "points" / "seed=1" / "summary.json"));
  EXPECT_FALSE(fs::exists(out / "table.csv"));
}

}  // namespace
}  // namespace feather
