// harness.h: measuring steps on real engines, engine-agnostic: the part of calibration and of the
// engine experiments that runs plans and collects timed rows, written against the Engine
// interface (sim/engine/engine.h) so that the CPU engine today and a CUDA engine next plug in the
// same way.
//
// A MeasuredEngine is an Engine plus the two facts ShapeStep needs to name the shape the engine
// runs (its cascade switch and its parallel units: threads on the CPU, SMs on a GPU), so every
// row carries the StepShape the cost model prices, whatever the engine. MeasureSteps runs every
// step in interleaved passes (hw/interleaved_passes.h: one warm-up pass, then R passes in
// alternating direction, so slow drift of the machine reaches every step alike; with `primed`,
// each timed run right after an untimed run of the same step) and keeps, per
// step, the median repetition whole (its terms consistent with its total), the spread of the
// repetitions (and the repetitions themselves, for StepNoiseOf: the per-term noise a validation
// draws from) and, when asked, perf counters averaged over the timed passes. The warm-up pass
// checks that the engine's cascade decision is the shape's (a broken invariant aborts).
//
// The rows (MeasuredStep) are what calib/fit.h fits and calib/rows_csv.h writes: the CSV
// `feather calibrate` writes beside a profile and `feather calibrate --refit ROWS` reads back.
//
// Cost: (R + 1) · Σ step times (primed: 2R + 1), plus one ShapeStep per step.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "hw/perf_counters.h"
#include "sim/engine/device_profile.h"
#include "sim/engine/engine.h"
#include "sim/engine/model_config.h"
#include "sim/engine/model_engine.h"

namespace feather::calib {

struct MeasuredEngine {
  Engine* engine = nullptr;
  bool cascade_attention = true;  // the engine's cascade switch, as ShapeStep takes it
  uint32_t sm_count = 1;          // its parallel units for vLLM's cascade rule
};

struct HarnessStep {
  const BatchPlan* plan = nullptr;  // must outlive MeasureSteps
  size_t engine = 0;                // index into the engines
};

struct HarnessOptions {
  int repetitions = 5;          // timed passes, ≥ 1 (after one warm-up pass)
  bool perf_counters = false;   // count cycles, LLC loads and misses around every timed step
  // Run every step once, untimed, right before each of its timed runs, so that each row is timed
  // after a step like itself, as a serving loop runs its steps (consecutive steps differ by a
  // token or a request). Without it a row is timed after the previous step of the pass, some
  // other shape: on the 2-vCPU Zen 5 VM (2026-11-29) a one-request decode step of cpu-small took
  // 4.99 ms after itself, 5.32 ms after a 128-request decode step and 5.86 ms after a 512-token
  // prefill chunk, all of it in the gemm term (cpu_engine_benchmark BM_StepAfter); over the
  // calibration grid, whose predecessors are mostly small steps, the median row moved 0.3-2 %.
  // Doubles the cost of the timed passes.
  bool primed = false;
  // Called after every executed step (e.g. an interrupt check that throws) and after every pass
  // (progress); either may be empty.
  std::function<void()> after_step;
  std::function<void(int pass)> after_pass;
};

struct StepMeasurement {
  MeasuredStep row;     // the shape and the median repetition's timing
  double spread = 0;    // (max − min) / median of the repetitions' totals
  std::vector<StepTiming> repetitions;  // every timed repetition, in pass order
  // With HarnessOptions::primed: the priming runs' timings, in pass order (each the step timed
  // right after the previous step of its pass, some other shape): the unprimed rows measured in
  // the same passes, so the two orders compare at the same moment. Empty otherwise.
  std::vector<StepTiming> unprimed;
  hw::PerfCounts counts;  // per step, averaged over the timed passes; empty unless asked
};

// Measures every step on its engine (file comment). `model` is the engines' model.
[[nodiscard]] std::vector<StepMeasurement> MeasureSteps(std::span<const MeasuredEngine> engines,
                                                        std::span<const HarnessStep> steps,
                                                        const ModelConfig& model,
                                                        const HarnessOptions& options);

// The repetitions' spread per term, pooled over the steps: the profile's `step_noise` section
// (sim/engine/device_profile.h says how it is computed), source `measured`, with `note`. A term
// no step spent time in is left out. O(steps · repetitions · log).
[[nodiscard]] ProfileStepNoise StepNoiseOf(std::span<const StepMeasurement> measurements,
                                           std::string note);

// The rows alone, in step order.
[[nodiscard]] std::vector<MeasuredStep> RowsOf(std::span<const StepMeasurement> measurements);

// The rows of the priming runs (StepMeasurement::unprimed: each the median of its step's priming
// runs by total), in step order; empty unless every measurement has them.
[[nodiscard]] std::vector<MeasuredStep> UnprimedRowsOf(
    std::span<const StepMeasurement> measurements);

}  // namespace feather::calib
