// run_command.cc: `feather run` and `feather pretrain` (see run_command.h).
#include "cli/run_command.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <iomanip>
#include <ostream>
#include <sstream>

#include "cli/engines.h"
#include "cli/interrupt.h"
#include "hw/host_info.h"
#include "policies/stop_policy_io.h"
#include "sim/embedded_files.h"
#include "sim/run_output.h"
#include "sim/scenario.h"
#include "sim/scenario_run.h"

namespace feather {
namespace {

constexpr std::string_view kDefaultScenario = "scenarios/default.yaml";

Scenario LoadScenarioOrDefault(const std::string& path, const std::vector<std::string>& overrides) {
  if (!path.empty()) return LoadScenarioFile(path, overrides);
  const std::optional<std::string_view> text = FindEmbeddedFile(kDefaultScenario);
  return LoadScenarioText(text.value_or(""), "<built-in>/" + std::string(kDefaultScenario), ".",
                          overrides);
}

// Provenance for summary.json: the build and the machine, without the date, so two runs of one
// scenario and seed give byte-identical files.
nlohmann::json SummaryProvenance() {
  nlohmann::json provenance = ToJson(ReadHostInfo());
  provenance.erase("date_utc");
  return provenance;
}

// A one-line progress report on stderr, rewritten in place, only when stderr is a terminal.
class ProgressLine {
 public:
  ProgressLine() : enabled_(isatty(STDERR_FILENO) != 0) {}
  ~ProgressLine() {
    if (printed_) std::fputc('\n', stderr);
  }
  void Update(const SimProgress& p) {
    if (!enabled_) return;
    const auto now = std::chrono::steady_clock::now();
    if (printed_ && now - last_ < std::chrono::milliseconds(250)) return;
    last_ = now;
    printed_ = true;
    std::fprintf(stderr, "\r  simulated %.1f s  steps %llu  finished %llu/%llu requests ",
                 static_cast<double>(p.now_ns) * 1e-9, static_cast<unsigned long long>(p.steps),
                 static_cast<unsigned long long>(p.finished),
                 static_cast<unsigned long long>(p.total));
  }

 private:
  bool enabled_;
  bool printed_ = false;
  std::chrono::steady_clock::time_point last_;
};

void PrintSummary(std::ostream& out, const RunSummary& s, const std::string& dir) {
  out << std::fixed << std::setprecision(2);
  out << "requests finished   " << s.requests_finished << " / " << s.requests << '\n'
      << "throughput          " << s.throughput_tok_s << " tok/s\n"
      << "mean / p99 TBT      " << s.mean_tbt_ms << " / " << s.p99_tbt_ms << " ms\n"
      << "mean TTFT           " << s.mean_ttft_ms << " ms\n"
      << "mean batch size     " << s.mean_batch_size << '\n'
      << "simulated duration  " << s.duration_s << " s (engine busy " << s.engine_busy_s
      << " s, scheduler " << s.scheduler_cpu_s << " s)\n"
      << "preemptions         " << s.preemptions << ", evictions " << s.evictions << '\n'
      << "cascade steps       " << s.cascade_step_fraction * 100.0 << " %\n"
      << "outputs             " << dir << "/summary.json, " << dir << "/results.h5\n";
}

int RunScenario(const RunCommandOptions& options, std::ostream& out) {
  const Scenario scenario = LoadScenarioOrDefault(options.scenario_path, options.overrides);
  const PreparedRun prepared = PrepareRun(scenario);
  ThrowIfInterrupted();
  const Workload workload = GenerateWorkload(scenario.workload, scenario.seed);
  ThrowIfInterrupted();
  const std::unique_ptr<StopPolicy> policy = MakeScenarioPolicy(scenario);
  SimResult result;
  {
    ProgressLine progress;
    // The serving loop calls this every few thousand steps: the safe point to stop at.
    result = ExecuteRun(prepared, workload, *policy, [&](const SimProgress& p) {
      progress.Update(p);
      ThrowIfInterrupted();
    });
  }
  ThrowIfInterrupted();
  const std::string dir = options.out_dir.empty() ? "out/" + scenario.name : options.out_dir;
  RunOutputMeta meta;
  meta.scenario = ScenarioToJson(scenario);
  meta.scenario["resolved"] = ResolvedRunJson(prepared);
  meta.provenance = SummaryProvenance();
  meta.engine = scenario.engine;
  meta.selector = scenario.selector;
  meta.stop_policy = scenario.stop;
  {
    const TempPathGuard temp(PartialOutputDir(dir));
    WriteRunOutputs(dir, result.records, result.summary, meta, ThrowIfInterrupted);
  }
  if (const int signal = PendingInterrupt(); signal != 0) {
    // Too late to abandon: the outputs are complete and in place. Still exit with the signal's
    // status, so that a script driving feather stops too.
    std::fflush(stdout);
    std::fprintf(stderr, "feather: run interrupted by %s after %s was written (it is complete)\n",
                 SignalName(signal).c_str(), dir.c_str());
    return Interrupted(signal).exit_code();
  }
  if (options.json) {
    out << SummaryJsonText(result.summary, meta);  // the bytes of summary.json
  } else {
    PrintSummary(out, result.summary, dir);
  }
  return 0;
}

// Runs `command` with SIGINT/SIGTERM polled (cli/interrupt.h). An interrupt removes the
// registered temp paths, prints one line, "feather: <what> interrupted by SIGINT; <outcome>",
// and returns 128 + signal.
template <typename Command>
int WithInterrupts(const char* what, const char* outcome, Command&& command) {
  const InterruptScope scope;
  try {
    return command();
  } catch (const Interrupted& interrupted) {
    RemoveRegisteredTempPaths();
    std::fflush(stdout);
    std::fprintf(stderr, "feather: %s %s; %s\n", what, interrupted.what(), outcome);
    return interrupted.exit_code();
  }
}

}  // namespace

int RunScenarioCommand(const RunCommandOptions& options, std::ostream& out) {
  RegisterBuiltinEngines();
  return WithInterrupts("run", "no outputs written (an existing output directory is untouched)",
                        [&] { return RunScenario(options, out); });
}

int PretrainCommand(const PretrainCommandOptions& options, std::ostream& out) {
  RegisterBuiltinEngines();
  return WithInterrupts("pretrain", "no policy saved", [&] {
    Scenario scenario = LoadScenarioOrDefault(options.scenario_path, options.overrides);
    const PreparedRun prepared = PrepareRun(scenario);
    std::unique_ptr<StopPolicy> policy = MakeScenarioPolicy(scenario);
    policy->set_learning(true);
    uint64_t steps_done = 0;
    for (uint64_t epoch = 0; steps_done < options.steps; ++epoch) {
      ThrowIfInterrupted();
      const Workload workload = GenerateWorkload(scenario.workload, scenario.seed + epoch);
      const SimResult result = ExecuteRun(
          prepared, workload, *policy, [](const SimProgress&) { ThrowIfInterrupted(); },
          options.steps - steps_done);
      if (result.summary.steps == 0) break;  // an empty workload would never progress
      steps_done += result.summary.steps;
      out << "epoch " << epoch << ": " << result.summary.steps << " steps, throughput "
          << std::fixed << std::setprecision(1) << result.summary.throughput_tok_s
          << " tok/s, mean batch " << result.summary.mean_batch_size << '\n';
    }
    ThrowIfInterrupted();  // an interrupted training saves nothing
    SaveStopPolicy(*policy, options.out_file);
    out << "saved " << scenario.stop << " policy after " << steps_done << " steps to "
        << options.out_file << '\n';
    return 0;
  });
}

}  // namespace feather
