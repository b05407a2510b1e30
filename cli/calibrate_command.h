// calibrate_command.h: `feather calibrate`, which measures this machine and fits a profile.
//
//   feather calibrate --target cpu [--quick] [--primed] [--out PROFILE.yaml]
//                     [--model NAME|FILE] [--threads N] [--json]
//
// 1. Probes: read bandwidth from DRAM (arrays ≫ LLC; read again after every timed pass of the
//    grid, the fastest read kept) → dram_bw_bytes_per_s, read bandwidth of an array of the
//    model's step weights (the same) → weight_stream_bw_bytes_per_s, read bandwidth of
//    an LLC-resident array → the starting l2_bw_bytes_per_s, peak GEMM FLOP/s of the engine's
//    GEMM backend → dense_flops_per_s, threads → sm_count (the "SMs" of vLLM's cascade rule).
// 2. Rows: a grid of synthetic steps (hw/synthetic_batch.h) — decode batches of 1 to 128
//    requests over private or shared contexts (1 to 20 prefix groups, grouped or shuffled,
//    cascade on and off), prefill chunks after cached contexts, and mixed steps — executed on the
//    real CPU engine (hw/cpu_engine.h) with the calibration model, each the median of several
//    repetitions after a warm-up (--primed: each repetition right after an untimed run of the
//    same step). Quick mode runs a subset with fewer repetitions
//    (≤ 3 minutes with the probes); full mode the whole grid (≤ 30 minutes).
// 3. Fit (calib/fit.h): every term on its own measured time; every 5th row held out.
// Writes PROFILE.yaml (default out/calibrate/cpu.yaml; `source: measured` per fitted field,
// `measured_on` and `fit` sections) and PROFILE's rows beside it (PROFILE-rows.csv, format in
// calib/rows_csv.h: one row per step: shape, measured terms, predicted total), both atomically,
// with every timed repetition (PROFILE-passes.csv) and, with --primed, the priming runs' rows
// (PROFILE-unprimed-rows.csv: the grid timed after the previous grid point, in the same passes;
// the printed "step order" line says what the order changed).
//
//   feather calibrate --target cuda [--quick] [--out PROFILE.yaml] [--model M] [--stamp PATH]
//
// The same on the GPU (calib/cuda_calibration.h): exits 2 with one line when there is no CUDA
// device (or the build has no CUDA), and refuses until `feather selfcheck --target cuda` has
// passed on this device and build (its stamp, default out/selfcheck/cuda.json). Compiled, never
// run: no GPU has been available to this project.
//
//   feather calibrate --refit ROWS.csv... --out PROFILE.yaml [--base BASE.yaml] [--model M]
//
// Step 3 alone, on stored rows: the same fit and hold-out split (by row position over the files
// in order) with BASE's peaks, capacity and measured_on; writes PROFILE.yaml and
// PROFILE-rows.csv. Nothing is measured, so it runs anywhere in well under a second.
// ROWS may also be published data (calib/published_rows.h), told apart by their first line:
// Vidur mlp.csv tables (--tp N picks the degree; the fit model is their per-GPU one-layer
// shard), decode-attention points (restated in the fit model), ratio rows (checked against the
// fitted profile, or the base when nothing else is given, and printed; then no profile is
// written). Parameters fitted to published rows are `source: published`. Calibration rows and
// published rows are refused together (different devices and models).
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

namespace feather {

struct CalibrateCommandOptions {
  std::string target = "cpu";
  bool quick = false;
  // --primed: time each grid point right after an untimed run of itself (calib/harness.h
  // HarnessOptions::primed; measured_on.row_order: primed), and write the untimed runs' rows too
  // (PROFILE-unprimed-rows.csv), measured in the same passes, with a line comparing the two
  // orders. Twice the grid's time. Off: each point timed after the previous one (interleaved).
  // On the 2-vCPU Zen 5 VM the order moved the median row by 0.3-2 % (2026-11-29,
  // results/validation/issue-20-primed), so the default stays the cheaper order.
  bool primed = false;
  std::string out_path;              // empty: out/calibrate/<target>[-quick].yaml
  std::string model = "cpu-small";   // a built-in model name or a model file
  int threads = 0;                   // 0: every CPU this process may use
  // --block-tokens: tokens per KV page of the engines the grid runs on (measured_on.block_tokens),
  // the page size of the scenarios the profile is to price (serving.block_tokens): the kernels'
  // scattered walk reads longer pages faster (hw/README.md, "Page size"). 16 = vLLM's GPU default
  // and every shipped scenario's; vLLM's CPU backend defaults to 128. Live CPU calibration only.
  uint32_t block_tokens = 16;
  // --refit ROWS...: fit stored rows (calib/rows_csv.h) instead of measuring; the peaks and
  // provenance come from --base (default: the profile beside the first rows file, X.yaml for
  // X-rows.csv). Needs --out.
  std::vector<std::string> refit_rows;
  // --hold a,b,...: profile parameters the fit keeps at the base profile's values
  // (calib/fit.h FitOptions::hold), with a live calibration or --refit. An unknown or
  // never-fitted name is an error.
  std::vector<std::string> hold;
  std::string base_profile;
  // --tp N: with Vidur tables among the --refit files, the tensor-parallel degree whose rows to
  // fit (0: the tables must hold one degree only).
  uint32_t tensor_parallel = 0;
  // --fit-ratios a,b,...: with ratio rows among the --refit files, the profile parameters to fit
  // jointly to the rows of the base profile's device (calib/ratio_fit.h), after the term rows.
  // Empty: ratio rows are checked only.
  std::vector<std::string> fit_ratios;
  // --ratio-rows id,...: with --fit-ratios, fit only these ratio rows (the others are checked).
  std::vector<std::string> ratio_rows;
  // --target cuda: the self-check stamp that must show a pass on this device and build.
  std::string selfcheck_stamp = "out/selfcheck/cuda.json";
};

// Returns the exit code; throws InputError / std::invalid_argument for bad options.
int CalibrateCommand(const CalibrateCommandOptions& options, std::ostream& out);

}  // namespace feather
