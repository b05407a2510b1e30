// main.cc: the `feather` command line (CLI11). Parses the subcommand and its flags, calls the
// command driver (cli/bench_*.h, hw/host_info.h) and prints its result as a table or as JSON.
//
// Exit codes: 0 success; 2 bad usage (unknown subcommand, bad flag or value: CLI11's message on
// stderr) or an error raised by a command ("feather: error: ..." on stderr).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <iomanip>
#include <iostream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "cli/bench_cht_ops.h"
#include "cli/bench_experiments.h"
#include "cli/bench_sched_overhead.h"
#include "cli/calibrate_command.h"
#include "cli/plot_command.h"
#include "cli/run_command.h"
#include "cli/sweep_command.h"
#include "cli/trace_stats.h"
#include "cli/selfcheck_command.h"
#include "cli/validate_command.h"
#include "hw/host_info.h"

namespace feather {
namespace {

constexpr int kExitUsage = 2;
constexpr uint32_t kMaxCount = std::numeric_limits<uint32_t>::max();

// ---- Output helpers ---------------------------------------------------------------------------

std::string FormatBytes(uint64_t bytes) {
  constexpr std::pair<uint64_t, const char*> kUnits[] = {
      {uint64_t{1} << 30, "GiB"}, {uint64_t{1} << 20, "MiB"}, {uint64_t{1} << 10, "KiB"}};
  for (const auto& [scale, unit] : kUnits) {
    if (bytes >= scale) {
      std::ostringstream out;
      out << std::fixed << std::setprecision(1)
          << static_cast<double>(bytes) / static_cast<double>(scale) << ' ' << unit;
      return out.str();
    }
  }
  return std::to_string(bytes) + " B";
}

// A JSON scalar as table text: integers as they are, floating point with one decimal.
std::string FormatValue(const nlohmann::json& value) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_number_float()) {
    std::ostringstream out;
    out << std::fixed << std::setprecision(1) << value.get<double>();
    return out.str();
  }
  if (value.is_null()) return "-";
  return value.dump();
}

// Prints rows under a header; text columns left-aligned, number columns right-aligned.
void PrintTable(std::ostream& out, const std::vector<std::string>& header,
                const std::vector<std::vector<std::string>>& rows,
                const std::vector<bool>& right_aligned) {
  std::vector<size_t> width(header.size());
  for (size_t c = 0; c < header.size(); ++c) width[c] = header[c].size();
  for (const auto& row : rows) {
    for (size_t c = 0; c < row.size() && c < width.size(); ++c) {
      width[c] = std::max(width[c], row[c].size());
    }
  }
  auto print_row = [&](const std::vector<std::string>& row) {
    for (size_t c = 0; c < header.size(); ++c) {
      const std::string& cell = c < row.size() ? row[c] : std::string();
      if (c > 0) out << "  ";
      if (right_aligned[c]) {
        out << std::setw(static_cast<int>(width[c])) << std::right << cell;
      } else if (c + 1 < header.size()) {
        out << std::setw(static_cast<int>(width[c])) << std::left << cell;
      } else {
        out << cell;
      }
    }
    out << '\n';
  };
  print_row(header);
  size_t total = 0;
  for (size_t w : width) total += w;
  out << std::string(total + 2 * (width.empty() ? 0 : width.size() - 1), '-') << '\n';
  for (const auto& row : rows) print_row(row);
}

// ---- Commands ---------------------------------------------------------------------------------

int RunBenchChtOps(const ChtOpsOptions& options, bool json) {
  if (options.prefix_tokens > options.prompt_tokens) {
    throw std::invalid_argument("--prefix-tokens (" + std::to_string(options.prefix_tokens) +
                                ") exceeds --prompt-tokens (" +
                                std::to_string(options.prompt_tokens) + ")");
  }
  const nlohmann::json result = RunChtOpsBenchmark(options);
  if (json) {
    std::cout << result.dump(2) << '\n';
    return 0;
  }
  std::cout << "CHT operations: " << options.requests << " requests, " << options.prompt_tokens
            << "-token prompts, " << options.prefix_tokens << "-token prefixes in "
            << options.groups << " groups, " << options.chunk_tokens << "-token chunks, max batch "
            << options.max_batch << ", seed " << options.seed << "\n\n";
  std::vector<std::vector<std::string>> rows;
  if (const auto it = result.find("operations"); it != result.end() && it->is_object()) {
    for (const auto& [name, op] : it->items()) {
      rows.push_back({name, FormatValue(op.value("calls", nlohmann::json())),
                      FormatValue(op.value("mean_ns", nlohmann::json())),
                      FormatValue(op.value("total_ns", nlohmann::json()))});
    }
  }
  PrintTable(std::cout, {"operation", "calls", "mean_ns", "total_ns"}, rows,
             {false, true, true, true});
  const uint64_t peak_rss =
      result.contains("peak_rss_bytes") && result["peak_rss_bytes"].is_number()
          ? result["peak_rss_bytes"].get<uint64_t>()
          : PeakRssBytes();
  std::cout << "\npeak RSS: " << FormatBytes(peak_rss) << " (" << peak_rss << " bytes)\n";
  if (result.contains("cht_peak_bytes") && result["cht_peak_bytes"].is_number()) {
    const auto cht_bytes = result["cht_peak_bytes"].get<uint64_t>();
    std::cout << "CHT peak size: " << FormatBytes(cht_bytes) << " (" << cht_bytes << " bytes)\n";
  }
  return 0;
}

int RunBenchSchedOverhead(const SchedOverheadOptions& options, bool json) {
  const nlohmann::json result = RunSchedOverheadBenchmark(options);
  if (json) {
    std::cout << result.dump(2) << '\n';
    return 0;
  }
  // Columns: the contract's keys first, then any other key a row has, in sorted order.
  std::vector<std::string> columns = {"selector", "prefix_tokens", "waiting", "round_ns"};
  const nlohmann::json rows_json = result.value("rows", nlohmann::json::array());
  for (const auto& row : rows_json) {
    if (!row.is_object()) continue;
    for (const auto& [key, unused] : row.items()) {
      if (std::find(columns.begin(), columns.end(), key) == columns.end()) columns.push_back(key);
    }
  }
  std::vector<std::vector<std::string>> rows;
  std::vector<bool> right_aligned(columns.size(), true);
  for (const auto& row : rows_json) {
    if (!row.is_object()) continue;
    std::vector<std::string> cells;
    for (size_t c = 0; c < columns.size(); ++c) {
      const auto it = row.find(columns[c]);
      if (it == row.end()) {
        cells.emplace_back("-");
        continue;
      }
      if (it->is_string()) right_aligned[c] = false;
      cells.push_back(it->is_structured() ? it->dump() : FormatValue(*it));
    }
    rows.push_back(std::move(cells));
  }
  PrintTable(std::cout, columns, rows, right_aligned);
  std::cout << "\npeak RSS: " << FormatBytes(PeakRssBytes()) << '\n';
  return 0;
}

int RunInfo(bool json) {
  const HostInfo info = ReadHostInfo();
  if (json) {
    std::cout << ToJson(info).dump(2) << '\n';
    return 0;
  }
  auto bytes_or_unknown = [](size_t bytes) {
    return bytes == 0 ? std::string("unknown") : FormatBytes(bytes);
  };
  const std::vector<std::pair<std::string, std::string>> lines = {
      {"hostname", info.hostname},
      {"cpu", info.cpu_model},
      {"logical cpus", std::to_string(info.logical_cpus) + " (" + std::to_string(info.usable_cpus) +
                           " usable by this process)"},
      {"L1d cache", bytes_or_unknown(info.caches.l1d_bytes)},
      {"L2 cache", bytes_or_unknown(info.caches.l2_bytes)},
      {"L3 cache", bytes_or_unknown(info.caches.l3_bytes)},
      {"memory", bytes_or_unknown(info.memory_bytes)},
      {"os", info.os},
      {"kernel", info.kernel + " " + info.arch},
      {"compiler", info.compiler},
      {"build type", info.build_type},
      {"git rev", info.git_rev},
      {"feather", info.feather_version},
      {"sanitized", info.sanitized ? "yes (ASan+UBSan)" : "no"},
      {"nvcc present", info.cuda_compiler_present ? "yes" : "no"},
      {"attention", info.attention_isa + " tile step"},
      {"gemm", info.gemm_kernel},
      {"date (UTC)", info.date_utc},
  };
  for (const auto& [key, value] : lines) {
    std::cout << std::left << std::setw(14) << key << value << '\n';
  }
  return 0;
}

int RunVersion() {
  const HostInfo info = ReadHostInfo();
  std::cout << "feather " << info.feather_version << " (git " << info.git_rev << ", "
            << info.build_type << (info.sanitized ? ", sanitized" : "") << ", " << info.compiler
            << ")\n";
  return 0;
}

// ---- Parsing ----------------------------------------------------------------------------------

int Main(int argc, char** argv) {
  CLI::App app{"feather: prefix-homogeneity-aware batch scheduling for LLM inference", "feather"};
  // At most one subcommand; "none" is reported after parsing, so that an unknown word is named
  // ("The following arguments were not expected: ...") rather than "A subcommand is required".
  app.require_subcommand(0, 1);
  app.get_formatter()->column_width(34);

  // feather bench ...
  CLI::App* bench =
      app.add_subcommand("bench", "Microbenchmarks of the scheduler's building blocks");
  bench->require_subcommand(0, 1);

  ChtOpsOptions cht_options;
  bool cht_json = false;
  CLI::App* cht_ops = bench->add_subcommand(
      "cht-ops", "Time every Chunked Hash Tree operation (paper's CHT table)");
  cht_ops->add_flag("--json", cht_json, "Print the full result as JSON");
  cht_ops->add_option("--requests", cht_options.requests, "Number of prompts")
      ->capture_default_str()
      ->check(CLI::Range(1u, kMaxCount));
  cht_ops->add_option("--prompt-tokens", cht_options.prompt_tokens, "Tokens per prompt")
      ->capture_default_str()
      ->check(CLI::Range(1u, kMaxCount));
  cht_ops
      ->add_option("--prefix-tokens", cht_options.prefix_tokens,
                   "Tokens of each prompt shared within its group (<= --prompt-tokens)")
      ->capture_default_str()
      ->check(CLI::Range(0u, kMaxCount));
  cht_ops->add_option("--groups", cht_options.groups, "Number of prefix groups")
      ->capture_default_str()
      ->check(CLI::Range(1u, kMaxCount));
  cht_ops->add_option("--chunk-tokens", cht_options.chunk_tokens, "CHT chunk size K in tokens")
      ->capture_default_str()
      ->check(CLI::Range(1u, kMaxCount));
  cht_ops->add_option("--max-batch", cht_options.max_batch, "Requests per batch at most")
      ->capture_default_str()
      ->check(CLI::Range(1u, kMaxCount));
  cht_ops->add_option("--seed", cht_options.seed, "Random seed")->capture_default_str();

  SchedOverheadOptions sched_options;
  bool sched_json = false;
  CLI::App* sched = bench->add_subcommand(
      "sched-overhead", "CPU time of one scheduling round per selector (paper's overhead figure)");
  sched->add_flag("--json", sched_json, "Print the result rows as JSON");
  sched->add_option("--selectors", sched_options.selectors, "Comma-separated selectors to time")
      ->delimiter(',')
      ->capture_default_str()
      ->check(CLI::IsMember(SchedOverheadOptions{}.selectors));
  sched
      ->add_option("--prefix-tokens", sched_options.prefix_tokens,
                   "Comma-separated shared-prefix lengths in tokens")
      ->delimiter(',')
      ->capture_default_str()
      ->check(CLI::Range(0u, kMaxCount));
  sched->add_option("--waiting", sched_options.waiting, "Comma-separated waiting-queue sizes")
      ->delimiter(',')
      ->capture_default_str()
      ->check(CLI::Range(1u, kMaxCount));
  sched->add_option("--suffix-tokens", sched_options.suffix_tokens, "Unique tokens per prompt")
      ->capture_default_str()
      ->check(CLI::Range(0u, kMaxCount));
  sched->add_option("--groups", sched_options.groups, "Number of prefix groups")
      ->capture_default_str()
      ->check(CLI::Range(1u, kMaxCount));
  sched->add_option("--max-batch", sched_options.max_batch, "Requests per batch at most")
      ->capture_default_str()
      ->check(CLI::Range(1u, kMaxCount));
  sched->add_option("--repetitions", sched_options.repetitions, "Rounds timed per point")
      ->capture_default_str()
      ->check(CLI::Range(1u, kMaxCount));
  sched->add_option("--seed", sched_options.seed, "Random seed")->capture_default_str();

  // feather run, feather pretrain
  RunCommandOptions run_options;
  CLI::App* run = app.add_subcommand(
      "run", "Simulate a scenario; write DIR/summary.json and DIR/results.h5");
  run->add_option("scenario", run_options.scenario_path,
                  "Scenario YAML (default: the built-in scenarios/default.yaml)")
      ->check(CLI::ExistingFile);
  run->add_option("--out", run_options.out_dir, "Output directory (default: out/<scenario name>)");
  run->add_option("--set", run_options.overrides, "Override a scenario key: key=value (repeatable)")
      ->allow_extra_args(false);
  run->add_flag("--json", run_options.json, "Print summary.json instead of a table");

  PretrainCommandOptions pretrain_options;
  CLI::App* pretrain = app.add_subcommand(
      "pretrain", "Train the scenario's stop policy in simulation and save it");
  pretrain->add_option("scenario", pretrain_options.scenario_path, "Scenario YAML")
      ->required()
      ->check(CLI::ExistingFile);
  pretrain->add_option("--steps", pretrain_options.steps, "Engine steps to train for")
      ->required()
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 40));
  pretrain->add_option("--out", pretrain_options.out_file, "Policy file to write (JSON)")
      ->required();
  pretrain->add_option("--set", pretrain_options.overrides, "Override a scenario key: key=value")
      ->allow_extra_args(false);
  pretrain
      ->add_option("--keep", pretrain_options.keep,
                   "Table to save: best (the epoch whose frozen run on a held-out workload was "
                   "fastest) or last")
      ->check(CLI::IsMember({"best", "last"}))
      ->capture_default_str();
  pretrain
      ->add_option("--held-out", pretrain_options.held_out,
                   "With --keep best: held-out workloads each epoch's frozen table runs on; the "
                   "best mean throughput wins")
      ->check(CLI::Range(uint32_t{1}, uint32_t{64}))
      ->capture_default_str();

  // feather sweep, feather plot, feather trace-stats (cli/sweep_command.h, plot_command.h,
  // trace_stats.h)
  SweepCommandOptions sweep_options;
  sweep_options.command.assign(argv, argv + argc);
  CLI::App* sweep = app.add_subcommand(
      "sweep", "Run a sweep file's points in parallel (resumable, sharded); write its table");
  sweep->add_option("sweep", sweep_options.sweep_file, "Sweep YAML (scenarios/sweeps/README.md)")
      ->check(CLI::ExistingFile);
  sweep->add_option("--out", sweep_options.out_dir, "Output folder (default: out/sweeps/<name>)");
  sweep->add_option("--jobs,-j", sweep_options.jobs, "Points run at once (default: usable CPUs)")
      ->check(CLI::Range(1u, 4096u));
  sweep->add_option("--shard", sweep_options.shard,
                    "Run every N-th point starting with the K-th: K/N (Slurm arrays, parallel)");
  sweep->add_flag("--list", sweep_options.list, "Print this shard's points and run nothing");
  sweep->add_option("--set", sweep_options.sets,
                    "Override a scenario key in every point, after the file's values: key=value "
                    "(repeatable)")
      ->allow_extra_args(false);
  sweep->add_option("--merge", sweep_options.merge_dirs,
                    "Gather DIR's points (and SHARD_DIRs') into DIR/table.{csv,h5}")
      ->expected(1, -1);

  PlotCommandOptions plot_options;
  CLI::App* plot = app.add_subcommand(
      "plot", "Draw a sweep's figures (PNG + SVG) and index.md with scripts/plot_sweep.py");
  plot->add_option("dirs", plot_options.dirs, "Sweep output folders")->required();
  plot->add_option("--out", plot_options.out_dir, "Figure folder (default: DIR/figures)");
  plot->add_option("--python", plot_options.python, "Python 3 with matplotlib");

  TraceStatsCommandOptions trace_stats_options;
  CLI::App* trace_stats = app.add_subcommand(
      "trace-stats", "Requests, rate over time, lengths and prefix sharing of a trace");
  trace_stats->add_option("trace", trace_stats_options.trace_path, "Mooncake JSONL trace")
      ->required()
      ->check(CLI::ExistingFile);
  trace_stats->add_flag("--json", trace_stats_options.json, "Print as JSON");
  trace_stats
      ->add_option("--block-tokens", trace_stats_options.stats.block_tokens,
                   "Tokens per hash block")
      ->capture_default_str()
      ->check(CLI::Range(1u, 1u << 20));
  trace_stats->add_option("--limit", trace_stats_options.stats.limit, "First N records (0 = all)")
      ->capture_default_str();
  // Checked by TraceStatsCommand, in one line naming --bin-s (CLI11's range check would print
  // DBL_MAX in full).
  trace_stats->add_option("--bin-s", trace_stats_options.bin_s,
                          "Rate-over-time bin in seconds (default: about 20 bins)");

  // feather info, feather version
  bool info_json = false;
  BenchExperimentsOptions experiments_options;
  CLI::App* experiments = bench->add_subcommand(
      "experiments", "The paper's engine experiments 1-6 on the real CPU engine");
  experiments->add_flag("--quick", experiments_options.quick, "Fewer points and repetitions");
  experiments->add_option("--target", experiments_options.target,
                          "cpu (default) or cuda (CUDA engine + CUPTI counters; needs a GPU)");
  experiments->add_option("--out", experiments_options.out_dir,
                          "Output directory (default: out/experiments)");
  experiments->add_option("--model", experiments_options.model,
                          "Model the engine runs (built-in name or file; default cpu-small)");
  experiments->add_option("--threads", experiments_options.threads,
                          "Threads (default: every CPU this process may use)")
      ->check(CLI::Range(1, 1024));

  CalibrateCommandOptions calibrate_options;
  CLI::App* calibrate = app.add_subcommand(
      "calibrate", "Measure this machine's kernels and fit a cost-model profile");
  CLI::Option* target_option =
      calibrate->add_option("--target", calibrate_options.target,
                            "cpu, or cuda (needs a GPU and a passed `feather selfcheck`)");
  CLI::Option* refit_option =
      calibrate->add_option("--refit", calibrate_options.refit_rows,
                            "Fit stored rows instead of measuring: PROFILE-rows.csv files, Vidur "
                            "mlp.csv tables, decode-attention points, ratio rows "
                            "(calib/published_rows.h)")
          ->check(CLI::ExistingFile)
          ->expected(1, -1);
  target_option->excludes(refit_option);
  calibrate->add_option("--base", calibrate_options.base_profile,
                        "With --refit: the profile whose peaks and provenance to keep (default: "
                        "X.yaml beside X-rows.csv)")
      ->needs(refit_option);
  calibrate->add_option("--tp", calibrate_options.tensor_parallel,
                        "With --refit of Vidur tables: the tensor-parallel degree to fit")
      ->check(CLI::Range(1, 1024))
      ->needs(refit_option);
  calibrate->add_option("--fit-ratios", calibrate_options.fit_ratios,
                        "With --refit of ratio rows: profile parameters to fit jointly to the "
                        "rows of the base profile's device (calib/ratio_fit.h), comma-separated")
      ->delimiter(',')
      ->needs(refit_option);
  calibrate->add_option("--hold", calibrate_options.hold,
                        "Profile parameters the fit keeps at the base profile's values, "
                        "comma-separated (e.g. prefill_query_fixed_ns: the model before it)")
      ->delimiter(',');
  calibrate->add_option("--ratio-rows", calibrate_options.ratio_rows,
                        "With --fit-ratios: the ids of the ratio rows to fit (default: every row "
                        "of the base profile's device); the others are checked only")
      ->delimiter(',')
      ->needs(refit_option);
  calibrate->add_flag("--quick", calibrate_options.quick,
                      "A smaller grid, the same probes (about 1 minute; for CI)");
  calibrate->add_flag("--primed", calibrate_options.primed,
                      "Time each grid point right after an untimed run of itself, and write the "
                      "untimed runs' rows too (twice the grid's time; compares the two orders)");
  calibrate->add_option("--out", calibrate_options.out_path,
                        "Profile to write (default: out/calibrate/cpu[-quick].yaml)");
  calibrate->add_option("--model", calibrate_options.model,
                        "Model the engine runs (built-in name or file; default cpu-small)");
  CLI::Option* block_option =
      calibrate
          ->add_option("--block-tokens", calibrate_options.block_tokens,
                       "Tokens per KV page of the engines timed (default 16; the scenarios' "
                       "serving.block_tokens; a live cpu calibration only)")
          ->check(CLI::Range(1, 4096));
  block_option->excludes(refit_option);
  calibrate->add_option("--threads", calibrate_options.threads,
                        "Threads (default: every CPU this process may use)")
      ->check(CLI::Range(1, 1024));

  calibrate->add_option("--stamp", calibrate_options.selfcheck_stamp,
                        "With --target cuda: the self-check stamp (default "
                        "out/selfcheck/cuda.json)");

  SelfcheckCommandOptions selfcheck_options;
  CLI::App* selfcheck = app.add_subcommand(
      "selfcheck", "Check every CUDA kernel against the CPU and the probes against the datasheet");
  selfcheck->add_option("--target", selfcheck_options.target, "cuda")->required();
  selfcheck->add_option("--stamp", selfcheck_options.stamp_path,
                        "Where to write the stamp calibrate --target cuda requires (default "
                        "out/selfcheck/cuda.json)");

  ValidateCommandOptions validate_options;
  CLI::App* validate = app.add_subcommand(
      "validate", "Run a scenario on a real engine (cpu or cuda) and on the model; compare");
  validate->add_option("scenario", validate_options.scenario_path, "Scenario YAML")
      ->required()
      ->check(CLI::ExistingFile);
  validate->add_option("--profile", validate_options.profile_path,
                       "Profile the model engine prices with (built-in name or file)")
      ->required();
  validate->add_option("--out", validate_options.out_dir,
                       "Output directory (default: out/validate/<scenario name>)");
  validate->add_option("--set", validate_options.overrides,
                       "Override a scenario key: key=value (repeatable)")
      ->allow_extra_args(false);
  validate->add_option("--repeat", validate_options.repeat,
                       "Measured runs on the real engine, and model runs with step-time noise "
                       "drawn from the profile's step_noise section (N >= 2); the metrics compare "
                       "the measured mean with the predicted interval")
      ->check(CLI::PositiveNumber);
  validate->add_option("--model-repeat", validate_options.model_repeat,
                       "Noisy model runs (default: --repeat); they are cheap, more give a "
                       "steadier interval")
      ->check(CLI::NonNegativeNumber);
  validate->add_flag("--json", validate_options.json, "Print validation.json instead of a table");
  validate->add_option("--engine", validate_options.engine,
                       "The real engine: cpu (default) or cuda (needs a GPU)");
  validate->add_flag("--allow-foreign-profile", validate_options.allow_foreign_profile,
                     "Use a profile calibrated on another machine (refused otherwise)");
  validate->add_flag("!--no-host-probes", validate_options.host_probes,
                     "Skip the DRAM and GEMM probes taken around the measured runs");

  CLI::App* info = app.add_subcommand("info", "Host and build provenance");
  info->add_flag("--json", info_json, "Print as JSON");
  CLI::App* version = app.add_subcommand("version", "Print the feather version and build");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    const int code = app.exit(error);  // help to stdout (code 0), errors to stderr
    return code == 0 ? 0 : kExitUsage;
  }

  if (cht_ops->parsed()) return RunBenchChtOps(cht_options, cht_json);
  if (sched->parsed()) return RunBenchSchedOverhead(sched_options, sched_json);
  if (experiments->parsed()) return BenchExperimentsCommand(experiments_options, std::cout);
  if (run->parsed()) return RunScenarioCommand(run_options, std::cout);
  if (sweep->parsed()) return SweepCommand(sweep_options, std::cout);
  if (plot->parsed()) return PlotCommand(plot_options, std::cout);
  if (trace_stats->parsed()) return TraceStatsCommand(trace_stats_options, std::cout);
  if (pretrain->parsed()) return PretrainCommand(pretrain_options, std::cout);
  if (calibrate->parsed()) {
    if (target_option->count() == 0 && calibrate_options.refit_rows.empty()) {
      std::cerr << "feather calibrate: --target cpu (measure this machine) or --refit ROWS... "
                   "(fit stored rows) is required\n";
      return kExitUsage;
    }
    return CalibrateCommand(calibrate_options, std::cout);
  }
  if (validate->parsed()) return ValidateCommand(validate_options, std::cout);
  if (selfcheck->parsed()) return SelfcheckCommand(selfcheck_options, std::cout);
  if (info->parsed()) return RunInfo(info_json);
  if (version->parsed()) return RunVersion();
  // app.help() shows the help of the deepest subcommand given ("feather bench" here).
  std::cerr << (bench->parsed() ? "feather bench" : "feather") << ": a subcommand is required\n\n"
            << app.help();
  return kExitUsage;
}

}  // namespace
}  // namespace feather

int main(int argc, char** argv) {
  try {
    return feather::Main(argc, argv);
  } catch (const std::exception& error) {
    std::cout.flush();
    std::cerr << "feather: error: " << error.what() << '\n';
  } catch (...) {
    std::cout.flush();
    std::cerr << "feather: error: unknown exception\n";
  }
  return feather::kExitUsage;
}
