// calibrate_command.h: `feather calibrate`, which measures this machine and fits a profile.
//
//   feather calibrate --target cpu [--quick] [--out PROFILE.yaml] [--model NAME|FILE]
//                     [--threads N] [--json]
//
// 1. Probes: read bandwidth from DRAM (arrays ≫ LLC) → dram_bw_bytes_per_s, read bandwidth of
//    an LLC-resident array → the starting l2_bw_bytes_per_s, peak GEMM FLOP/s of the engine's
//    GEMM backend → dense_flops_per_s, threads → sm_count (the "SMs" of vLLM's cascade rule).
// 2. Rows: a grid of synthetic steps (hw/synthetic_batch.h) — decode batches of 1 to 128
//    requests over private or shared contexts (1 to 20 prefix groups, grouped or shuffled,
//    cascade on and off), prefill chunks after cached contexts, and mixed steps — executed on the
//    real CPU engine (hw/cpu_engine.h) with the calibration model, each the median of several
//    repetitions after a warm-up. Quick mode runs a subset with fewer repetitions (≤ 3 minutes
//    with the probes); full mode the whole grid (≤ 30 minutes).
// 3. Fit (calib/fit.h): every term on its own measured time; every 5th row held out.
// Writes PROFILE.yaml (default out/calibrate/cpu.yaml; `source: measured` per fitted field,
// `measured_on` and `fit` sections) and PROFILE's rows beside it (PROFILE-rows.csv: one row per
// step: shape, measured terms, predicted total), both atomically. `--target cuda` is issue 7.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>

namespace feather {

struct CalibrateCommandOptions {
  std::string target = "cpu";
  bool quick = false;
  std::string out_path;              // empty: out/calibrate/<target>[-quick].yaml
  std::string model = "cpu-small";   // a built-in model name or a model file
  int threads = 0;                   // 0: every CPU this process may use
};

// Returns the exit code; throws InputError / std::invalid_argument for bad options.
int CalibrateCommand(const CalibrateCommandOptions& options, std::ostream& out);

}  // namespace feather
