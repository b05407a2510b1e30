// Tests for the `feather` binary as a user runs it: subcommands, JSON output, exit codes and
// messages. FEATHER_BINARY (set by tests/CMakeLists.txt) is the path of the built executable.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

extern char** environ;

namespace feather {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::StartsWith;

struct RunResult {
  int exit_code = -1;  // -1 when the process did not exit normally
  std::string out;
  std::string err;
};

// Runs FEATHER_BINARY with `args`, stdin closed, and captures stdout, stderr and the exit code.
RunResult RunFeather(const std::vector<std::string>& args) {
  RunResult result;
  int out_pipe[2];
  int err_pipe[2];
  if (pipe(out_pipe) != 0 || pipe(err_pipe) != 0) {
    ADD_FAILURE() << "pipe failed";
    return result;
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, out_pipe[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, err_pipe[1], STDERR_FILENO);
  for (int fd : {out_pipe[0], out_pipe[1], err_pipe[0], err_pipe[1]}) {
    posix_spawn_file_actions_addclose(&actions, fd);
  }
  std::vector<std::string> argv_storage = {FEATHER_BINARY};
  argv_storage.insert(argv_storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  argv.reserve(argv_storage.size() + 1);
  for (std::string& arg : argv_storage) argv.push_back(arg.data());
  argv.push_back(nullptr);

  pid_t pid = 0;
  const int spawn_error =
      posix_spawn(&pid, FEATHER_BINARY, &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(out_pipe[1]);
  close(err_pipe[1]);
  if (spawn_error != 0) {
    ADD_FAILURE() << "posix_spawn(" << FEATHER_BINARY << ") failed: " << spawn_error;
    close(out_pipe[0]);
    close(err_pipe[0]);
    return result;
  }

  // Drain both pipes together so that neither can fill up and block the child.
  std::array<pollfd, 2> fds = {pollfd{out_pipe[0], POLLIN, 0}, pollfd{err_pipe[0], POLLIN, 0}};
  std::array<std::string*, 2> sinks = {&result.out, &result.err};
  int open_count = 2;
  std::array<char, 4096> buffer{};
  while (open_count > 0) {
    if (poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      ADD_FAILURE() << "poll failed";
      break;
    }
    for (size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      const ssize_t n = read(fds[i].fd, buffer.data(), buffer.size());
      if (n > 0) {
        sinks[i]->append(buffer.data(), static_cast<size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        close(fds[i].fd);
        fds[i].fd = -1;
        --open_count;
      }
    }
  }
  for (const pollfd& fd : fds) {
    if (fd.fd >= 0) close(fd.fd);
  }

  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  return result;
}

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
  for (const char* key :
       {"hostname", "cpu_model", "logical_cpus", "usable_cpus", "l1d_cache_bytes", "l2_cache_bytes",
        "l3_cache_bytes", "memory_bytes", "os", "kernel", "arch", "compiler", "build_type",
        "git_rev", "feather_version", "sanitized", "cuda_compiler_present", "date_utc"}) {
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
