// rows_csv.cc: calibration rows to and from CSV (see rows_csv.h).
#include "calib/rows_csv.h"

#include <array>
#include <charconv>
#include <cmath>
#include <iomanip>
#include <limits>
#include <optional>
#include <sstream>

#include "calib/fit.h"
#include "hw/interleaved_passes.h"
#include "base/input_error.h"
#include "base/input_text.h"

namespace feather::calib {
namespace {

// The StepShape columns, in file order, with the member each one fills.
struct ShapeColumn {
  std::string_view name;
  double StepShape::*member;
};
constexpr std::array<ShapeColumn, 10> kShapeColumns = {{
    {"requests", &StepShape::requests},
    {"decode_requests", &StepShape::decode_requests},
    {"prefill_requests", &StepShape::prefill_requests},
    {"new_tokens", &StepShape::new_tokens},
    {"sampled_tokens", &StepShape::sampled_tokens},
    {"cascade_prefix_tokens", &StepShape::cascade_prefix_tokens},
    {"decode_kv_tokens", &StepShape::decode_kv_tokens},
    {"decode_kv_unique_tokens", &StepShape::decode_kv_unique_tokens},
    {"prefill_pairs", &StepShape::prefill_pairs},
    {"prefill_kv_tokens", &StepShape::prefill_kv_tokens},
}};

std::string MeasuredColumn(size_t term) {
  return "measured_" + std::string(StepTermName(static_cast<StepTerm>(term))) + "_ns";
}

}  // namespace

std::optional<std::vector<std::string>> SplitCsvCells(std::string_view line) {
  std::vector<std::string> cells(1);
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        cells.back() += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        cells.back() += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      cells.emplace_back();
    } else {
      cells.back() += c;
    }
  }
  if (quoted) return std::nullopt;
  return cells;
}

namespace {

std::string Quote(std::string_view text) {
  std::string out = "\"";
  for (const char c : text) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

}  // namespace

std::string RowsToCsv(std::span<const std::string> labels, std::span<const MeasuredStep> rows,
                      const StepPricer& fitted, uint32_t holdout_every) {
  std::ostringstream csv;
  csv << "label,holdout";
  for (const ShapeColumn& c : kShapeColumns) csv << ',' << c.name;
  for (size_t t = 0; t < kNumStepTerms; ++t) csv << ',' << MeasuredColumn(t);
  csv << ",measured_total_ns,predicted_total_ns\n";
  csv << std::setprecision(17);
  for (size_t i = 0; i < rows.size(); ++i) {
    const StepShape& s = rows[i].shape;
    csv << Quote(i < labels.size() ? labels[i] : std::string()) << ','
        << (IsHoldoutRow(i, holdout_every) ? 1 : 0);
    for (const ShapeColumn& c : kShapeColumns) csv << ',' << s.*(c.member);
    for (const int64_t ns : rows[i].measured.term_ns) csv << ',' << ns;
    csv << ',' << rows[i].measured.total_ns << ',' << fitted.Price(s).total_ns << '\n';
  }
  return csv.str();
}

std::string PassesToCsv(std::span<const std::string> labels,
                        std::span<const std::vector<StepTiming>> repetitions) {
  std::ostringstream csv;
  csv << "label,pass";
  for (size_t t = 0; t < kNumStepTerms; ++t) csv << ',' << MeasuredColumn(t);
  csv << ",measured_total_ns\n";
  for (size_t i = 0; i < repetitions.size(); ++i) {
    const std::string label = Quote(i < labels.size() ? labels[i] : std::string());
    for (size_t pass = 0; pass < repetitions[i].size(); ++pass) {
      const StepTiming& timing = repetitions[i][pass];
      csv << label << ',' << pass + 1;
      for (const int64_t ns : timing.term_ns) csv << ',' << ns;
      csv << ',' << timing.total_ns << '\n';
    }
  }
  return csv.str();
}

std::vector<LabeledRow> ParseRowsCsv(std::string_view text, const std::string& display_name) {
  CappedInputProblems problems(display_name);
  const std::vector<std::string_view> lines = SplitLines(text);
  if (lines.empty()) throw InputError(display_name, 1, "", "empty: expected a header line");

  // Header: every required column once; holdout and predicted_total_ns may be there.
  const std::optional<std::vector<std::string>> header = SplitCsvCells(lines[0]);
  if (!header) throw InputError(display_name, 1, "", "unterminated quote in the header");
  constexpr size_t kAbsent = std::numeric_limits<size_t>::max();
  std::vector<std::string> required = {"label"};
  for (const ShapeColumn& c : kShapeColumns) required.emplace_back(c.name);
  for (size_t t = 0; t < kNumStepTerms; ++t) required.push_back(MeasuredColumn(t));
  required.emplace_back("measured_total_ns");
  std::vector<size_t> index(required.size(), kAbsent);
  for (size_t col = 0; col < header->size(); ++col) {
    const std::string& name = (*header)[col];
    bool known = name == "holdout" || name == "predicted_total_ns";
    for (size_t r = 0; r < required.size(); ++r) {
      if (required[r] != name) continue;
      known = true;
      if (index[r] != kAbsent) problems.Add(1, name, "column given twice");
      index[r] = col;
    }
    if (!known) problems.Add(1, name, "unknown column (rows_csv.h lists the columns)");
  }
  for (size_t r = 0; r < required.size(); ++r) {
    if (index[r] == kAbsent) problems.Add(1, required[r], "missing column");
  }
  problems.ThrowIfAny();

  std::vector<LabeledRow> rows;
  for (size_t n = 1; n < lines.size(); ++n) {
    const auto line = static_cast<uint32_t>(n + 1);
    if (lines[n].find_first_not_of(" \t") == std::string_view::npos) continue;
    const std::optional<std::vector<std::string>> cells = SplitCsvCells(lines[n]);
    if (!cells) {
      problems.Add(line, "", "unterminated quote");
      continue;
    }
    if (cells->size() != header->size()) {
      problems.Add(line, "", std::to_string(cells->size()) + " cells, the header has " +
                            std::to_string(header->size()));
      continue;
    }
    LabeledRow row;
    row.label = (*cells)[index[0]];
    auto number = [&](size_t r) -> std::optional<double> {
      const std::string& cell = (*cells)[index[r]];
      double value = 0;
      const auto [end, ec] = std::from_chars(cell.data(), cell.data() + cell.size(), value);
      if (ec != std::errc() || end != cell.data() + cell.size() || !std::isfinite(value) ||
          value < 0) {
        problems.Add(line, required[r], "expected a finite number >= 0, got '" + cell + "'");
        return std::nullopt;
      }
      return value;
    };
    auto integer = [&](size_t r) -> std::optional<int64_t> {
      const std::string& cell = (*cells)[index[r]];
      int64_t value = 0;
      const auto [end, ec] = std::from_chars(cell.data(), cell.data() + cell.size(), value);
      if (ec != std::errc() || end != cell.data() + cell.size() || value < 0) {
        problems.Add(line, required[r], "expected whole nanoseconds >= 0, got '" + cell + "'");
        return std::nullopt;
      }
      return value;
    };
    bool ok = true;
    for (size_t c = 0; c < kShapeColumns.size(); ++c) {
      const std::optional<double> v = number(1 + c);
      ok = ok && v.has_value();
      if (v) row.step.shape.*(kShapeColumns[c].member) = *v;
    }
    for (size_t t = 0; t < kNumStepTerms; ++t) {
      const std::optional<int64_t> v = integer(1 + kShapeColumns.size() + t);
      ok = ok && v.has_value();
      if (v) row.step.measured.term_ns[t] = *v;
    }
    const std::optional<int64_t> total = integer(required.size() - 1);
    ok = ok && total.has_value();
    if (!ok) continue;
    row.step.measured.total_ns = *total;
    row.step.measured.cascade_used = row.step.shape.cascade();
    rows.push_back(std::move(row));
  }
  if (rows.empty() && problems.empty()) {
    problems.Add(static_cast<uint32_t>(lines.size()), "", "no rows after the header");
  }
  problems.ThrowIfAny();
  return rows;
}

std::vector<std::vector<StepTiming>> ParsePassesCsv(std::string_view text,
                                                    const std::string& display_name,
                                                    std::span<const LabeledRow> rows) {
  CappedInputProblems problems(display_name);
  const std::vector<std::string_view> lines = SplitLines(text);
  if (lines.empty()) throw InputError(display_name, 1, "", "empty: expected a header line");
  const std::optional<std::vector<std::string>> header = SplitCsvCells(lines[0]);
  if (!header) throw InputError(display_name, 1, "", "unterminated quote in the header");
  std::vector<std::string> expected = {"label", "pass"};
  for (size_t t = 0; t < kNumStepTerms; ++t) expected.push_back(MeasuredColumn(t));
  expected.emplace_back("measured_total_ns");
  if (*header != expected) {
    std::string list;
    for (const std::string& name : expected) list += (list.empty() ? "" : ",") + name;
    throw InputError(display_name, 1, "", "expected the header " + list);
  }

  std::vector<std::vector<StepTiming>> repetitions(rows.size());
  size_t row = 0;             // the row the current line belongs to
  uint32_t expected_pass = 1;  // the pass the next line of that row must have
  uint32_t last_line = 1;
  // Closes row `row` (its lines are all read): 2+ passes, and its median is the row's timing.
  auto close_row = [&](uint32_t line) {
    const std::vector<StepTiming>& reps = repetitions[row];
    if (reps.size() < 2) {
      problems.Add(line, "pass",
                   "row " + std::to_string(row + 1) + " ('" + rows[row].label + "') has " +
                       std::to_string(reps.size()) + " pass(es); a noise floor needs 2 or more");
    } else if (const int64_t median = hw::MedianByTotal(reps).total_ns;
               median != rows[row].step.measured.total_ns) {
      problems.Add(line, "measured_total_ns",
                   "the median pass of row " + std::to_string(row + 1) + " ('" + rows[row].label +
                       "') took " + std::to_string(median) + " ns, the rows file says " +
                       std::to_string(rows[row].step.measured.total_ns) +
                       " ns: the files are not of the same calibration");
    }
  };
  for (size_t n = 1; n < lines.size() && problems.empty(); ++n) {
    const auto line = static_cast<uint32_t>(n + 1);
    if (lines[n].find_first_not_of(" \t") == std::string_view::npos) continue;
    last_line = line;
    const std::optional<std::vector<std::string>> cells = SplitCsvCells(lines[n]);
    if (!cells || cells->size() != expected.size()) {
      problems.Add(line, "", cells ? std::to_string(cells->size()) + " cells, the header has " +
                                         std::to_string(expected.size())
                                   : std::string("unterminated quote"));
      continue;
    }
    uint32_t pass = 0;
    const std::string& pass_cell = (*cells)[1];
    const auto [pass_end, pass_ec] =
        std::from_chars(pass_cell.data(), pass_cell.data() + pass_cell.size(), pass);
    if (pass_ec != std::errc() || pass_end != pass_cell.data() + pass_cell.size() || pass == 0) {
      problems.Add(line, "pass", "expected a pass number >= 1, got '" + pass_cell + "'");
      continue;
    }
    if (pass == 1 && expected_pass > 1) {  // the next row starts
      close_row(line);
      ++row;
      expected_pass = 1;
    }
    if (row >= rows.size()) {
      problems.Add(line, "label", "more rows than the rows file's " + std::to_string(rows.size()));
      continue;
    }
    if (pass != expected_pass) {
      problems.Add(line, "pass", "expected pass " + std::to_string(expected_pass) + " of row " +
                                     std::to_string(row + 1) + ", got " + pass_cell);
      continue;
    }
    if ((*cells)[0] != rows[row].label) {
      problems.Add(line, "label", "row " + std::to_string(row + 1) + " of the rows file is '" +
                                      rows[row].label + "', this line's is '" + (*cells)[0] + "'");
      continue;
    }
    StepTiming timing;
    bool ok = true;
    for (size_t c = 2; c < expected.size(); ++c) {
      const std::string& cell = (*cells)[c];
      int64_t value = 0;
      const auto [end, ec] = std::from_chars(cell.data(), cell.data() + cell.size(), value);
      if (ec != std::errc() || end != cell.data() + cell.size() || value < 0) {
        problems.Add(line, expected[c], "expected whole nanoseconds >= 0, got '" + cell + "'");
        ok = false;
        continue;
      }
      if (c + 1 < expected.size()) {
        timing.term_ns[c - 2] = value;
      } else {
        timing.total_ns = value;
      }
    }
    if (!ok) continue;
    repetitions[row].push_back(timing);
    ++expected_pass;
  }
  if (problems.empty()) {
    if (expected_pass == 1) {
      problems.Add(last_line, "", "no passes after the header");
    } else {
      close_row(last_line);
      if (row + 1 < rows.size()) {
        problems.Add(last_line, "label",
                     "passes for " + std::to_string(row + 1) + " rows, the rows file has " +
                         std::to_string(rows.size()));
      }
    }
  }
  problems.ThrowIfAny();
  return repetitions;
}

std::vector<std::vector<StepTiming>> LoadPassesCsv(const std::string& path,
                                                   std::span<const LabeledRow> rows) {
  return ParsePassesCsv(ReadTextFile(path, "calibration passes"), path, rows);
}

std::vector<LabeledRow> LoadRowsCsv(const std::string& path) {
  return ParseRowsCsv(ReadTextFile(path, "calibration rows"), path);
}

}  // namespace feather::calib
