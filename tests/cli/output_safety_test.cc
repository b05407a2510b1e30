// output_safety_test.cc: where `feather run` and `feather sweep` may write, through the binary.
// A scenario name cannot climb out of out/ (the data-loss bug of issue 13: `name: ../../victim`
// removed the folder victim/); an existing output folder is replaced only when it holds an
// earlier feather run or nothing; a bad --out is found before the simulation; temps of a killed
// run are removed by the next run, folders of the user's that merely look like them are not.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

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
using ::testing::HasSubstr;
using test::ReadFile;
using test::RunFeather;
using test::RunResult;
using test::WriteFile;

const std::vector<std::string> kSmall = {"--set", "workload.requests=5", "--set",
                                         "workload.sharing.prefix_tokens=100"};



std::vector<std::string> Args(std::vector<std::string> head) {
  head.insert(head.end(), kSmall.begin(), kSmall.end());
  return head;
}

// The pid of a process that has exited and been reaped (so no process has it, for a while).
pid_t DeadPid() {
  const pid_t pid = fork();
  if (pid == 0) _exit(0);
  int status = 0;
  waitpid(pid, &status, 0);
  return pid;
}

class OutputSafetyTest : public test::TempDirTest {
 protected:
  OutputSafetyTest() : TempDirTest("output_safety") {}
};

// The reproduction of the issue: from work/, `feather run ../e.yaml` with `name: ../../victim`
// resolved out/../../victim to the folder next to work/ and replaced it.
TEST_F(OutputSafetyTest, ANameThatClimbsOutOfOutIsAnInputErrorAndTheVictimSurvives) {
  fs::create_directories(dir_ / "work");
  fs::create_directories(dir_ / "victim");
  WriteFile(dir_ / "victim" / "thesis.tex", "years of work");
  WriteFile(dir_ / "e.yaml", "name: ../../victim\nworkload: {requests: 5}\n");

  const RunResult run = RunFeather({"run", "../e.yaml"}, (dir_ / "work").string());
  EXPECT_EQ(run.exit_code, 2) << run.err;
  EXPECT_THAT(run.err, HasSubstr("../e.yaml:1: name: "));
  EXPECT_THAT(run.err, HasSubstr("one plain path component"));
  EXPECT_EQ(ReadFile(dir_ / "victim" / "thesis.tex"), "years of work");
  EXPECT_FALSE(fs::exists(dir_ / "work" / "out"));

  const RunResult set = RunFeather({"run", "--set", "name=../../victim"}, (dir_ / "work").string());
  EXPECT_EQ(set.exit_code, 2) << set.err;
  EXPECT_THAT(set.err, HasSubstr("--set: name: "));
  EXPECT_EQ(ReadFile(dir_ / "victim" / "thesis.tex"), "years of work");
}

TEST_F(OutputSafetyTest, EveryNameThatIsNotOnePlainComponentIsRefused) {
  for (const std::string name : {"a/b", "..", ".", ".hidden", "a\\b", "/abs"}) {
    SCOPED_TRACE(name);
    const RunResult run = RunFeather(Args({"run", "--set", "name=" + name}), dir_.string());
    EXPECT_EQ(run.exit_code, 2) << run.err;
    EXPECT_THAT(run.err, HasSubstr("--set: name: "));
  }
  EXPECT_TRUE(fs::is_empty(dir_));
  // A plain name with dots, '=' and ',' (as sweep points are named) is fine.
  const RunResult ok = RunFeather(Args({"run", "--set", "name=rate=5,stop=bandit.v2"}), dir_.string());
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_TRUE(fs::exists(dir_ / "out" / "rate=5,stop=bandit.v2" / "summary.json"));
}

TEST_F(OutputSafetyTest, AFolderOfTheUsersIsNeverReplaced) {
  const fs::path mine = dir_ / "results";
  fs::create_directories(mine);
  WriteFile(mine / "notes.md", "keep me");
  const RunResult run = RunFeather(Args({"run", "--out", mine.string()}));
  EXPECT_EQ(run.exit_code, 2) << run.err;
  EXPECT_THAT(run.err, HasSubstr("'" + mine.string() + "' exists and does not hold a feather run"));
  EXPECT_EQ(ReadFile(mine / "notes.md"), "keep me");
  // Nothing was simulated: the refusal comes first, one line, no partial folder.
  EXPECT_EQ(std::count(run.err.begin(), run.err.end(), '\n'), 1) << run.err;
  EXPECT_TRUE(run.out.empty()) << run.out;
  for (const auto& entry : fs::directory_iterator(dir_)) {
    EXPECT_EQ(entry.path().filename(), "results") << entry.path();
  }

  // A summary.json of someone else's (no feather provenance) does not make it a run.
  WriteFile(mine / "summary.json", "{\"accuracy\": 0.9}\n");
  EXPECT_EQ(RunFeather(Args({"run", "--out", mine.string()})).exit_code, 2);
  EXPECT_EQ(ReadFile(mine / "notes.md"), "keep me");
}

TEST_F(OutputSafetyTest, AnEarlierRunOrAnEmptyFolderIsReplaced) {
  const fs::path out = dir_ / "run";
  fs::create_directories(out);  // empty: nothing to lose
  ASSERT_EQ(RunFeather(Args({"run", "--out", out.string()})).exit_code, 0);
  ASSERT_TRUE(fs::exists(out / "summary.json"));
  const RunResult again = RunFeather(Args({"run", "--out", out.string(), "--set", "seed=2"}));
  EXPECT_EQ(again.exit_code, 0) << again.err;
  EXPECT_THAT(ReadFile(out / "summary.json"), HasSubstr("\"seed\": 2"));
}

TEST_F(OutputSafetyTest, ABadOutIsFoundBeforeTheSimulation) {
  // The trace has a bad line 2, found only when the workload is built (after the scenario
  // loads): a bad --out must be reported instead, so it was checked first.
  WriteFile(dir_ / "t.jsonl",
            "{\"timestamp\": 0, \"input_length\": 8, \"output_length\": 2, \"hash_ids\": [1]}\n"
            "{\"timestamp\": 1, \"input_length\": 8, \"output_length\": 0, \"hash_ids\": [1]}\n");
  WriteFile(dir_ / "s.yaml", "workload:\n  trace: {path: t.jsonl}\n");
  WriteFile(dir_ / "a-file", "x");
  const std::string scenario = (dir_ / "s.yaml").string();
  const RunResult into_file = RunFeather({"run", scenario, "--out", (dir_ / "a-file").string()});
  EXPECT_EQ(into_file.exit_code, 2);
  EXPECT_THAT(into_file.err, HasSubstr("exists and is not a directory"));
  EXPECT_EQ(ReadFile(dir_ / "a-file"), "x");

  const RunResult under_file =
      RunFeather({"run", scenario, "--out", (dir_ / "a-file" / "run").string()});
  EXPECT_EQ(under_file.exit_code, 2);
  EXPECT_THAT(under_file.err, HasSubstr("is not a directory"));

  // No directory can be made in /proc, not even by root.
  const RunResult unwritable = RunFeather({"run", scenario, "--out", "/proc/feather-test-run"});
  EXPECT_EQ(unwritable.exit_code, 2);
  EXPECT_THAT(unwritable.err, HasSubstr("cannot create a directory in '/proc'"));

  // With a good --out the trace's problem shows (the check above did not hide it).
  const RunResult good = RunFeather({"run", scenario, "--out", (dir_ / "run").string()});
  EXPECT_EQ(good.exit_code, 2);
  EXPECT_THAT(good.err, HasSubstr("t.jsonl:2: output_length"));
}

TEST_F(OutputSafetyTest, TempsOfAKilledRunAreRemovedButLookAlikesOfTheUserAreNot) {
  const fs::path out = dir_ / "run";
  const std::string dead = std::to_string(DeadPid());
  const fs::path stale_partial = dir_ / ("run.partial-" + dead);
  const fs::path stale_old = dir_ / ("run.old-" + dead);
  pid_t other = DeadPid();
  while (std::to_string(other) == dead) other = DeadPid();
  const fs::path users = dir_ / ("run.partial-" + std::to_string(other));
  const fs::path alive = dir_ / ("run.partial-" + std::to_string(getppid()));
  for (const fs::path& p : {stale_partial, stale_old, users, alive}) fs::create_directories(p);
  WriteFile(stale_partial / "summary.json", "{");  // cut short by SIGKILL
  WriteFile(stale_partial / "results.h5", "");
  WriteFile(stale_old / "summary.json", "{}");
  WriteFile(users / "draft.txt", "mine");          // not what feather writes there
  WriteFile(alive / "summary.json", "{");          // its owner is still running

  const RunResult run = RunFeather(Args({"run", "--out", out.string()}));
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_FALSE(fs::exists(stale_partial));
  EXPECT_FALSE(fs::exists(stale_old));
  EXPECT_EQ(ReadFile(users / "draft.txt"), "mine");
  EXPECT_TRUE(fs::exists(alive / "summary.json"));
  EXPECT_TRUE(fs::exists(out / "summary.json"));
}

// ---- sweep ------------------------------------------------------------------------------------

class SweepOutputSafetyTest : public OutputSafetyTest {
 protected:
  void SetUp() override {
    OutputSafetyTest::SetUp();
    WriteFile(dir_ / "base.yaml", "workload: {requests: 5, sharing: {prefix_tokens: 100}}\n");
    WriteFile(dir_ / "sweep.yaml", "base: base.yaml\nvary:\n  seed: [1, 2]\n");
  }
};

TEST_F(SweepOutputSafetyTest, OutIntoAFileIsOneClearLine) {
  WriteFile(dir_ / "a-file", "x");
  const RunResult run =
      RunFeather({"sweep", (dir_ / "sweep.yaml").string(), "--out", (dir_ / "a-file").string()});
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_EQ(run.err, "feather: error: sweep output folder '" + (dir_ / "a-file").string() +
                         "' exists and is not a directory; choose another --out\n");
  EXPECT_EQ(ReadFile(dir_ / "a-file"), "x");
}

TEST_F(SweepOutputSafetyTest, AFolderOfTheUsersIsRefusedAndAnEarlierSweepIsResumed) {
  fs::create_directories(dir_ / "mine");
  WriteFile(dir_ / "mine" / "table.csv", "my own table");
  const RunResult refused =
      RunFeather({"sweep", (dir_ / "sweep.yaml").string(), "--out", (dir_ / "mine").string()});
  EXPECT_EQ(refused.exit_code, 2);
  EXPECT_THAT(refused.err, HasSubstr("holds files that are not a feather sweep's"));
  EXPECT_EQ(ReadFile(dir_ / "mine" / "table.csv"), "my own table");
  EXPECT_FALSE(fs::exists(dir_ / "mine" / "sweep.json"));

  const std::string out = (dir_ / "sweep-out").string();
  ASSERT_EQ(RunFeather({"sweep", (dir_ / "sweep.yaml").string(), "--out", out}).exit_code, 0);
  const RunResult again = RunFeather({"sweep", (dir_ / "sweep.yaml").string(), "--out", out});
  EXPECT_EQ(again.exit_code, 0) << again.err;
  EXPECT_THAT(again.err, HasSubstr("2 of 2 points already finished"));
}

// The sweep cleans its points' temps by the same rule as `run` (sim/io/run_output.h
// RemoveStaleOutputTemps): a killed point's partial folder goes, a look-alike of the user's stays.
TEST_F(SweepOutputSafetyTest, TempsOfAKilledPointAreRemovedButLookAlikesOfTheUserAreNot) {
  const fs::path points = dir_ / "sweep-out" / "points";
  fs::create_directories(points);
  WriteFile(dir_ / "sweep-out" / "sweep.json", "{\"format_version\": 1, \"points\": []}\n");
  const std::string dead = std::to_string(DeadPid());
  const fs::path stale = points / ("seed=1.partial-" + dead);
  const fs::path users = points / ("seed=2.old-" + dead);
  fs::create_directories(stale);
  fs::create_directories(users);
  WriteFile(stale / "results.h5", "");
  WriteFile(users / "draft.txt", "mine");
  const RunResult run = RunFeather(
      {"sweep", (dir_ / "sweep.yaml").string(), "--out", (dir_ / "sweep-out").string()});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_FALSE(fs::exists(stale));
  EXPECT_EQ(ReadFile(users / "draft.txt"), "mine");
  EXPECT_TRUE(fs::exists(points / "seed=1" / "summary.json"));
}

TEST_F(SweepOutputSafetyTest, AnUnknownKeyInVaryIsReportedAtItsLineInTheSweepFile) {
  WriteFile(dir_ / "bad.yaml",
            "base: base.yaml\n"           // line 1
            "vary:\n"                     // line 2
            "  workload.arival.rate: [5, 10]\n");  // line 3: 'arival' (the map is new)
  const RunResult run = RunFeather({"sweep", (dir_ / "bad.yaml").string(), "--list"});
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_THAT(run.err, HasSubstr((dir_ / "bad.yaml").string() +
                                 ":3: vary.workload.arival.rate: 'workload.arival': unknown key"));
  EXPECT_EQ(std::count(run.err.begin(), run.err.end(), '\n'), 1) << run.err;
}

}  // namespace
}  // namespace feather
