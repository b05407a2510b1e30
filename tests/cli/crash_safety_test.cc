// crash_safety_test.cc: SIGINT and SIGTERM during `feather run`. A run into a directory that
// holds an earlier, finished run is interrupted half a second in: it must exit with 130 (SIGINT)
// or 143 (SIGTERM) and one line on stderr, leave the earlier run's files byte for byte, leave no
// DIR.partial-* or DIR.old-* behind, and a rerun into the same directory must succeed.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/cli/cli_test_support.h"

namespace feather {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

std::string ReadBytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// A run that takes several seconds in Release (minutes under ASan) but little memory: 20,000
// requests of 2,000 output tokens with short prompts.
const std::vector<std::string> kLong = {"--set", "workload.requests=20000",
                                        "--set", "workload.output_tokens=2000",
                                        "--set", "workload.sharing.prefix_tokens=100",
                                        "--set", "scheduler_time=zero"};
const std::vector<std::string> kShort = {"--set", "workload.requests=200",
                                         "--set", "workload.sharing.prefix_tokens=100",
                                         "--set", "scheduler_time=zero"};

struct Exit {
  int code = -1;   // exit status, or -1
  int signal = 0;  // the signal that killed it, or 0
};

// Starts `feather args...` with stdout and stderr going to files; returns its pid.
pid_t Spawn(const std::vector<std::string>& args, const fs::path& out, const fs::path& err) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, out.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, err.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  std::vector<std::string> storage = {FEATHER_BINARY};
  storage.insert(storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& arg : storage) argv.push_back(arg.data());
  argv.push_back(nullptr);
  // The child must start with default signal dispositions and nothing blocked.
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none;
  sigemptyset(&none);
  sigset_t defaults;
  sigemptyset(&defaults);
  sigaddset(&defaults, SIGINT);
  sigaddset(&defaults, SIGTERM);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  pid_t pid = -1;
  const int error = posix_spawn(&pid, FEATHER_BINARY, &actions, &attr, argv.data(), environ);
  posix_spawnattr_destroy(&attr);
  posix_spawn_file_actions_destroy(&actions);
  EXPECT_EQ(error, 0) << "posix_spawn failed";
  return error == 0 ? pid : -1;
}

// Waits until `pid` catches SIGINT and SIGTERM (its handlers are installed: /proc/PID/status's
// SigCgt mask), so that a loaded machine's slow start cannot turn the test into a plain kill.
bool WaitForHandlers(pid_t pid, std::chrono::seconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  const unsigned long long wanted = (1ULL << (SIGINT - 1)) | (1ULL << (SIGTERM - 1));
  while (std::chrono::steady_clock::now() < deadline) {
    std::ifstream status("/proc/" + std::to_string(pid) + "/status");
    std::string line;
    while (std::getline(status, line)) {
      if (line.rfind("SigCgt:", 0) == 0) {
        const unsigned long long caught = std::stoull(line.substr(7), nullptr, 16);
        if ((caught & wanted) == wanted) return true;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

// Waits up to `timeout` for `pid`; kills it (SIGKILL) and fails if it is still running then.
Exit WaitFor(pid_t pid, std::chrono::seconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  int status = 0;
  while (true) {
    const pid_t done = waitpid(pid, &status, WNOHANG);
    if (done == pid) break;
    if (std::chrono::steady_clock::now() > deadline) {
      ADD_FAILURE() << "feather did not exit within " << timeout.count() << " s of the signal";
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return {};
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  Exit exit;
  if (WIFEXITED(status)) exit.code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) exit.signal = WTERMSIG(status);
  return exit;
}

class CrashSafetyTest : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) / ("feather_crash_safety_" + std::to_string(GetParam()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::vector<std::string> RunArgs(const std::vector<std::string>& sets) const {
    std::vector<std::string> args = {"run", "--out", (dir_ / "run").string()};
    args.insert(args.end(), sets.begin(), sets.end());
    return args;
  }

  // Names in dir_ other than the finished run and the captured output files.
  std::vector<std::string> Leftovers() const {
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(dir_)) {
      const std::string name = entry.path().filename().string();
      if (name != "run" && name != "stdout" && name != "stderr") names.push_back(name);
    }
    return names;
  }

  fs::path dir_;
};

TEST_P(CrashSafetyTest, SignalMidRunKeepsFinishedOutputsAndLeavesNoPartialFiles) {
  const int signal = GetParam();
  // An earlier, finished run in the directory the interrupted run would replace.
  const test::RunResult first = test::RunFeather(RunArgs(kShort));
  ASSERT_EQ(first.exit_code, 0) << first.err;
  const std::string summary = ReadBytes(dir_ / "run" / "summary.json");
  const std::string results = ReadBytes(dir_ / "run" / "results.h5");
  ASSERT_FALSE(summary.empty());
  ASSERT_FALSE(results.empty());

  const pid_t pid = Spawn(RunArgs(kLong), dir_ / "stdout", dir_ / "stderr");
  ASSERT_GT(pid, 0);
  EXPECT_TRUE(WaitForHandlers(pid, std::chrono::seconds(60)));
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // well into the run
  ASSERT_EQ(kill(pid, signal), 0);
  const Exit exit = WaitFor(pid, std::chrono::seconds(60));
  const std::string err = ReadBytes(dir_ / "stderr");
  EXPECT_EQ(exit.signal, 0) << "killed by the signal instead of handling it";
  EXPECT_EQ(exit.code, 128 + signal) << err;
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  EXPECT_THAT(err,
              HasSubstr(signal == SIGINT ? "interrupted by SIGINT" : "interrupted by SIGTERM"));
  EXPECT_THAT(err, HasSubstr("no outputs written"));
  EXPECT_EQ(ReadBytes(dir_ / "stdout"), "");

  // The earlier run is intact and nothing partial is left.
  EXPECT_EQ(ReadBytes(dir_ / "run" / "summary.json"), summary);
  EXPECT_EQ(ReadBytes(dir_ / "run" / "results.h5"), results);
  EXPECT_TRUE(Leftovers().empty()) << "left behind: " << ::testing::PrintToString(Leftovers());

  // The rerun works and replaces the earlier run.
  const test::RunResult rerun = test::RunFeather(
      RunArgs({"--set", "workload.requests=300", "--set", "workload.sharing.prefix_tokens=100",
               "--set", "scheduler_time=zero"}));
  ASSERT_EQ(rerun.exit_code, 0) << rerun.err;
  EXPECT_NE(ReadBytes(dir_ / "run" / "summary.json"), summary);
  EXPECT_TRUE(Leftovers().empty()) << "left behind: " << ::testing::PrintToString(Leftovers());
}

INSTANTIATE_TEST_SUITE_P(Signals, CrashSafetyTest, ::testing::Values(SIGINT, SIGTERM),
                         [](const ::testing::TestParamInfo<int>& param_info) {
                           return param_info.param == SIGINT ? std::string("SIGINT")
                                                             : std::string("SIGTERM");
                         });

}  // namespace
}  // namespace feather
