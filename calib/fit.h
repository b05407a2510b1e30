// fit.h: fits a DeviceProfile to the steps a real engine measured, term by term.
//
// Input: a base profile (capacity and peaks filled from probes, e.g. dram_bw_bytes_per_s from
// STREAM and dense_flops_per_s from a GEMM probe, marked `measured`), the ModelConfig the engine
// ran, and its rows (MeasuredStep: the StepShape and the measured wall-clock ns per term). Output:
// the profile whose StepPricer reproduces the rows, every fitted field marked `measured` with a
// note naming its rows and error, a report per term, and the step-time error on held-out rows.
//
// Each term is fitted on its own measured time (a real engine times the terms apart), minimizing
// the relative error Σ ((predicted − measured) / measured)², so short steps count as much as long
// ones (MAPE is the metric reported):
//   kGemm             gemm_bw_efficiency, gemm_flops_efficiency: the roofline, by
//                     Levenberg–Marquardt in log space from the best point of a grid; then
//                     gemm_roofline_exponent (the soft maximum's k) from six starting values
//                     with the efficiencies refitted, and gemm_batched_fixed_ns from five
//                     starting multiples of the weight-stream time, each kept only if it lowers
//                     the cost (held at the base value for a base whose measured_on says the
//                     engine ran on packed weights: those are never repacked) — all on the rows
//                     the skinny kernel does not take. Then, on the
//                     rows of 2 to gemm_skinny_max_tokens tokens (the base profile's; never
//                     fitted), gemm_skinny_fixed_ns and gemm_skinny_ns_per_token: non-negative
//                     least squares with the fitted weight stream as the fixed part.
//   kDecodeAttention  (+ kKvReuse, which a CPU cannot time apart) attn_bw_efficiency,
//                     decode_cta_fixed_ns (with 3+ rows of 2+ context lengths),
//                     decode_layer_fixed_ns (with 4+ rows of 2+ batch sizes), reuse_hit_max,
//                     reuse_window_ctas, l2_bw_bytes_per_s (LM from a grid over the window with
//                     the DRAM side solved linearly). The reads take max(DRAM, L2): the L2
//                     bandwidth is kept at its base value (e.g. an LLC probe) unless 2+ rows
//                     are bound by L2 under the fitted profile.
//   kPrefillAttention attn_flops_efficiency and prefill_query_fixed_ns (attn_bw_efficiency from
//                     the decode fit): non-negative least squares of the compute side, linear in
//                     1/efficiency and the per-row cost, then LM over both; the row cost needs 3+
//                     rows of different pairs per query token and is 0 when NNLS gives it none
//                     (then the efficiency alone, grid + LM).
//   kCascadePrefix    cascade_layer_ns, cascade_merge_ns_per_request_layer: linear once the
//                     attention rates are known, non-negative least squares.
//   kOverhead         step_fixed_ns, per_request_ns: non-negative least squares. layer_fixed_ns
//                     is set to 0: with one model, layers · layer_fixed_ns is a constant that
//                     step_fixed_ns absorbs.
// A parameter is fitted only when rows inform it (a roofline side needs ≥ 2 rows on it; the
// reuse parameters need rows where requests share KV; the window needs batches larger than it);
// otherwise it keeps its base value and source, or is raised to the bound the rows imply (then
// `measured`, the note says "lower bound"). A fitted value outside ProfileParameters()'s range
// (an efficiency above 1 on a CPU whose weights sit in the LLC) is clamped to the bound, the
// others refitted, and the report gives both the unclamped value and the MAPE it would have had.
//
// Term rows: a row may measure only some terms (published data, calib/published_rows.h): a term
// whose measured ns is 0 is unknown and the row does not inform it; a measured total_ns of 0
// leaves the row out of the whole-step error (fit_rows counts only rows with a total).
//
// Rows i with i % holdout_every == holdout_every − 1 are held out: fitted on none, reported on.
// Cost: a few thousand evaluations of the cost model per row; ~10 ms for 500 rows.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "sim/engine/device_profile.h"
#include "sim/engine/engine.h"
#include "sim/engine/model_config.h"
#include "sim/engine/model_engine.h"

namespace feather::calib {

struct FitOptions {
  // Every k-th row (indices k−1, 2k−1, …) is held out; 0 holds out nothing; 1 is invalid.
  uint32_t holdout_every = 5;
  // ProfileParameters() names kept at their base values. The capacity and peak parameters
  // (memory_bytes, activation_reserve_bytes, dram_bw_bytes_per_s, dense_flops_per_s, sm_count,
  // weight_stream_bw_bytes_per_s) are never fitted: they come from probes or datasheets.
  std::vector<std::string> hold;
  // How the notes name the rows, e.g. "results/calib/cpu-rows.h5"; empty: "the calibration rows".
  std::string rows_label;
  // The source fitted parameters get: kMeasured for rows this project measured, kPublished for
  // rows read from published data (calib/published_rows.h).
  ParameterSource fitted_source = ParameterSource::kMeasured;
  // Every timed repetition of each row, or empty: one entry per row (rows.size() entries), each of
  // 2 or more timings of which the row is the median by total (hw::MedianByTotal), as
  // calib/harness.h measures them. With them the report gives the hold-out noise floor of each
  // term and of the step (TermFit::holdout_noise_floor): the hold-out MAPE that a model pricing
  // every row's true median exactly would still show. Estimated by bootstrap: per row, the mean
  // over kNoiseFloorResamples resamples (with replacement, a fixed seed per row) of its
  // repetitions of |the resample's median by total / the row's − 1| for the term (decode
  // attention with kv_reuse), averaged over the term's held-out rows. A median of 5 noisy
  // repetitions is itself that far from the machine's mean, so no model beats it on average. An
  // estimate: simulated with 5 repetitions it reads 0.92x the true floor for normal noise and
  // 1.47x when 1 repetition in 10 is slowed by an exponential tail (calib/README.md).
  std::span<const std::vector<StepTiming>> repetitions = {};
};

inline constexpr uint32_t kNoiseFloorResamples = 256;

// Whether row `index` is held out under `holdout_every` (see FitOptions).
[[nodiscard]] bool IsHoldoutRow(size_t index, uint32_t holdout_every);

// Whether FitOptions::hold may name `name`: a profile parameter that the fit can free (the
// capacity and peak parameters never are). FitProfile checks it; a command can check it before
// it measures anything.
enum class HoldCheck { kHoldable, kUnknown, kNeverFitted };
[[nodiscard]] HoldCheck CheckHoldable(std::string_view name);

struct ParameterFit {
  std::string_view name;  // ProfileParameters() name
  double base_value = 0;
  double value = 0;            // what the profile holds now
  bool fitted = false;         // false: kept at the base value (held, or not informed by the rows)
  bool lower_bound = false;    // value is the least the rows allow, not a point estimate
  bool clamped = false;        // the unconstrained optimum was out of range; value is the bound
  double unclamped_value = 0;  // the unconstrained optimum (== value unless clamped)
  std::string why;             // for a parameter not fitted, clamped or bounded: the reason
};

struct TermFit {
  StepTerm term = StepTerm::kGemm;  // kDecodeAttention stands for kDecodeAttention + kKvReuse
  bool fitted = false;              // false: no informative rows, every parameter kept
  std::vector<ParameterFit> parameters;
  size_t fit_rows = 0;  // informative rows the fit used
  size_t holdout_rows = 0;
  std::optional<double> fit_mape;  // fractions; nullopt without rows
  std::optional<double> holdout_mape;
  // With a clamp: the fit MAPE the unclamped optimum had (the price of staying in range).
  std::optional<double> unclamped_fit_mape;
  // With FitOptions::repetitions and held-out rows: the MAPE a perfect model would show on them.
  std::optional<double> holdout_noise_floor;
  std::string summary;  // one line: what was fitted, what was not and why
};

struct CalibrationFit {
  // base + fitted fields; profile.fit filled, measured_on kept, one provenance entry appended
  // ("calibration fit (calib/fit.h) on <rows_label>: N steps, step-time MAPE …").
  DeviceProfile profile;
  std::vector<TermFit> terms;  // gemm, decode_attention, cascade_prefix, prefill_attention,
                               // overhead (StepTerm order; fitted gemm, decode, prefill,
                               // cascade, overhead)
  size_t fit_rows = 0;         // rows with a positive measured total_ns, not held out (0 when
                               // every row is a term row: fit_mape is then 0)
  size_t holdout_rows = 0;
  double fit_mape = 0;  // |Price(shape).total_ns − measured.total_ns| / measured.total_ns, mean
  std::optional<double> holdout_mape;
  std::optional<double> holdout_noise_floor;  // of the step total (see TermFit)
};

// Fits `base` to `rows` (see the file comment). Throws std::invalid_argument for bad options
// (holdout_every == 1, an unknown or never-fitted name in `hold`, repetitions that are not one
// entry of 2+ timings per row), no rows with a positive
// measured total or term, a row with a negative or non-finite field, or a base profile whose
// peaks are not positive.
[[nodiscard]] CalibrationFit FitProfile(const DeviceProfile& base, const ModelConfig& model,
                                        std::span<const MeasuredStep> rows,
                                        const FitOptions& options = {});

// A plain-text table of the fit (one line per term and parameter) for the CLI and logs.
[[nodiscard]] std::string FormatFitReport(const CalibrationFit& fit);

}  // namespace feather::calib
