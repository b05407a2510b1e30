// validate_command.h: `feather validate`, the check of the cost model against real execution.
//
//   feather validate SCENARIO.yaml --profile PROFILE.yaml [--out DIR] [--repeat N]
//                    [--set key=value]...
//
// Runs the scenario with the same workload, selector and stop policy on the real CPU engine
// (`engine: cpu`, wall-clock step times: "measured"), N times (default 1), and once on the model
// engine priced with PROFILE ("predicted"). All runs size the KV pool from PROFILE, so they
// schedule against the same memory. Writes DIR/measured/ (N = 1) or DIR/measured-1/ ..
// DIR/measured-N/, and DIR/predicted/ (each a complete run directory: summary.json,
// results.h5), then DIR/validation.json:
//   {"metrics": {"throughput_tok_s": {"measured": …, "predicted": …, "rel_error": …,
//                                     "signed_error": …, "measured_runs": […],
//                                     "measured_spread": …},
//                "mean_tbt_ms": {…}, "p99_tbt_ms": {…}, "mean_batch_size": {…}, "mean_ttft_ms": {…}},
//    "same_plans": {…}, "scenario": …, "profile": …, "overrides": […],
//    "runs": {"measured": [dir names], "predicted": "predicted"}, "provenance": {…}}
// measured = the mean of the N runs; rel_error = |predicted − measured| / measured (a
// fraction); signed_error keeps the sign; measured_spread = (max − min) / mean of the runs, the
// run-to-run noise an error should be read against (0 for one run). "same_plans" prices every
// step the real engines executed with the model as well (the plans are identical, so the
// scheduling path cannot diverge), summed over the N runs: step-time MAPE and the engine time
// by term, measured against predicted. The end-to-end metrics can differ more than the per-step
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
  int repeat = 1;  // measured runs on the real engine
  bool json = false;  // print validation.json instead of a table
  // A profile measured on another machine (hw/foreign_host.h, with a read-bandwidth probe of
  // this one) is refused unless this is set; then it is used and validation.json says so.
  bool allow_foreign_profile = false;
  // The real engine the model is compared with: "cpu" or "cuda" (exits 2 with one line when
  // there is no CUDA device).
  std::string engine = "cpu";
};

// Returns the exit code. Throws InputError for bad input (the caller prints it).
int ValidateCommand(const ValidateCommandOptions& options, std::ostream& out);

}  // namespace feather
