// run_output_checkpoint_test.cc: WriteRunOutputs' checkpoint, the hook a signal handler's poll
// uses. An exception from it (after summary.json, or after results.h5, the last moment before
// the install) removes DIR.partial-<pid>, leaves an earlier DIR byte for byte as it was, and
// propagates unchanged; a checkpoint that returns lets the write complete.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>

#include "sim/io/run_output.h"

namespace feather {
namespace {

namespace fs = std::filesystem;

struct Stop : std::runtime_error {
  Stop() : std::runtime_error("stop") {}
};

std::string ReadBytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

RunRecords SomeRecords() {
  RunRecords records;
  records.requests.resize(3);
  records.requests[1].arrival_ns = 7;
  records.steps.resize(2);
  records.steps[1].batch_size = 2;
  return records;
}

RunOutputMeta SomeMeta() {
  RunOutputMeta meta;
  meta.scenario = {{"name", "t"}};
  meta.provenance = {{"host", "h"}};
  meta.engine = "model";
  meta.selector = "cht";
  meta.stop_policy = "bandit";
  return meta;
}

class RunOutputCheckpointTest : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) / ("feather_checkpoint_" + std::to_string(GetParam()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_P(RunOutputCheckpointTest, ThrowingCheckpointLeavesTheEarlierRunAndNoTempDirectory) {
  const fs::path out = dir_ / "run";
  RunSummary earlier;
  earlier.requests = 1;
  WriteRunOutputs(out.string(), SomeRecords(), earlier, SomeMeta());
  const std::string summary = ReadBytes(out / "summary.json");
  const std::string results = ReadBytes(out / "results.h5");

  RunSummary later;
  later.requests = 2;
  int calls = 0;
  const int throw_at = GetParam();
  EXPECT_THROW(WriteRunOutputs(out.string(), SomeRecords(), later, SomeMeta(),
                               [&] {
                                 EXPECT_TRUE(fs::exists(PartialOutputDir(out.string())));
                                 if (++calls == throw_at) throw Stop();
                               }),
               Stop);
  EXPECT_EQ(calls, throw_at);
  EXPECT_FALSE(fs::exists(PartialOutputDir(out.string())));
  EXPECT_EQ(ReadBytes(out / "summary.json"), summary);
  EXPECT_EQ(ReadBytes(out / "results.h5"), results);
  size_t entries = 0;
  for ([[maybe_unused]] const auto& entry : fs::directory_iterator(dir_)) ++entries;
  EXPECT_EQ(entries, 1u);  // only "run"
}

INSTANTIATE_TEST_SUITE_P(AfterEachFile, RunOutputCheckpointTest, ::testing::Values(1, 2));

TEST(RunOutputCheckpoint, ReturningCheckpointLetsTheWriteComplete) {
  const fs::path dir = fs::path(::testing::TempDir()) / "feather_checkpoint_ok";
  fs::remove_all(dir);
  int calls = 0;
  RunSummary summary;
  summary.requests = 3;
  WriteRunOutputs((dir / "run").string(), SomeRecords(), summary, SomeMeta(), [&] { ++calls; });
  EXPECT_EQ(calls, 2);
  EXPECT_TRUE(fs::exists(dir / "run" / "summary.json"));
  EXPECT_EQ(ReadResultsH5((dir / "run" / "results.h5").string()).requests.size(), 3u);
  EXPECT_EQ(PartialOutputDir((dir / "run").string()),
            (dir / ("run.partial-" + std::to_string(::getpid()))).string());
  EXPECT_EQ(PartialOutputDir((dir / "run/").string()), PartialOutputDir((dir / "run").string()));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace feather
