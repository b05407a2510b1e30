// run_command.cc: `feather run` and `feather pretrain` (see run_command.h).
#include "cli/run_command.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <iomanip>
#include <optional>
#include <ostream>
#include <sstream>

#include "cli/engines.h"
#include "cli/interrupt.h"
#include "hw/foreign_host.h"
#include "hw/host_info.h"
#include "policies/stop_policy_io.h"
#include "sim/io/embedded_files.h"
#include "sim/io/run_output.h"
#include "sim/io/scenario.h"
#include "sim/io/scenario_run.h"

namespace feather {

std::string FormatTime(double ms) {
  char text[64];
  if (ms < 10'000.0) {
    std::snprintf(text, sizeof(text), "%.2f ms", ms);
  } else {
    std::snprintf(text, sizeof(text), "%.2f s", ms * 1e-3);
  }
  return text;
}

namespace {

constexpr std::string_view kDefaultScenario = "scenarios/default.yaml";

Scenario LoadScenarioOrDefault(const std::string& path, const std::vector<std::string>& overrides) {
  if (!path.empty()) return LoadScenarioFile(path, overrides);
  const std::optional<std::string_view> text = FindEmbeddedFile(kDefaultScenario);
  return LoadScenarioText(text.value_or(""), "<built-in>/" + std::string(kDefaultScenario), ".",
                          overrides);
}

// One line on stderr when the profile was calibrated on another machine (the static facts of
// hw/foreign_host.h: CPU model, count, L3; `validate` also probes the bandwidth), and one when it
// was calibrated with other KV pages than the scenario's.
void WarnIfForeignProfile(const PreparedRun& prepared, const HostInfo& host) {
  if (!prepared.profile.measured_on) return;
  const std::optional<std::string> why =
      ForeignHostDifference(IdentityOf(*prepared.profile.measured_on), IdentityOf(host));
  if (why) {
    std::fprintf(stderr,
                 "feather: warning: profile %s was %s; its step times describe that machine "
                 "(calibrate this one: feather calibrate --target cpu --out PROFILE.yaml)\n",
                 prepared.profile_file.c_str(), why->c_str());
  }
  if (const std::optional<std::string> pages =
          BlockTokensDifference(*prepared.profile.measured_on, prepared.serving.block_tokens)) {
    std::fprintf(stderr, "feather: warning: profile %s was %s\n", prepared.profile_file.c_str(),
                 pages->c_str());
  }
}

// Provenance for summary.json: the build and the machine, without the date, so two runs of one
// scenario and seed give byte-identical files.
nlohmann::json SummaryProvenance(const HostInfo& host) {
  nlohmann::json provenance = ToJson(host);
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

// The text summary of `feather run` (summary.json has the exact values).
void PrintSummary(std::ostream& out, const RunSummary& s, const std::string& dir) {
  const auto line = [&](std::string_view label) -> std::ostream& {
    constexpr size_t kWidth = 25;
    out << label << std::string(label.size() < kWidth ? kWidth - label.size() : 1, ' ');
    return out;
  };
  const auto per_s = [&](double count) { return s.duration_s > 0 ? count / s.duration_s : 0.0; };
  out << std::fixed << std::setprecision(2);
  line("requests finished") << s.requests_finished << " / " << s.requests;
  if (s.requests_unservable > 0) out << " (" << s.requests_unservable << " unservable, rejected)";
  out << '\n';
  line("output tok/s") << s.throughput_tok_s << '\n';
  // Prompt tokens the engine computed (recompute after preemption included): cache hits cost no
  // compute and are not counted here, but in the hit rate below.
  line("input (prefilled) tok/s") << per_s(static_cast<double>(s.prefill_tokens))
                                  << " (cache hits not counted)\n";
  line("prompt cache hit rate");
  if (s.admitted_prompt_tokens > 0) {
    out << 100.0 * static_cast<double>(s.cached_prompt_tokens) /
               static_cast<double>(s.admitted_prompt_tokens)
        << " % of the prompt tokens of admitted requests\n";
  } else {
    out << "n/a (no request admitted)\n";
  }
  line("mean / p99 TBT") << FormatTime(s.mean_tbt_ms) << " / " << FormatTime(s.p99_tbt_ms) << '\n';
  line("mean / p99 TTFT") << FormatTime(s.mean_ttft_ms) << " / " << FormatTime(s.p99_ttft_ms)
                          << '\n';
  line("mean latency") << FormatTime(s.mean_latency_ms) << " (arrival to last token)\n";
  line("mean batch size") << s.mean_batch_size << '\n';
  line("simulated duration") << FormatTime(s.duration_s * 1e3) << " (engine busy "
                             << FormatTime(s.engine_busy_s * 1e3) << ", scheduler "
                             << FormatTime(s.scheduler_cpu_s * 1e3) << ")\n";
  line("preemptions") << s.preemptions << ", evictions " << s.evictions << '\n';
  line("cascade steps") << s.cascade_step_fraction * 100.0 << " %\n";
  if (s.overloaded) {
    // RunSummary::overloaded says how this is decided.
    line("overloaded")
        << "yes: arrivals outpaced service; " << s.waiting_at_last_arrival << " of " << s.requests
        << " requests still waited for admission when the last one arrived ("
        << FormatTime(s.arrival_span_s * 1e3) << " after the first); the run "
        << "ended "
        << FormatTime((s.duration_s > s.arrival_span_s ? s.duration_s - s.arrival_span_s : 0.0) *
                      1e3)
        << " later; TTFT and latency mostly measure that queue\n";
  }
  line("outputs") << dir << "/summary.json, " << dir << "/results.h5\n";
}

int RunScenario(const RunCommandOptions& options, std::ostream& out) {
  const Scenario scenario = LoadScenarioOrDefault(options.scenario_path, options.overrides);
  const PreparedRun prepared = PrepareRun(scenario);
  const HostInfo host = ReadHostInfo();  // read once: the profile check and the provenance
  WarnIfForeignProfile(prepared, host);
  const std::string dir = options.out_dir.empty() ? "out/" + scenario.name : options.out_dir;
  // A folder the outputs cannot go to is found now, not after the simulation.
  PrepareOutputDir(dir);
  ThrowIfInterrupted();
  const Workload workload = GenerateWorkload(scenario.workload, scenario.seed);
  ThrowIfInterrupted();
  const std::unique_ptr<StopPolicy> policy = MakeScenarioPolicy(scenario);
  SimResult result;
  {
    ProgressLine progress;
    // The serving loop calls this after every step: the safe point to stop at.
    result = ExecuteRun(prepared, workload, *policy, [&](const SimProgress& p) {
      progress.Update(p);
      ThrowIfInterrupted();
    });
  }
  ThrowIfInterrupted();
  RunOutputMeta meta;
  meta.scenario = ScenarioToJson(scenario);
  meta.scenario["resolved"] = ResolvedRunJson(prepared);
  meta.provenance = SummaryProvenance(host);
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
  // Requests that can never be served, and a run that finishes nothing, fail the run (exit 3)
  // after its outputs are written: they are the scenario's problem, and the outputs show it.
  constexpr int kExitUnserved = 3;
  out.flush();
  const RunSummary& s = result.summary;
  const bool allowed = scenario.workload.limits.allow_unservable;
  const std::string unservable = DescribeUnservable(result.unservable, s.requests);
  if (!unservable.empty()) {
    std::fprintf(stderr, "feather: %s%s\n", unservable.c_str(),
                 allowed ? " (expected: limits.allow_unservable is true)"
                         : "; set limits.allow_unservable: true if that is expected");
  }
  if (s.requests > 0 && s.requests_finished == 0) {  // fails even when unservable is allowed
    std::string why = "every request was rejected as unservable";
    if (s.requests_unservable < s.requests) {
      std::ostringstream limit;
      limit << "the run stopped at";
      if (scenario.serving.max_steps > 0) limit << " run.max_steps " << scenario.serving.max_steps;
      if (scenario.serving.max_sim_ns > 0) {
        limit << " run.max_time_s " << static_cast<double>(scenario.serving.max_sim_ns) * 1e-9;
      }
      limit << " before any request finished";
      why = limit.str();
    }
    std::fprintf(stderr, "feather: no request finished: %s; %s has the details\n", why.c_str(),
                 dir.c_str());
    return kExitUnserved;
  }
  return RunUnserved(s.requests, s.requests_finished, s.requests_unservable, allowed)
             ? kExitUnserved
             : 0;
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
    const auto interruptible = [](const SimProgress&) { ThrowIfInterrupted(); };
    const bool keep_best = options.keep == "best";
    // A trace replay generates the same workload whatever the seed: run it once.
    const bool replay = scenario.workload.use_trace;
    std::vector<Workload> held_out;
    for (uint32_t i = 0; keep_best && i < (replay ? 1 : options.held_out); ++i) {
      held_out.push_back(GenerateWorkload(
          scenario.workload, scenario.seed + PretrainCommandOptions::kHoldOutSeedOffset + i));
    }
    std::string best_table;
    double best_throughput = -1;
    uint64_t best_epoch = 0;
    uint64_t steps_done = 0;
    out << std::fixed << std::setprecision(1);
    for (uint64_t epoch = 0; steps_done < options.steps; ++epoch) {
      ThrowIfInterrupted();
      const Workload workload = GenerateWorkload(scenario.workload, scenario.seed + epoch);
      const SimResult result =
          ExecuteRun(prepared, workload, *policy, interruptible, options.steps - steps_done);
      if (result.summary.steps == 0) break;  // an empty workload would never progress
      steps_done += result.summary.steps;
      out << "epoch " << epoch << ": " << result.summary.steps << " steps, throughput "
          << result.summary.throughput_tok_s << " tok/s, mean batch "
          << result.summary.mean_batch_size;
      if (keep_best) {
        // The table as it stands, frozen, on the held-out workloads.
        std::string table = StopPolicyToJson(*policy);
        std::unique_ptr<StopPolicy> frozen = MakeScenarioPolicy(scenario);
        double throughput = 0;
        double batch = 0;
        std::ostringstream each;
        each << std::fixed << std::setprecision(1);
        for (const Workload& check_workload : held_out) {
          // The table afresh for each workload: a run leaves transitions and holds in flight.
          StopPolicyFromJson(*frozen, table, "epoch " + std::to_string(epoch) + "'s table");
          frozen->set_learning(false);
          const SimResult check = ExecuteRun(prepared, check_workload, *frozen, interruptible);
          throughput += check.summary.throughput_tok_s / static_cast<double>(held_out.size());
          batch += check.summary.mean_batch_size / static_cast<double>(held_out.size());
          each << (each.tellp() > 0 ? ", " : "") << check.summary.throughput_tok_s;
        }
        if (held_out.size() == 1) {
          out << "; frozen on the held-out workload " << throughput << " tok/s, mean batch "
              << batch;
        } else {
          out << "; frozen on " << held_out.size() << " held-out workloads " << throughput
              << " tok/s (" << each.str() << "), mean batch " << batch;
        }
        if (throughput > best_throughput) {
          best_throughput = throughput;
          best_table = std::move(table);
          best_epoch = epoch;
        }
      }
      out << '\n';
    }
    ThrowIfInterrupted();  // an interrupted training saves nothing
    if (keep_best && !best_table.empty()) {
      StopPolicyFromJson(*policy, best_table, "epoch " + std::to_string(best_epoch) + "'s table");
    }
    SaveStopPolicy(*policy, options.out_file);
    out << "saved " << scenario.stop << " policy after " << steps_done << " steps to "
        << options.out_file;
    if (keep_best && !best_table.empty()) {
      out << " (epoch " << best_epoch << "'s table: frozen " << best_throughput
          << (held_out.size() == 1 ? " tok/s on the held-out workload"
                                   : " tok/s on the held-out workloads' mean")
          << ", the best of the epochs)";
    } else {
      out << " (the last table)";
    }
    out << '\n';
    return 0;
  });
}

}  // namespace feather
