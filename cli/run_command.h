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

struct PretrainCommandOptions {
  std::string scenario_path;
  std::vector<std::string> overrides;
  uint64_t steps = 0;
  std::string out_file;
};

int PretrainCommand(const PretrainCommandOptions& options, std::ostream& out);

}  // namespace feather
