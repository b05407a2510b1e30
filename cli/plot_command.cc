// plot_command.cc: `feather plot` (plot_command.h).
#include "cli/plot_command.h"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <ostream>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

extern char** environ;

namespace feather {
namespace {

namespace fs = std::filesystem;

constexpr const char* kScript = "scripts/plot_sweep.py";

std::string Env(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? std::string() : std::string(value);
}

// CMAKE_HOME_DIRECTORY from a CMakeCache.txt next to the executable.
std::string SourceDirFromCache(const fs::path& exe_dir) {
  std::ifstream in(exe_dir / "CMakeCache.txt");
  std::string line;
  const std::string key = "CMAKE_HOME_DIRECTORY:INTERNAL=";
  while (std::getline(in, line)) {
    if (line.rfind(key, 0) == 0) return line.substr(key.size());
  }
  return "";
}

}  // namespace

std::string FindPlotScript() {
  if (std::string env = Env("FEATHER_PLOT_SCRIPT"); !env.empty()) return env;
  std::error_code error;
  const fs::path exe = fs::read_symlink("/proc/self/exe", error);
  if (error) return "";
  fs::path dir = exe.parent_path();
  for (int up = 0; up < 5 && !dir.empty(); ++up) {
    if (fs::is_regular_file(dir / kScript, error)) return (dir / kScript).string();
    if (dir == dir.parent_path()) break;
    dir = dir.parent_path();
  }
  if (const std::string source = SourceDirFromCache(exe.parent_path()); !source.empty()) {
    if (fs::is_regular_file(fs::path(source) / kScript, error)) {
      return (fs::path(source) / kScript).string();
    }
  }
  const fs::path installed = exe.parent_path().parent_path() / "share/feather/plot_sweep.py";
  if (fs::is_regular_file(installed, error)) return installed.string();
  return "";
}

int PlotCommand(const PlotCommandOptions& options, std::ostream& out) {
  if (options.dirs.empty()) throw std::invalid_argument("a sweep output folder is required");
  if (!options.out_dir.empty() && options.dirs.size() > 1) {
    throw std::invalid_argument("--out takes one sweep folder; got " +
                                std::to_string(options.dirs.size()));
  }
  for (const std::string& dir : options.dirs) {
    if (!fs::is_regular_file(fs::path(dir) / "table.csv")) {
      throw std::invalid_argument("'" + dir + "' has no table.csv: run `feather sweep` (or " +
                                  "`feather sweep --merge " + dir + "`) first");
    }
  }
  const std::string script = FindPlotScript();
  if (script.empty()) {
    throw std::runtime_error(std::string("cannot find ") + kScript +
                             " (set FEATHER_PLOT_SCRIPT to its path)");
  }
  std::string python = options.python;
  if (python.empty()) python = Env("FEATHER_PYTHON");
  if (python.empty())
    python = access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : "python3";

  std::vector<std::string> args = {python, script};
  if (!options.out_dir.empty()) {
    args.emplace_back("--out");
    args.push_back(options.out_dir);
  }
  for (const std::string& dir : options.dirs) args.push_back(dir);
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  out.flush();
  pid_t pid = 0;
  const int spawn_error =
      posix_spawnp(&pid, python.c_str(), nullptr, nullptr, argv.data(), environ);
  if (spawn_error != 0) {
    throw std::runtime_error("cannot run " + python + " (" + std::strerror(spawn_error) +
                             "): feather plot needs Python 3 with matplotlib; on Debian: "
                             "apt-get install python3-matplotlib python3-h5py");
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) throw std::runtime_error("waitpid failed");
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

}  // namespace feather
