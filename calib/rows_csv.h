// rows_csv.h: calibration rows as CSV, the format `feather calibrate` writes beside a profile
// (PROFILE-rows.csv) and `feather calibrate --refit ROWS...` reads back, so a profile can be
// refitted (another hold-out, a model change, rows of several machines or runs) without
// measuring again.
//
// One header line, then one row per measured step; columns (order free on reading, all present):
//   label                     what was measured, quoted ("decode B=8 G=1 P=512 ...")
//   holdout                   1 when the fit that wrote the file held the row out (informative;
//                             a refit applies its own split by row position)
//   requests, decode_requests, prefill_requests, new_tokens, sampled_tokens,
//   cascade_prefix_tokens, decode_kv_tokens, decode_kv_unique_tokens, prefill_pairs,
//   prefill_kv_tokens         the StepShape (sim/engine/model_engine.h), finite and >= 0
//   measured_<term>_ns        each StepTerm's measured wall-clock ns (StepTermName order), >= 0
//   measured_total_ns         the step's measured total, >= 0
//   predicted_total_ns        the writing profile's prediction (informative; ignored on reading)
// Doubles are written with 17 significant digits, so a written shape reads back bit for bit.
// Reading reports every bad cell as FILE:LINE: COLUMN: message (InputError, base/input_error.h);
// a missing, unknown or repeated column is a problem of line 1. O(size of the file).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "sim/engine/model_engine.h"

namespace feather::calib {

struct LabeledRow {
  std::string label;
  MeasuredStep step;  // measured.cascade_used = shape.cascade()
};

// Splits one CSV line into cells: a cell in double quotes may hold commas and "" for a quote.
// nullopt for an unterminated quote. (Shared with published_rows.h.)
[[nodiscard]] std::optional<std::vector<std::string>> SplitCsvCells(std::string_view line);

// The CSV text of `rows`; predicted_total_ns priced by `fitted`, holdout by `holdout_every`
// (see FitOptions). `labels` and `rows` have the same length.
[[nodiscard]] std::string RowsToCsv(std::span<const std::string> labels,
                                    std::span<const MeasuredStep> rows, const StepPricer& fitted,
                                    uint32_t holdout_every);

// PROFILE-passes.csv, beside the rows: every timed repetition of every row in pass order, one
// line each (label, pass from 1, the measured_<term>_ns columns, measured_total_ns), so that what
// a row's median hides shows: a pass in which the machine ran slower, a row slow in every pass.
// `calibrate --refit` reads it back beside the rows (ParsePassesCsv) for the hold-out noise floor.
// `labels` and `repetitions` have the same length.
[[nodiscard]] std::string PassesToCsv(std::span<const std::string> labels,
                                      std::span<const std::vector<StepTiming>> repetitions);

// Reads PROFILE-passes.csv back as the repetitions of `rows`, the rows file of the same
// calibration: the file's lines run row by row in `rows` order, each row's passes 1, 2, … in
// order, with the row's label. Entry i holds row i's timings in pass order. Checks that the two
// files belong together (the same labels in the same order, every row 2 or more passes, the
// median repetition by total being the row's total); every problem is FILE:LINE: COLUMN: message
// (InputError) naming the passes file. `refit` uses it for the hold-out noise floor (fit.h
// FitOptions::repetitions).
[[nodiscard]] std::vector<std::vector<StepTiming>> ParsePassesCsv(
    std::string_view text, const std::string& display_name, std::span<const LabeledRow> rows);
[[nodiscard]] std::vector<std::vector<StepTiming>> LoadPassesCsv(const std::string& path,
                                                                 std::span<const LabeledRow> rows);

// Parses rows written by RowsToCsv; `display_name` names the file in messages.
[[nodiscard]] std::vector<LabeledRow> ParseRowsCsv(std::string_view text,
                                                   const std::string& display_name);
// The same from a file (InputError when it cannot be read).
[[nodiscard]] std::vector<LabeledRow> LoadRowsCsv(const std::string& path);

}  // namespace feather::calib
