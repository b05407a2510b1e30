// validate_command.h: `feather validate`, the check of the cost model against real execution.
//
//   feather validate SCENARIO.yaml --profile PROFILE.yaml [--out DIR] [--set key=value]...
//
// Runs the scenario twice with the same workload, selector and stop policy: on the real CPU
// engine (`engine: cpu`, wall-clock step times: "measured") and on the model engine priced with
// PROFILE ("predicted"). Both runs size the KV pool from PROFILE, so they schedule against the
// same memory. Writes DIR/measured/ and DIR/predicted/ (each a complete run directory:
// summary.json, results.h5) and then DIR/validation.json:
//   {"metrics": {"throughput_tok_s": {"measured": …, "predicted": …, "rel_error": …},
//                "mean_tbt_ms": {…}, "p99_tbt_ms": {…}, "mean_batch_size": {…}, "mean_ttft_ms": {…}},
//    "same_plans": {…}, "scenario": …, "profile": …, "provenance": {…}}
// rel_error = |predicted − measured| / measured (a fraction); signed_error keeps the sign.
// "same_plans" prices every step the real engine executed with the model as well (the plans
// are identical, so the scheduling path cannot diverge): step-time MAPE and the engine time by
// term, measured against predicted. The end-to-end metrics can differ more than the per-step
// error when the two runs take different scheduling decisions (a learning stop policy rewarded
// by measured, noisy step times).
// Default DIR: out/validate/<scenario name>. SIGINT/SIGTERM: finished run directories stay,
// validation.json is written only when both runs finished; exit 130 / 143.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

namespace feather {

struct ValidateCommandOptions {
  std::string scenario_path;
  std::string profile_path;
  std::vector<std::string> overrides;
  std::string out_dir;
  bool json = false;  // print validation.json instead of a table
};

// Returns the exit code. Throws InputError for bad input (the caller prints it).
int ValidateCommand(const ValidateCommandOptions& options, std::ostream& out);

}  // namespace feather
