// validate_command.h: `feather validate`, the check of the cost model against real execution.
//
//   feather validate SCENARIO.yaml --profile PROFILE.yaml [--out DIR] [--repeat N]
//                    [--model-repeat M] [--no-host-probes] [--set key=value]...
//
// Runs the scenario with the same workload, selector and stop policy on the real CPU engine
// (`engine: cpu`, wall-clock step times: "measured") N times (default 1); once on the model
// engine priced with PROFILE without noise ("predicted", the point prediction); and, when the
// profile has a `step_noise` section (written by `feather calibrate`) and M >= 2 (M defaults
// to N), M times with seeded step-time noise drawn from it (seeds 1..M,
// sim/engine/step_noise.h: "predicted-noise-K"), which gives the predicted spread of each
// metric. All runs size the KV pool from PROFILE, so they schedule against the same memory.
// Writes DIR/measured/ (N = 1) or DIR/measured-1/ .. DIR/measured-N/, DIR/predicted/ and
// DIR/predicted-noise-K/ (each a complete run directory: summary.json, results.h5), then
// DIR/same-plan-rows.csv and DIR/validation.json:
//   {"metrics": {"throughput_tok_s": {…}, "mean_tbt_ms": {…}, "p99_tbt_ms": {…},
//                "mean_batch_size": {…}, "mean_ttft_ms": {…}},
//    "verdict": {"pass": bool, "failed": [metric names]},
//    "same_plans": {…, "rows": "same-plan-rows.csv"}, "scenario": …, "profile": …,
//    "profile_host_check": …, "host_probes": {…} or why none were taken, "overrides": […],
//    "runs": {"measured": [dir names], "predicted": "predicted", "predicted_noise": [names]},
//    "provenance": {…}}
// Each metric's fields and its verdict (measured mean inside the predicted interval, or its
// error within the target: throughput 5 %, mean TBT 10 %) are CompareMetric's
// (cli/validation_report.h). "same_plans" prices every step the real engines executed with the
// model as well (the plans are identical, so the scheduling path cannot diverge), summed over
// the N runs: step-time MAPE, each term's share of the error, and the error by kind of step
// (SamePlanComparison); same-plan-rows.csv holds those steps in the calibration rows' format
// (calib/rows_csv.h; predicted_total_ns priced by PROFILE), to compare with PROFILE-rows.csv or
// to refit (`feather calibrate --refit DIR/same-plan-rows.csv --base PROFILE.yaml --out ...`).
// The end-to-end metrics can differ more than the per-step error when the runs take different
// scheduling decisions (a learning stop policy rewarded by measured, noisy step times): that is
// what the noisy model runs reproduce.
// "host_probes" (CPU engine, unless --no-host-probes): the machine's DRAM read and peak GEMM
// probes (the settings the profile's calibration used: "settings", full or quick) before each
// measured run and after the last, with their
// ratios to the figures the profile recorded and the range of each ratio: a miss that comes with
// a GEMM peak ratio far from 1 says the machine moved since calibration, not the model. With them
// the step probe: four calibration-grid steps run on the CPU engine, measured over priced
// (step_ratio, step_gemm_ratio, and small_step_ratio for its step of at most 8 tokens).
// Default DIR: out/validate/<scenario name>. SIGINT/SIGTERM: finished run directories stay,
// validation.json is written only when every run finished; exit 130 / 143.
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
  // Model runs with step-time noise (sim/engine/step_noise.h); 0 = `repeat`. Runs only when the
  // profile has a step_noise section and the count is at least 2.
  int model_repeat = 0;
  bool json = false;  // print validation.json instead of a table
  // A profile measured on another machine (hw/foreign_host.h, with a read-bandwidth probe of
  // this one) is refused unless this is set; then it is used and validation.json says so.
  bool allow_foreign_profile = false;
  // Probe the host (DRAM read, peak GEMM) before each measured run and after the last, and
  // report the ratios to the profile's probes ("host_probes"); off: --no-host-probes.
  bool host_probes = true;
  // The real engine the model is compared with: "cpu" or "cuda" (exits 2 with one line when
  // there is no CUDA device).
  std::string engine = "cpu";
};

// Returns the exit code. Throws InputError for bad input (the caller prints it).
int ValidateCommand(const ValidateCommandOptions& options, std::ostream& out);

}  // namespace feather
