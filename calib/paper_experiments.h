// paper_experiments.h: the decode batches of the paper's §3 motivation experiments (Exps 1–6),
// built as a paged KV cache would hold them, and their measurement on any pair of engines.
//
// Each ExperimentPoint is one decode batch (hw::SyntheticBatch: block tables whose shared
// segments are the same physical blocks, ids drawn from a shuffled pool of `pool` blocks, request
// order shuffled) and the value the experiment sweeps:
//   exp1  64 requests on two 2,048-token prefixes, a fraction f on prefix A (64, 63, 48, 32 of 64)
//   exp2  64 requests of 2,048-token contexts, a fraction shared by all (0 .. 2,048 tokens)
//   exp3  100 requests in N groups of 1,024-token prefixes, 20-token suffixes
//   exp4  64 requests over the leaves of a binary radix tree of 1–4 levels over 2,048 tokens
//   exp5  batch size 1–128, one group or five, 1,024-token prefixes
//   exp6  256 requests in 8 groups decoded as k batches of 256 / k (groups kept together)
// `quick` keeps fewer points of exp3 and exp5. The batches are deterministic (fixed seeds).
//
// MeasureExperiments runs every point with cascade attention off (engines[0]) and on
// (engines[1]) through the harness (harness.h), the two settings of a point side by side in
// interleaved passes, so the ratios the experiments are about compare steps taken at nearly the
// same moment. It is engine-agnostic: `feather bench experiments` passes two CPU engines today.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "calib/harness.h"
#include "hw/synthetic_batch.h"
#include "sim/engine/engine.h"
#include "sim/engine/model_config.h"

namespace feather::calib {

inline constexpr uint32_t kExperimentBlockTokens = 16;

struct ExperimentPoint {
  std::string experiment;  // exp1 .. exp6
  std::string variant;     // what distinguishes the point within its experiment
  double x = 0;            // the swept variable
  hw::SyntheticBatch batch;
  double batches = 1;  // exp6: how many such batches the workload needs
};

// Every point of Exps 1–6 (file comment), their blocks numbered within a pool of `pool` blocks.
[[nodiscard]] std::vector<ExperimentPoint> PaperExperiments(bool quick, uint64_t pool);

// [point][cascade off, on] measurements, `repetitions` timed passes each; `parallel_units` is the
// engines' threads (CPU) or SMs (GPU) for vLLM's cascade rule.
[[nodiscard]] std::vector<StepMeasurement> MeasureExperiments(
    std::span<const ExperimentPoint> points, Engine* const engines[2], uint32_t parallel_units,
    const ModelConfig& model, int repetitions);

}  // namespace feather::calib
