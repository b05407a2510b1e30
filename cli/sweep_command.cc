// sweep_command.cc: `feather sweep` (see sweep_command.h).
#include "cli/sweep_command.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <optional>
#include <ostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "base/cpus.h"
#include "cli/atomic_file.h"
#include "cli/interrupt.h"
#include "cli/sweep_spec.h"
#include "cli/sweep_table.h"
#include "hw/host_info.h"
#include "sim/io/run_output.h"

namespace feather {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using OrderedJson = nlohmann::ordered_json;

constexpr int kSweepJsonVersion = 1;

// ---- Small helpers ----------------------------------------------------------------------------

std::string SelfExe() {
  std::error_code error;
  const fs::path exe = fs::read_symlink("/proc/self/exe", error);
  if (error) throw std::runtime_error("cannot find the feather executable (/proc/self/exe)");
  return exe.string();
}

std::string ReadFileText(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string FormatDuration(double seconds) {
  if (!(seconds >= 0) || seconds > 1e7) return "?";
  const auto s = static_cast<long long>(seconds + 0.5);
  char text[32];
  if (s >= 3600) {
    std::snprintf(text, sizeof(text), "%lldh%02lldm", s / 3600, (s / 60) % 60);
  } else if (s >= 60) {
    std::snprintf(text, sizeof(text), "%lldm%02llds", s / 60, s % 60);
  } else {
    std::snprintf(text, sizeof(text), "%llds", s);
  }
  return text;
}

std::string JoinCommand(const std::vector<std::string>& argv) {
  std::string text;
  for (const std::string& arg : argv) {
    if (!text.empty()) text += ' ';
    const bool plain = !arg.empty() && arg.find_first_not_of(
                                           "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                           "0123456789._-+=/,:@%") == std::string::npos;
    if (plain) {
      text += arg;
    } else {
      text += '\'';
      for (const char c : arg) text += c == '\'' ? std::string("'\\''") : std::string(1, c);
      text += '\'';
    }
  }
  return text;
}

// ---- The point list both a sweep and a merge build the table from ------------------------------

struct PointRef {
  std::string name;
  std::vector<std::pair<std::string, std::string>> values;  // key -> display text
};

struct SweepLayout {
  std::vector<std::string> swept_keys;
  std::vector<PointRef> points;
};

SweepLayout LayoutOf(const SweepSpec& spec) {
  SweepLayout layout;
  layout.swept_keys = spec.swept_keys;
  for (const SweepPoint& p : spec.points) {
    PointRef ref{p.name, {}};
    for (const SweepValue& v : p.values) ref.values.emplace_back(v.key, v.display);
    layout.points.push_back(std::move(ref));
  }
  return layout;
}

OrderedJson SweepJson(const SweepSpec& spec, const SweepCommandOptions& options,
                      const std::string& shard) {
  OrderedJson points = OrderedJson::array();
  for (const SweepPoint& p : spec.points) {
    OrderedJson values = OrderedJson::object();
    for (const SweepValue& v : p.values) values[v.key] = v.display;
    points.push_back({{"name", p.name}, {"values", values}, {"overrides", p.overrides}});
  }
  OrderedJson set = OrderedJson::array();
  for (const SweepValue& v : spec.fixed) set.push_back(v.key + "=" + v.text);
  for (const std::string& v : spec.command_line_sets) set.push_back(v);
  std::error_code error;
  const fs::path cwd = fs::current_path(error);
  const nlohmann::json host = ToJson(ReadHostInfo());
  OrderedJson provenance = {{"command", JoinCommand(options.command)},
                            {"cwd", cwd.string()},
                            {"shard", shard},
                            {"feather_version", host.value("feather_version", "")},
                            {"git_rev", host.value("git_rev", "")},
                            {"build_type", host.value("build_type", "")},
                            {"compiler", host.value("compiler", "")},
                            {"hostname", host.value("hostname", "")},
                            {"cpu_model", host.value("cpu_model", "")},
                            {"date_utc", host.value("date_utc", "")}};
  return {{"format_version", kSweepJsonVersion},
          {"name", spec.name},
          {"sweep_file", spec.file},
          {"base", spec.base},
          {"set", set},
          {"swept_keys", spec.swept_keys},
          {"plot", spec.plot},
          {"points", points},
          {"provenance", provenance}};
}

SweepLayout ReadSweepJson(const fs::path& path) {
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(ReadFileText(path));
  } catch (const nlohmann::json::exception& error) {
    throw std::runtime_error("cannot read '" + path.string() + "': " + error.what());
  }
  SweepLayout layout;
  try {
    layout.swept_keys = doc.at("swept_keys").get<std::vector<std::string>>();
    // Values in the file's key order: parse that object again as ordered_json.
    const OrderedJson ordered = OrderedJson::parse(ReadFileText(path));
    for (const auto& p : ordered.at("points")) {
      PointRef ref{p.at("name").get<std::string>(), {}};
      for (const auto& [key, value] : p.at("values").items()) {
        ref.values.emplace_back(key, value.get<std::string>());
      }
      layout.points.push_back(std::move(ref));
    }
  } catch (const nlohmann::json::exception& error) {
    throw std::runtime_error("'" + path.string() + "' is not a sweep.json: " + error.what());
  }
  return layout;
}

// The point's summary.json, or nothing when it is absent, unreadable or not a summary of
// feather's (sim/io/run_output.h ReadSummaryJson, which bounds its nesting).
std::optional<OrderedJson> ReadSummary(const fs::path& point_dir) {
  return ReadSummaryJson(point_dir.string());
}

// Finished for this scenario: summary.json exists and echoes the same scenario.
enum class PointState { kMissing, kFinished, kStale };
PointState StateOf(const fs::path& point_dir, const SweepPoint& point) {
  const std::optional<OrderedJson> summary = ReadSummary(point_dir);
  if (!summary) return PointState::kMissing;
  if (SummaryRunUnserved(*summary)) return PointState::kMissing;  // its run exited 3: retry it
  if (!summary->contains("scenario")) return PointState::kStale;
  nlohmann::json echoed = nlohmann::json::parse((*summary)["scenario"].dump());
  echoed.erase("resolved");
  return echoed == point.scenario ? PointState::kFinished : PointState::kStale;
}

// Rows of every point of `layout`, looked up in `search` (the first folder holding it).
// Returns the names of the points missing everywhere.
std::vector<std::string> GatherRows(const SweepLayout& layout, const std::vector<fs::path>& search,
                                    std::vector<SweepTableRow>& rows) {
  std::vector<std::string> missing;
  for (const PointRef& p : layout.points) {
    std::optional<OrderedJson> summary;
    for (const fs::path& dir : search) {
      summary = ReadSummary(dir / "points" / p.name);
      if (summary) break;
    }
    if (!summary) {
      missing.push_back(p.name);
      continue;
    }
    rows.push_back({p.name, p.values, std::move(*summary)});
  }
  return missing;
}

// ---- Progress ---------------------------------------------------------------------------------

class Progress {
 public:
  Progress(size_t total, size_t already_done, uint32_t jobs)
      : tty_(isatty(STDERR_FILENO) != 0), total_(total), done_(already_done), jobs_(jobs) {}
  ~Progress() { EndLine(); }
  // Ends the progress line, so that what follows starts on a line of its own.
  void Finish() { EndLine(); }

  void PointFinished(const std::string& name, double seconds) {
    ++done_;
    ++run_here_;
    run_seconds_ += seconds;
    if (!tty_) {
      std::fprintf(stderr, "feather sweep: [%zu/%zu] %s finished in %.1f s\n", done_, total_,
                   name.c_str(), seconds);
    }
  }
  void PointFailed() { ++failed_; }
  // A message on its own line (the progress line is redrawn below it).
  void Message(const std::string& text) {
    EndLine();
    std::fprintf(stderr, "%s\n", text.c_str());
  }
  void Draw(size_t running, size_t queued, bool force = false) {
    if (!tty_) return;
    const auto now = Clock::now();
    if (!force && printed_ && now - last_ < std::chrono::milliseconds(200)) return;
    last_ = now;
    printed_ = true;
    std::string eta = "?";
    const size_t left = running + queued;
    if (run_here_ > 0 && left > 0) {
      const double mean = run_seconds_ / static_cast<double>(run_here_);
      const double width = static_cast<double>(std::min<size_t>(jobs_, left));
      eta = FormatDuration(mean * static_cast<double>(left) / width);
    } else if (left == 0) {
      eta = "0s";
    }
    std::fprintf(stderr, "\r  sweep: %zu/%zu done, %zu running, %zu failed, ETA %s   ", done_,
                 total_, running, failed_, eta.c_str());
    std::fflush(stderr);
  }

 private:
  void EndLine() {
    if (printed_) std::fputc('\n', stderr);
    printed_ = false;
  }

  bool tty_;
  size_t total_;
  size_t done_;
  uint32_t jobs_;
  size_t failed_ = 0;
  size_t run_here_ = 0;
  double run_seconds_ = 0;
  bool printed_ = false;
  Clock::time_point last_;
};

// ---- Child processes --------------------------------------------------------------------------

struct Child {
  pid_t pid = -1;
  size_t point = 0;
  Clock::time_point start;
  fs::path log;
};

// Starts `argv` with stdin and stdout on /dev/null and stderr into `log`, in its own process
// group, with SIGTERM as its parent-death signal. fork + exec rather than posix_spawn for
// PR_SET_PDEATHSIG: a sweep killed with SIGKILL must not leave points running behind it.
pid_t SpawnPoint(const std::vector<std::string>& args, const fs::path& log) {
  std::vector<char*> argv;
  std::vector<std::string> storage = args;
  for (std::string& a : storage) argv.push_back(a.data());
  argv.push_back(nullptr);
  const int log_fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  const int null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
  if (log_fd < 0 || null_fd < 0) {
    if (log_fd >= 0) close(log_fd);
    if (null_fd >= 0) close(null_fd);
    throw std::runtime_error("cannot open '" + log.string() + "': " + std::strerror(errno));
  }
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid == 0) {
    // Child: only async-signal-safe calls until exec.
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(128 + SIGTERM);  // the sweep died before prctl
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    dup2(null_fd, STDIN_FILENO);
    dup2(null_fd, STDOUT_FILENO);
    dup2(log_fd, STDERR_FILENO);
    execv(argv[0], argv.data());
    _exit(127);
  }
  const int fork_errno = errno;
  close(log_fd);
  close(null_fd);
  if (pid < 0) throw std::runtime_error(std::string("fork failed: ") + std::strerror(fork_errno));
  return pid;
}

std::string LastLine(const fs::path& file) {
  std::string text = ReadFileText(file);
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' ')) {
    text.pop_back();
  }
  const size_t nl = text.find_last_of("\r\n");
  return nl == std::string::npos ? text : text.substr(nl + 1);
}

// ---- sweep ------------------------------------------------------------------------------------

// Checks, before anything is written, that `dir` can hold this sweep's outputs: it is missing,
// empty, or an earlier sweep's folder (a sweep.json feather wrote; shards share one). Anything
// else is not ours to write into. Creates `dir`/points. Throws std::runtime_error naming --out.
void PrepareSweepDir(const fs::path& dir) {
  std::error_code error;
  const fs::file_status status = fs::status(dir, error);
  if (fs::exists(status)) {
    if (!fs::is_directory(status)) {
      throw std::runtime_error("sweep output folder '" + dir.string() +
                               "' exists and is not a directory; choose another --out");
    }
    bool ours = fs::is_empty(dir, error);
    if (!ours && fs::is_regular_file(dir / "sweep.json", error)) {
      std::ifstream in(dir / "sweep.json", std::ios::binary);
      const nlohmann::json json = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
      ours = json.is_object() && json.contains("format_version") && json.contains("points");
    }
    if (!ours) {
      throw std::runtime_error("sweep output folder '" + dir.string() +
                               "' holds files that are not a feather sweep's (no sweep.json); "
                               "choose another --out or move that folder away yourself");
    }
  }
  fs::create_directories(dir / "points", error);
  if (error) {
    throw std::runtime_error("cannot create the sweep output folder '" + (dir / "points").string() +
                             "': " + error.message());
  }
}

int RunSweep(const SweepCommandOptions& options, std::ostream& out) {
  // Everything is checked before anything is written.
  uint32_t shard_k = 1, shard_n = 1;
  if (!options.shard.empty()) std::tie(shard_k, shard_n) = ParseShard(options.shard);
  const SweepSpec spec = LoadSweepFile(options.sweep_file, options.sets);
  const std::vector<size_t> mine = ShardPoints(spec.points.size(), shard_k, shard_n);
  const fs::path dir =
      options.out_dir.empty() ? fs::path("out/sweeps") / spec.name : fs::path(options.out_dir);
  const fs::path points_dir = dir / "points";
  const uint32_t jobs = options.jobs == 0 ? UsableCpus() : options.jobs;
  const std::string shard_text = std::to_string(shard_k) + "/" + std::to_string(shard_n);

  if (options.list) {
    out << "sweep " << spec.name << ": " << spec.points.size() << " points, base " << spec.base
        << "; shard " << shard_text << " runs " << mine.size() << "\n";
    for (const size_t i : mine) {
      const SweepPoint& p = spec.points[i];
      out << p.name;
      for (const std::string& o : p.overrides) out << "  --set " << o;
      out << '\n';
    }
    return 0;
  }

  const InterruptScope scope;
  PrepareSweepDir(dir);
  WriteFileAtomically(dir / "sweep.json", SweepJson(spec, options, shard_text).dump(2) + "\n");
  std::vector<std::string> my_names;
  for (const size_t i : mine) my_names.push_back(spec.points[i].name);
  // Temps and set-aside folders an interrupted `feather run` of these points left behind.
  RemoveStaleOutputTemps(points_dir.string(), my_names);

  std::vector<size_t> pending;
  size_t skipped = 0, stale = 0;
  for (const size_t i : mine) {
    switch (StateOf(points_dir / spec.points[i].name, spec.points[i])) {
      case PointState::kFinished:
        ++skipped;
        break;
      case PointState::kStale:
        ++stale;
        pending.push_back(i);
        break;
      case PointState::kMissing:
        pending.push_back(i);
        break;
    }
  }
  if (skipped > 0 || stale > 0) {
    std::fprintf(stderr, "feather sweep: %zu of %zu points already finished%s; %zu to run%s\n",
                 skipped, mine.size(), skipped > 0 ? " (skipped)" : "", pending.size(),
                 stale > 0 ? (", " + std::to_string(stale) +
                              " of them again because their results echo another scenario")
                                 .c_str()
                           : "");
  }

  const std::string exe = SelfExe();
  const auto started = Clock::now();
  Progress progress(mine.size(), skipped, jobs);
  std::vector<Child> running;
  std::vector<std::string> failures;
  size_t next = 0, finished_now = 0;
  int forwarded = 0;
  if (!pending.empty()) fs::create_directories(dir / "logs");
  while (next < pending.size() || !running.empty()) {
    if (const int signal = PendingInterrupt(); signal != 0 && forwarded == 0) {
      forwarded = signal;
      for (const Child& c : running) kill(c.pid, signal);
    }
    while (forwarded == 0 && running.size() < jobs && next < pending.size()) {
      const SweepPoint& p = spec.points[pending[next]];
      std::vector<std::string> args = {exe, "run", spec.base};
      for (const std::string& o : p.overrides) {
        args.emplace_back("--set");
        args.push_back(o);
      }
      args.emplace_back("--out");
      args.push_back((points_dir / p.name).string());
      const fs::path log = dir / "logs" / (p.name + ".log");
      running.push_back({SpawnPoint(args, log), pending[next], Clock::now(), log});
      ++next;
    }
    if (forwarded != 0 && running.empty()) break;
    int status = 0;
    const pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      const auto it = std::find_if(running.begin(), running.end(),
                                   [&](const Child& c) { return c.pid == pid; });
      if (it == running.end()) continue;  // not one of ours
      const Child child = *it;
      running.erase(it);
      const SweepPoint& p = spec.points[child.point];
      const double seconds = std::chrono::duration<double>(Clock::now() - child.start).count();
      const bool exited = WIFEXITED(status);
      const int code = exited ? WEXITSTATUS(status) : -1;
      std::error_code ignored;
      if (exited && code == 0 && ReadSummary(points_dir / p.name)) {
        fs::remove(child.log, ignored);
        ++finished_now;
        progress.PointFinished(p.name, seconds);
      } else if (forwarded != 0) {
        fs::remove(child.log, ignored);  // stopped by the forwarded signal: not a failure
      } else {
        progress.PointFailed();
        const std::string how =
            exited ? "exit code " + std::to_string(code)
                   : "killed by " + SignalName(WIFSIGNALED(status) ? WTERMSIG(status) : 0);
        const std::string last = LastLine(child.log);
        failures.push_back(p.name);
        progress.Message("feather sweep: point " + p.name + " failed (" + how + ")" +
                         (last.empty() ? "" : ": " + last) + "; log: " + child.log.string());
      }
      progress.Draw(running.size(), pending.size() - next, true);
      continue;
    }
    if (pid < 0 && errno == ECHILD) {
      running.clear();  // cannot happen while children run; do not spin
      continue;
    }
    progress.Draw(running.size(), pending.size() - next);
    const timespec pause{0, 50'000'000};
    nanosleep(&pause, nullptr);
  }
  progress.Draw(0, 0, true);
  progress.Finish();
  std::error_code ignored;
  fs::remove(dir / "logs", ignored);  // only when empty
  const double wall_s = std::chrono::duration<double>(Clock::now() - started).count();

  if (forwarded != 0) {
    const size_t done = skipped + finished_now;
    std::fflush(stdout);
    progress.Message("feather: sweep interrupted by " + SignalName(forwarded) + "; " +
                     std::to_string(done) + " of " + std::to_string(mine.size()) +
                     " points finished and kept in " + points_dir.string() +
                     "; rerun the same command to resume");
    return 128 + forwarded;
  }
  if (!failures.empty()) {
    progress.Message("feather sweep: " + std::to_string(failures.size()) + " of " +
                     std::to_string(mine.size()) + " points failed (logs in " +
                     (dir / "logs").string() + "); no table written; rerun to retry them");
    return 1;
  }

  out << "sweep " << spec.name << ": " << mine.size() << " points"
      << (shard_n > 1 ? " (shard " + shard_text + " of " + std::to_string(spec.points.size()) + ")"
                      : std::string())
      << ", " << finished_now << " run, " << skipped << " already finished, " << std::fixed
      << std::setprecision(1) << wall_s << " s\n";

  // The table, once every point of the whole sweep is there (the last shard writes it).
  std::vector<SweepTableRow> rows;
  const std::vector<std::string> missing = GatherRows(LayoutOf(spec), {dir}, rows);
  if (!missing.empty()) {
    out << missing.size() << " points of other shards are not finished yet; when they are: "
        << "feather sweep --merge " << dir.string() << "\n";
    return 0;
  }
  WriteSweepTable(dir.string(), BuildSweepTable(spec.swept_keys, rows));
  out << "table: " << (dir / "table.csv").string() << ", " << (dir / "table.h5").string() << '\n';
  return 0;
}

// ---- merge ------------------------------------------------------------------------------------

int MergeSweep(const SweepCommandOptions& options, std::ostream& out) {
  std::vector<fs::path> dirs(options.merge_dirs.begin(), options.merge_dirs.end());
  const fs::path dir = dirs.front();
  fs::path sweep_json;
  for (const fs::path& d : dirs) {
    if (fs::is_regular_file(d / "sweep.json")) {
      sweep_json = d / "sweep.json";
      break;
    }
  }
  if (sweep_json.empty()) {
    throw std::invalid_argument("--merge: no sweep.json in " + dir.string() +
                                (dirs.size() > 1 ? " nor in the other folders" : "") +
                                " (is it a `feather sweep` output folder?)");
  }
  const SweepLayout layout = ReadSweepJson(sweep_json);
  fs::create_directories(dir / "points");
  if (sweep_json != dir / "sweep.json") fs::copy_file(sweep_json, dir / "sweep.json");
  // Points found only in another folder are copied in, so DIR ends up self-contained.
  size_t copied = 0;
  for (const PointRef& p : layout.points) {
    const fs::path target = dir / "points" / p.name;
    if (ReadSummary(target)) continue;
    for (size_t i = 1; i < dirs.size(); ++i) {
      const fs::path source = dirs[i] / "points" / p.name;
      if (!ReadSummary(source)) continue;
      const fs::path temp = target.string() + ".partial-" + std::to_string(getpid());
      fs::remove_all(temp);
      fs::copy(source, temp, fs::copy_options::recursive);
      if (fs::exists(target)) fs::remove_all(target);
      fs::rename(temp, target);
      ++copied;
      break;
    }
  }
  std::vector<SweepTableRow> rows;
  const std::vector<std::string> missing = GatherRows(layout, {dir}, rows);
  if (!missing.empty()) {
    std::string list;
    for (size_t i = 0; i < missing.size() && i < 10; ++i) list += "\n  " + missing[i];
    if (missing.size() > 10) list += "\n  ... and " + std::to_string(missing.size() - 10) + " more";
    std::fprintf(stderr,
                 "feather sweep --merge: %zu of %zu points have no summary.json yet (run their "
                 "shards, or pass the folders holding them):%s\n",
                 missing.size(), layout.points.size(), list.c_str());
    return 1;
  }
  WriteSweepTable(dir.string(), BuildSweepTable(layout.swept_keys, rows));
  out << "merged " << rows.size() << " points"
      << (copied > 0 ? " (" + std::to_string(copied) + " copied in)" : std::string())
      << "; table: " << (dir / "table.csv").string() << ", " << (dir / "table.h5").string() << '\n';
  return 0;
}

}  // namespace

int SweepCommand(const SweepCommandOptions& options, std::ostream& out) {
  if (!options.merge_dirs.empty()) {
    if (!options.sweep_file.empty()) {
      throw std::invalid_argument("--merge takes output folders, not a sweep file ('" +
                                  options.sweep_file + "')");
    }
    return MergeSweep(options, out);
  }
  if (options.sweep_file.empty()) {
    throw std::invalid_argument("a sweep file is required (or --merge DIR)");
  }
  return RunSweep(options, out);
}

}  // namespace feather
