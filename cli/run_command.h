// run_command.h: the `feather run` and `feather pretrain` drivers.
//
//   feather run [SCENARIO.yaml] [--out DIR] [--set key=value]...
//     Runs the scenario (the built-in default when no file is given) and writes DIR/summary.json
//     and DIR/results.h5 atomically (default DIR: out/<scenario name>). Prints the headline
//     metrics; progress goes to stderr when it is a terminal. DIR is checked before simulating
//     (sim/io/run_output.h PrepareOutputDir): an existing DIR is replaced only when it holds an
//     earlier feather run or nothing; temps a killed run left next to it are removed.
//   feather pretrain SCENARIO.yaml --steps N --out FILE [--set key=value]...
//     Trains the scenario's stop policy for N engine steps (the workload is regenerated with the
//     next seed whenever it runs out) and saves it to FILE, for `scheduler.policy.load`.
//
// SIGINT / SIGTERM (cli/interrupt.h) stop either command at the next safe point (between stages,
// after every serving-loop step): no partial output is left, an existing output
// directory or policy file is untouched, one line goes to stderr and the exit code is 130 / 143.
// A signal that arrives once the outputs are being installed lets them finish (they are
// complete) and still exits 130 / 143.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

namespace feather {

struct RunCommandOptions {
  std::string scenario_path;  // empty: the built-in scenarios/default.yaml
  std::vector<std::string> overrides;
  std::string out_dir;  // empty: out/<scenario name>
  bool json = false;    // print the summary as JSON instead of a table
};

// Returns the process exit code. Throws InputError for bad input (the caller prints it).
int RunScenarioCommand(const RunCommandOptions& options, std::ostream& out);

// A time for a person, as every time line of the text summary prints it: milliseconds below
// 10 s, seconds from there, two decimals ("310.50 ms", "2889.53 s").
[[nodiscard]] std::string FormatTime(double ms);

// `feather pretrain`: trains the scenario's stop policy over successive workloads (epoch e runs
// the workload of seed + e) until `steps` engine steps, and saves one table. After each epoch a
// frozen copy of the table runs greedily on `held_out` held-out workloads (seeds
// seed + kHoldOutSeedOffset + i, i < held_out, the same for every epoch; a trace replay has only
// its trace, so there it is the training data, once). keep = "best" saves the table whose
// held-out runs had the highest mean throughput (the earliest on ties), "last" the final one.
// More than one held-out workload: an epoch kept on one workload's figure can be that
// workload's luck (the hold option's tables, policies/qlearning_policy.h: kept at 4,703 tok/s
// on its held-out workload, 4,477 on the scenario's own seed). Why: a learning policy's table moves
// on after it was good (an ε-greedy step late in training can tip the greedy choice of a whole
// state), and the frozen policy is what a pretrained run uses; selecting on a workload the training
// did not see keeps the choice honest.
struct PretrainCommandOptions {
  static constexpr uint64_t kHoldOutSeedOffset = 1'000'003;
  std::string scenario_path;
  std::vector<std::string> overrides;
  uint64_t steps = 0;
  std::string out_file;
  std::string keep = "best";  // "best" | "last"
  uint32_t held_out = 1;      // held-out workloads per epoch (keep = "best")
};

int PretrainCommand(const PretrainCommandOptions& options, std::ostream& out);

}  // namespace feather
