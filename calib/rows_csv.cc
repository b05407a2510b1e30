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

std::vector<LabeledRow> LoadRowsCsv(const std::string& path) {
  return ParseRowsCsv(ReadTextFile(path, "calibration rows"), path);
}

}  // namespace feather::calib
